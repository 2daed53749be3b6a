/* BF16 in the model (pt_model_set_bf16): BF16 copies of the matrix weights,
 * FP32 released where the weights are frozen.
 *
 * Every 2-D base tensor (embeddings, projections, LM head) gets a BF16 copy
 * in m->params16, at the same offset as in the FP32 block, so tensors that
 * are adjacent in FP32 (q|k|v, gate|up) are adjacent in BF16 too.
 * - Frozen base (LoRA attached, or PT_BF16_FROZEN): the BF16 copy is the
 *   weight; its FP32 pages are given back to the OS (madvise) and the tensor
 *   table shows data == NULL.  Products widen it to FP32 on CPUs without
 *   BF16 arithmetic and multiply in BF16 on those with it.
 * - Trainable base: FP32 stays the master (optimizers update it); the BF16
 *   copy serves the products only on a path with BF16 arithmetic (mixed
 *   precision) and is refreshed before a forward whenever the weights
 *   changed (pt_model_weights_changed). */
#include "model/transformer.h"

#include "core/core.h"
#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"

#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static bool is_matrix(const pt_model *m, size_t i)
{
    return i < pt__model_base_tensor_count(m) && m->tensors[i].ndim == 2;
}

/* Zero n floats at p: whole pages given back to the OS (they read as
 * zeros), the edges written. */
void pt__model_zero(float *p, size_t n)
{
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)(p + n);
    uintptr_t a2 = ps > 0 ? (a + (uintptr_t)ps - 1) & ~((uintptr_t)ps - 1) : b;
    uintptr_t b2 = ps > 0 ? b & ~((uintptr_t)ps - 1) : b;
    if (b2 <= a2 || madvise((void *)a2, b2 - a2, MADV_DONTNEED) != 0) {
        memset(p, 0, n * sizeof *p);
        return;
    }
    memset(p, 0, a2 - a);
    memset((void *)b2, 0, b - b2);
}

void pt__model_release_pages(float *p, size_t n)
{
    pt__release_pages(p, n * sizeof *p);
}

static void convert_matrices(pt_model *m)
{
    for (size_t i = 0; i < m->ntensors; i++)
        if (is_matrix(m, i) && m->tensors[i].data)
            pt__f32_to_bf16_n(m->params16 + m->offsets[i], m->tensors[i].data, m->tensors[i].numel);
}

/* Frozen base: FP32 -> BF16 once, FP32 released.  Trainable again: BF16
 * widened back into FP32 (values keep their BF16 rounding). */
static void store(pt_model *m, bool frozen)
{
    for (size_t i = 0; i < m->ntensors; i++) {
        if (!is_matrix(m, i))
            continue;
        pt_tensor_ref *t = &m->tensors[i];
        float *fp = m->params + m->offsets[i];
        if (frozen && !m->bf16_stored) {
            pt__f32_to_bf16_n(m->params16 + m->offsets[i], fp, t->numel);
            pt__release_pages(fp, t->numel * sizeof *fp);
            t->data = NULL;
        } else if (!frozen && m->bf16_stored) {
            pt__bf16_to_f32_n(fp, m->params16 + m->offsets[i], t->numel);
            t->data = fp;
        }
    }
    m->bf16_stored = frozen;
    m->bf16_version = m->weights_version;
}

static bool base_frozen(const pt_model *m)
{
    return m->bf16_mode == PT_BF16_FROZEN ||
           (pt__model_base_tensor_count(m) > 0 && !m->tensors[0].trainable);
}

int pt__model_bf16_sync(pt_model *m)
{
    if (pt__model_is_quantized(m))
        return PT_OK; /* no BF16 copies: the mode is read by the quantized products */
    if (m->bf16_mode == PT_BF16_OFF) {
        if (m->bf16_stored)
            store(m, false);
        pt__free_aligned(m->params16);
        m->params16 = NULL;
        return PT_OK;
    }
    if (!m->params16) {
        m->params16 = pt__malloc_aligned(m->num_floats * sizeof(pt_bf16));
        if (!m->params16)
            return pt__err(PT_ENOMEM, "BF16 copy of %zu parameters", (size_t)m->num_params);
        m->bf16_version = m->weights_version - 1; /* not converted yet */
    }
    bool frozen = base_frozen(m);
    if (frozen && m->bf16_mode == PT_BF16_FROZEN)
        for (size_t i = 0; i < pt__model_base_tensor_count(m); i++)
            m->tensors[i].trainable = false;
    if (frozen != m->bf16_stored)
        store(m, frozen);
    return PT_OK;
}

int pt_model_set_bf16(pt_model *m, int mode)
{
    PT_CHECK_NULL(m);
    PT_CHECK_ARG(mode >= PT_BF16_OFF && mode <= PT_BF16_FROZEN, mode,
                 "%d is not a pt_bf16_mode (0 off, 1 on, 2 frozen)", mode);
    if (pt__model_is_quantized(m)) {
        /* the base stays in its blocks, frozen: the mode says whether the
         * products of prefill and training are BF16 ones where the CPU has
         * BF16 arithmetic (kernels/quant_gemm_bf16.c) */
        m->bf16_mode = mode;
        return PT_OK;
    }
    if (m->bf16_mode == PT_BF16_FROZEN && mode != PT_BF16_FROZEN && !m->lora)
        for (size_t i = 0; i < pt__model_base_tensor_count(m); i++)
            m->tensors[i].trainable = true;
    int prev = m->bf16_mode;
    m->bf16_mode = mode;
    int st = pt__model_bf16_sync(m);
    if (st != PT_OK) {
        m->bf16_mode = prev;
        return pt__err_prefix(st, "pt_model_set_bf16");
    }
    if (mode == PT_BF16_FROZEN || prev == PT_BF16_FROZEN)
        pt__model_bump_generation(m, mode == PT_BF16_FROZEN ? "base frozen in BF16" : "base unfrozen");
    return PT_OK;
}

int pt_model_get_bf16(const pt_model *m)
{
    return m ? m->bf16_mode : PT_BF16_OFF;
}

void pt_model_weights_changed(pt_model *m)
{
    if (m)
        m->weights_version++;
}

int pt__model_bf16_stream_begin(pt_model *m)
{
    m->params16 = pt__malloc_aligned(m->num_floats * sizeof(pt_bf16));
    if (!m->params16)
        return pt__err(PT_ENOMEM, "BF16 copy of %zu parameters", (size_t)m->num_params);
    m->bf16_mode = PT_BF16_FROZEN;
    m->bf16_stored = true;
    m->bf16_version = m->weights_version;
    for (size_t i = 0; i < pt__model_base_tensor_count(m); i++)
        m->tensors[i].trainable = false;
    return PT_OK;
}

void pt__model_bf16_stream_tensor(pt_model *m, size_t i)
{
    pt_tensor_ref *t = &m->tensors[i];
    if (!m->bf16_stored || !is_matrix(m, i) || !t->data)
        return;
    pt__f32_to_bf16_n(m->params16 + m->offsets[i], t->data, t->numel);
    pt__release_pages(t->data, t->numel * sizeof *t->data);
    t->data = NULL;
}

uint64_t pt__model_weights_version(const pt_model *m)
{
    return m->weights_version;
}

bool pt__model_bf16_following(const pt_model *m)
{
    return m->params16 && !m->bf16_stored && pt__cpu_bf16_compute() &&
           m->bf16_version == m->weights_version;
}

uint16_t *pt__model_bf16_copy(pt_model *m, size_t i)
{
    return is_matrix(m, i) ? m->params16 + m->offsets[i] : NULL;
}

void pt__model_bf16_followed(pt_model *m)
{
    m->bf16_version = m->weights_version;
}

void pt__model_bf16_prepare(pt_model *m)
{
    if (!m->params16 || m->bf16_stored || !pt__cpu_bf16_compute())
        return;
    pthread_mutex_lock(&m->bf16_lock);
    if (m->bf16_version != m->weights_version) {
        convert_matrices(m);
        m->bf16_version = m->weights_version;
    }
    pthread_mutex_unlock(&m->bf16_lock);
}

const pt_bf16 *pt__model_w16(const pt_model *m, const float *w)
{
    if (!m->params16 || !w)
        return NULL;
    if (!m->bf16_stored && !pt__cpu_bf16_compute())
        return NULL;
    return m->params16 + (w - m->params);
}

const float *pt__tensor_values(const pt_model *m, const pt_tensor_ref *t, float **tmp)
{
    *tmp = NULL;
    if (t->data)
        return t->data;
    size_t i = (size_t)(t - m->tensors);
    if (i < m->ntensors && pt__model_tensor_qtype(m, i)) {
        *tmp = pt__malloc_array(t->numel ? t->numel : 1, sizeof(float));
        if (!*tmp) {
            pt__err(PT_ENOMEM, "dequantizing tensor '%s'", t->name);
            return NULL;
        }
        pt__model_quant_values(m, i, *tmp);
        return *tmp;
    }
    if (!m->params16 || i >= m->ntensors) {
        pt__err(PT_ESTATE, "tensor '%s' has no values", t->name);
        return NULL;
    }
    *tmp = pt__malloc_array(t->numel ? t->numel : 1, sizeof(float));
    if (!*tmp) {
        pt__err(PT_ENOMEM, "widening BF16 tensor '%s'", t->name);
        return NULL;
    }
    pt__bf16_to_f32_n(*tmp, m->params16 + m->offsets[i], t->numel);
    return *tmp;
}

void pt__model_embed(const pt_model *m, float *x, const int32_t *ids, size_t n)
{
    const size_t H = (size_t)m->cfg.hidden_size;
    if (pt__model_quant_embed(m, x, ids, n))
        return;
    if (!m->bf16_stored) {
        pt__embedding_forward(x, m->w.embed, ids, n, H);
        return;
    }
    const pt_bf16 *e = pt__model_w16(m, m->w.embed);
    for (size_t i = 0; i < n; i++) {
        const pt_bf16 *row = e + (size_t)ids[i] * H;
        for (size_t j = 0; j < H; j++)
            x[i * H + j] = pt__bf16_to_f32(row[j]);
    }
}

void pt__model_bf16_unstore(pt_model *m)
{
    if (m->bf16_stored)
        store(m, false);
}

int pt_model_copy_tensor(float *dst, size_t n, const pt_model *m, const char *name)
{
    PT_CHECK_NULL(dst);
    PT_CHECK_NULL(m);
    PT_CHECK_NULL(name);
    const pt_tensor_ref *t = pt__model_find_tensor(m, name);
    if (!t)
        return pt__err(PT_ENOTFOUND, "pt_model_copy_tensor: the model has no tensor '%s'", name);
    if (n != t->numel)
        return pt__err(PT_ESHAPE, "pt_model_copy_tensor: '%s' has %zu values, not %zu", name,
                      t->numel, n);
    if (t->data)
        memcpy(dst, t->data, n * sizeof *dst);
    else if (pt__model_tensor_qtype(m, (size_t)(t - m->tensors)))
        pt__model_quant_values(m, (size_t)(t - m->tensors), dst);
    else
        pt__bf16_to_f32_n(dst, m->params16 + m->offsets[t - m->tensors], n);
    return PT_OK;
}
