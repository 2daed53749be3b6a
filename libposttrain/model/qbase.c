/* A quantized base (issue 23): a GGUF's quantized 2-D tensors kept in
 * ggml's blocks (kernels/quant.h) in one allocation, m->qblocks, in table
 * order, so tensors adjacent in the FP32 layout (q|k|v, gate|up) are
 * adjacent there too.  Their FP32 data is NULL (pages released); the base
 * is frozen: LoRA adapters train on it, full fine-tuning is refused. */
#include "model/transformer.h"

#include "core/core.h"
#include "kernels/cpu.h"
#include "kernels/qgemv.h"
#include "kernels/quant.h"

#include <stdio.h>
#include <string.h>

int pt__model_quant_reserve(pt_model *m, size_t bytes)
{
    size_t nb = pt__model_base_tensor_count(m);
    if (m->qtype)
        return pt__err(PT_EINTERNAL, "pt__model_quant_reserve: called twice");
    m->qtype = pt__calloc(nb ? nb : 1, sizeof *m->qtype);
    m->qoff = pt__calloc(nb ? nb : 1, sizeof *m->qoff);
    m->qblocks = pt__malloc_aligned(bytes ? bytes : 1);
    if (!m->qtype || !m->qoff || !m->qblocks)
        return pt__err(PT_ENOMEM, "quantized weights: %zu bytes", bytes);
    m->qbytes = bytes;
    m->qused = 0;
    return PT_OK;
}

uint8_t *pt__model_quant_place(pt_model *m, size_t i, int type, size_t nbytes)
{
    if (!m->qtype || i >= pt__model_base_tensor_count(m) || nbytes > m->qbytes - m->qused)
        return NULL;
    m->qtype[i] = type;
    m->qoff[i] = m->qused;
    m->qused += nbytes;
    return m->qblocks + m->qoff[i];
}

void pt__model_quant_finish(pt_model *m)
{
    if (!m->qtype)
        return;
    /* the 16-row kernels' layout (kernels/qpack.c) where the CPU runs them:
     * the same bytes, so the same memory; a tensor that cannot be packed
     * (no memory for 16 of its rows) stays as the file has it */
    const bool pack = pt__qgemv_packs();
    for (size_t i = 0; i < pt__model_base_tensor_count(m); i++) {
        pt_tensor_ref *t = &m->tensors[i];
        if (m->qtype[i]) {
            pt__model_release_pages(m->params + m->offsets[i], t->numel);
            t->data = NULL;
            if (pack && t->ndim == 2 &&
                pt__qpack(m->qtype[i], m->qblocks + m->qoff[i], (size_t)t->shape[0], (size_t)t->shape[1]) == PT_OK)
                m->qtype[i] |= PT_QPACK;
        }
        t->trainable = false;
        t->grad = NULL;
    }
}

bool pt__model_is_quantized(const pt_model *m)
{
    if (!m || !m->qtype)
        return false;
    for (size_t i = 0; i < pt__model_base_tensor_count(m); i++)
        if (m->qtype[i])
            return true;
    return false;
}

int pt__model_tensor_qtype(const pt_model *m, size_t i)
{
    return m && m->qtype && i < pt__model_base_tensor_count(m) ? m->qtype[i] & ~PT_QPACK : 0;
}

int pt__model_check_not_quantized(const pt_model *m, const char *what, const char *advice)
{
    if (!pt__model_is_quantized(m))
        return PT_OK;
    const char *ty = "?";
    for (size_t i = 0; i < pt__model_base_tensor_count(m); i++)
        if (m->qtype[i]) {
            ty = pt__quant_type_name(m->qtype[i]);
            break;
        }
    return pt__err(PT_EUNSUPPORTED, "%s: the base model is quantized (%s blocks, from a GGUF "
                  "file): %s", what, ty ? ty : "?", advice);
}

/* The base tensor whose FP32 storage starts at offset off, or SIZE_MAX. */
static size_t tensor_at(const pt_model *m, size_t off)
{
    size_t nb = pt__model_base_tensor_count(m);
    for (size_t i = 0; i < nb; i++)
        if (m->offsets[i] == off && m->tensors[i].ndim == 2)
            return i;
    return SIZE_MAX;
}

pt_qweight pt__model_wq(const pt_model *m, const float *w, size_t rows)
{
    pt_qweight q = { 0 };
    if (!m->qtype || !w || w < m->params || w >= m->params + m->num_floats)
        return q;
    size_t i = tensor_at(m, (size_t)(w - m->params));
    if (i == SIZE_MAX)
        return q;
    bool any = false;
    size_t nb = pt__model_base_tensor_count(m), got = 0;
    pt_qweight s = { 0 };
    for (; i < nb && got < rows; i++) {
        const pt_tensor_ref *t = &m->tensors[i];
        size_t r = (size_t)t->shape[0];
        int ty = m->qtype[i];
        const void *p = ty ? (const void *)(m->qblocks + m->qoff[i])
                           : (const void *)(m->params + m->offsets[i]);
        any |= ty != 0;
        pt_qseg *last = s.nseg ? &s.seg[s.nseg - 1] : NULL;
        /* packed rows go on in the next tensor only after whole groups */
        if (last && last->type == ty && ty != 0 && (!(ty & PT_QPACK) || last->rows % 16 == 0) &&
            (const uint8_t *)last->w + pt__quant_row_bytes(ty, (size_t)t->shape[1]) * last->rows ==
                (const uint8_t *)p) {
            last->rows += r;
        } else if (last && last->type == 0 && ty == 0 &&
                   (const float *)last->w + (size_t)t->shape[1] * last->rows == (const float *)p) {
            last->rows += r;
        } else {
            if (s.nseg == 3)
                return q; /* cannot happen: at most q|k|v */
            s.seg[s.nseg++] = (pt_qseg){ ty, p, r };
        }
        got += r;
    }
    s.bf16 = m->bf16_mode != PT_BF16_OFF && pt__cpu_bf16_compute();
    return any && got == rows ? s : q;
}

/* Base tensor i's values (quantized) into dst. */
static void dequant_tensor(const pt_model *m, size_t i, float *dst)
{
    const pt_tensor_ref *t = &m->tensors[i];
    pt__dequant_tile(m->qtype[i], m->qblocks + m->qoff[i], (size_t)t->shape[0], (size_t)t->shape[1],
                    0, (size_t)t->shape[0], dst, (size_t)t->shape[1]);
}

int pt__model_quant_values(const pt_model *m, size_t i, float *dst)
{
    if (!pt__model_tensor_qtype(m, i))
        return PT_ENOTFOUND;
    dequant_tensor(m, i, dst);
    return PT_OK;
}

bool pt__model_quant_embed(const pt_model *m, float *x, const int32_t *ids, size_t n)
{
    size_t nb = pt__model_base_tensor_count(m);
    size_t i = m->qtype ? tensor_at(m, (size_t)(m->w.embed - m->params)) : SIZE_MAX;
    if (i >= nb || !m->qtype[i])
        return false;
    const size_t H = (size_t)m->cfg.hidden_size;
    const size_t V = (size_t)m->tensors[i].shape[0];
    for (size_t r = 0; r < n; r++)
        pt__dequant_tile(m->qtype[i], m->qblocks + m->qoff[i], V, H, (size_t)ids[r], (size_t)ids[r] + 1,
                        x + r * H, H);
    return true;
}

/* Quantize on load (pt_model_load_options.quantize): every 2-D base tensor
 * whose rows are whole blocks, as llama-quantize --pure; the others stay
 * FP32.  Rows are independent, so the blocks are llama-quantize's for the
 * same values (its files differ only in the Q/K row order). */
int pt__model_quantize(pt_model *m, int type)
{
    if (type != 8 && type != 2)
        return pt__err(PT_EUNSUPPORTED, "quantizing on load: type %d is not Q8_0 (8) or Q4_0 (2)",
                      type);
    if (m->qtype)
        return pt__model_check_not_quantized(m, "quantizing on load", "it is quantized already");
    if (m->lora || m->grads || m->bf16_mode != PT_BF16_OFF)
        return pt__err(PT_ESTATE, "quantizing on load: the model has adapters, gradients or BF16 "
                      "weights");
    size_t nb = pt__model_base_tensor_count(m), bytes = 0;
    for (size_t i = 0; i < nb; i++) {
        const pt_tensor_ref *t = &m->tensors[i];
        if (t->ndim == 2)
            bytes += (size_t)t->shape[0] * pt__quant_row_bytes(type, (size_t)t->shape[1]);
    }
    if (bytes == 0)
        return PT_OK; /* nothing has whole blocks: the model stays FP32 */
    int st = pt__model_quant_reserve(m, bytes);
    for (size_t i = 0; st == PT_OK && i < nb; i++) {
        const pt_tensor_ref *t = &m->tensors[i];
        size_t rb = t->ndim == 2 ? pt__quant_row_bytes(type, (size_t)t->shape[1]) : 0;
        if (rb == 0)
            continue;
        uint8_t *dst = pt__model_quant_place(m, i, type, rb * (size_t)t->shape[0]);
        for (int64_t r = 0; st == PT_OK && r < t->shape[0]; r++)
            st = pt__quant_row(type, t->data + (size_t)r * (size_t)t->shape[1], dst + (size_t)r * rb,
                              (size_t)t->shape[1]);
        if (st)
            st = pt__err_prefix(st, "quantizing tensor '%s'", t->name);
    }
    if (st) {
        pt_free(m->qtype);
        pt_free(m->qoff);
        pt__free_aligned(m->qblocks);
        m->qtype = NULL, m->qoff = NULL, m->qblocks = NULL;
        return st;
    }
    pt__model_quant_finish(m);
    pt__model_bump_generation(m, "weights quantized");
    return PT_OK;
}
