/* A GGUF model file into a pt_model (gguf_import.h): the tensors checked
 * against the schema under llama.cpp's names, read to F32 with Q and K
 * un-permuted for llama-type architectures, and the tokenizer rebuilt from
 * the metadata (text/tok_gguf.h). */
#include "core/core.h"
#include "io/path.h"
#include "kernels/quant.h"
#include "model/model.h"
#include "model/schema.h"
#include "modelio/gguf_import.h"
#include "modelio/gguf_internal.h"
#include "modelio/modelio_internal.h"
#include "text/tok_gguf.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

bool pt__gguf_is_file(const char *path)
{
    if (!pt__is_file(path))
        return false;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return false;
    char magic[4];
    bool yes = read(fd, magic, 4) == 4 && memcmp(magic, PT_GGUF_MAGIC, 4) == 0;
    close(fd);
    return yes;
}

/* ---- the tensors against the schema ------------------------------------------------ */

static void ne_str(char *buf, size_t n, uint32_t ndim, const uint64_t *ne)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (uint32_t i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%llu", i ? ", " : "", (unsigned long long)ne[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

/* Schema tensor e is in g under its llama.cpp name, with the GGUF shape
 * (ne[0] the fastest: {cols, rows}) and a float type. */
static int check_tensor(const pt_gguf *g, const pt_schema_tensor *e, const char *path)
{
    char name[PT_TENSOR_NAME_MAX];
    pt__tensor_gguf_name(name, sizeof name, e->row, e->layer);
    const pt_gguf_tensor *t = pt__gguf_find_tensor(g, name);
    if (!t)
        return pt__err(PT_ENOTFOUND, "%s: tensor '%s' (%s) is missing", path, name, e->name);
    uint64_t want[2] = { (uint64_t)(e->ndim == 2 ? e->shape[1] : e->shape[0]),
                         (uint64_t)e->shape[0] };
    if (t->ndim != (uint32_t)e->ndim || t->ne[0] != want[0] || (e->ndim == 2 && t->ne[1] != want[1])) {
        char got[96], need[64];
        ne_str(got, sizeof got, t->ndim, t->ne);
        ne_str(need, sizeof need, (uint32_t)e->ndim, want);
        return pt__err(PT_ESHAPE, "%s: tensor '%s' has ne %s, the config needs %s", path, name,
                      got, need);
    }
    if (!pt__ggml_type_is_float(t->type) && !pt__quant_supported(t->type)) {
        const char *tn = pt__ggml_type_name(t->type);
        return pt__err(PT_EUNSUPPORTED, "%s: tensor '%s' has type %s, which this library does not "
                      "read (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K "
                      "are)", path, name, tn ? tn : "?");
    }
    return PT_OK;
}

/* Whether name is one of the n schema tensors (or rope_freqs.weight, which
 * the configuration consumed). */
static bool expected(const char *name, const pt_schema_tensor *e, size_t n)
{
    if (strcmp(name, "rope_freqs.weight") == 0)
        return true;
    char buf[PT_TENSOR_NAME_MAX];
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, pt__tensor_gguf_name(buf, sizeof buf, e[i].row, e[i].layer)) == 0)
            return true;
    return false;
}

int pt__gguf_weights_check(const pt_gguf *g, const pt_model_config *cfg, const char *path)
{
    pt_schema_tensor *e = NULL;
    size_t n = 0;
    int st = pt__schema_tensors(&e, &n, cfg);
    for (size_t i = 0; st == PT_OK && i < n; i++)
        st = check_tensor(g, &e[i], path);
    /* every schema tensor is present and names are unique: more tensors
     * than the schema's (and rope_freqs) means an unexpected one */
    size_t nt = pt__gguf_tensor_count(g);
    for (size_t i = 0; st == PT_OK && nt > n && i < nt; i++) {
        const char *name = pt__gguf_tensor_at(g, i)->name;
        if (!expected(name, e, n))
            st = pt__err(PT_EFORMAT, "%s: unexpected tensor '%s' (not part of a %s model with this "
                        "config)", path, name, pt_arch_name(cfg->arch));
    }
    pt_free(e);
    return st;
}

/* ---- reading ---------------------------------------------------------------------------- */

/* The heads whose Q/K rows the converter permuted for tensor r, or 0. */
static int permuted_heads(const pt_tensor_ref *r, const pt_model_config *c)
{
    if (!pt__gguf_arch_permutes(c->arch))
        return 0;
    if (r->id == PT_T_WQ || r->id == PT_T_BQ)
        return c->num_attention_heads;
    if (r->id == PT_T_WK || r->id == PT_T_BK)
        return c->num_key_value_heads;
    return 0;
}

static const pt_gguf_tensor *gguf_tensor_of(const pt_gguf *g, const pt_tensor_ref *r, char *name,
                                            size_t len)
{
    pt__tensor_gguf_name(name, len, pt__tensor_row_get((pt_tensor_id)r->id), r->layer);
    return pt__gguf_find_tensor(g, name);
}

/* Blocks checked (exact size, finite scales), named after the tensor. */
static int check_blocks(const pt_gguf_tensor *t, const pt_tensor_ref *r, const char *name,
                        const char *path)
{
    size_t rows = r->ndim == 2 ? (size_t)r->shape[0] : 1;
    size_t cols = r->ndim == 2 ? (size_t)r->shape[1] : (size_t)r->shape[0];
    int st = pt__quant_check(t->type, t->data, t->nbytes, rows, cols, name);
    return st ? pt__err_prefix(st, "%s", path) : PT_OK;
}

/* A quantized 2-D tensor: its blocks copied into the model's quantized
 * storage (Q/K rows un-permuted as whole rows of blocks).  The file's
 * pages of it are given back once copied (a mapped file: nothing reads them
 * again), so a load peaks at the blocks plus one tensor, not twice the file. */
static int place_tensor(pt_model *m, size_t i, const pt_gguf_tensor *t, int heads,
                        const char *name, const char *path, bool mapped)
{
    const pt_tensor_ref *r = pt__model_tensor(m, i);
    int st = check_blocks(t, r, name, path);
    if (st)
        return st;
    uint8_t *dst = pt__model_quant_place(m, i, t->type, t->nbytes);
    if (!dst)
        return pt__err(PT_EINTERNAL, "%s: tensor '%s': no room for its blocks", path, name);
    if (heads)
        pt__gguf_unpermute_row_bytes(dst, t->data, r->shape[0],
                                    pt__quant_row_bytes(t->type, (size_t)r->shape[1]), heads);
    else
        memcpy(dst, t->data, t->nbytes);
    if (mapped)
        pt__release_pages(t->data, t->nbytes);
    return PT_OK;
}

static int read_tensor(pt_model *m, size_t i, const pt_gguf *g, const pt_model_config *c,
                       float *tmp, const char *path)
{
    const pt_tensor_ref *r = pt__model_tensor(m, i);
    char name[PT_TENSOR_NAME_MAX];
    const pt_gguf_tensor *t = gguf_tensor_of(g, r, name, sizeof name);
    int heads = permuted_heads(r, c);
    const bool mapped = pt__gguf_path(g) != NULL;
    if (pt__quant_supported(t->type) && r->ndim == 2)
        return place_tensor(m, i, t, heads, name, path, mapped);
    float *dst = heads ? tmp : r->data;
    int st;
    if (pt__quant_supported(t->type)) { /* a 1-D tensor in blocks: read as FP32 */
        st = check_blocks(t, r, name, path);
        if (st)
            return st;
        st = pt__dequant_row(t->type, t->data, dst, r->numel);
    } else {
        st = pt__gguf_read_f32(t, dst, r->numel);
    }
    if (!st)
        st = pt__err_nonfinite(dst, r->numel);
    if (st)
        return pt__err_prefix(st, "%s: tensor '%s'", path, name);
    if (heads)
        pt__gguf_unpermute_rows(r->data, tmp, r->shape[0], r->ndim == 2 ? r->shape[1] : 1, heads);
    if (mapped)
        pt__release_pages(t->data, t->nbytes);
    return PT_OK;
}

/* Bytes of the quantized 2-D tensors (kept in blocks). */
static size_t quantized_bytes(const pt_model *m, const pt_gguf *g)
{
    size_t total = 0;
    char name[PT_TENSOR_NAME_MAX];
    for (size_t i = 0; i < pt__model_base_tensor_count(m); i++) {
        const pt_tensor_ref *r = pt__model_tensor(m, i);
        const pt_gguf_tensor *t = gguf_tensor_of(g, r, name, sizeof name);
        if (r->ndim == 2 && pt__quant_supported(t->type))
            total += t->nbytes;
    }
    return total;
}

static int fill_model(pt_model *m, const pt_gguf *g, const pt_model_config *c, const char *path)
{
    size_t nt = pt__model_base_tensor_count(m), most = 0;
    for (size_t i = 0; i < nt; i++)
        if (permuted_heads(pt__model_tensor(m, i), c) && pt__model_tensor(m, i)->numel > most)
            most = pt__model_tensor(m, i)->numel;
    size_t qbytes = quantized_bytes(m, g);
    int st = qbytes ? pt__model_quant_reserve(m, qbytes) : PT_OK;
    if (st)
        return pt__err_prefix(st, "%s", path);
    float *tmp = most ? pt__malloc_array(most, sizeof(float)) : NULL;
    if (most && !tmp)
        return PT_ENOMEM;
    for (size_t i = 0; st == PT_OK && i < nt; i++)
        if (!(st = pt_check_abort()))
            st = read_tensor(m, i, g, c, tmp, path);
    pt_free(tmp);
    if (st == PT_OK && qbytes)
        pt__model_quant_finish(m);
    return st;
}

/* ---- the tokenizer ------------------------------------------------------------------- */

typedef struct gguf_tok {
    pt_tokenizer *tok;
    char *json, *config;   /* tokenizer.json, tokenizer_config.json */
} gguf_tok;

static void gguf_tok_free(gguf_tok *t)
{
    pt_tokenizer_free(t->tok);
    pt_free(t->json);
    pt_free(t->config);
    *t = (gguf_tok){ 0 };
}

/* The tokenizer rebuilt from the metadata, when wanted and present: one
 * this build cannot rebuild or run is a warning (the weights still load),
 * malformed metadata an error. */
static int load_tokenizer(gguf_tok *t, const pt_gguf *g, const pt_model_config *c,
                          const char *path, bool wanted)
{
    *t = (gguf_tok){ 0 };
    if (!wanted || !pt__tok_gguf_present(g))
        return PT_OK;
    int st = pt__tok_gguf_texts(&t->json, &t->config, g, path, c->max_position_embeddings);
    if (st == PT_OK && (st = pt_tokenizer_load_memory_config(&t->tok, t->json, strlen(t->json),
                                                              t->config, strlen(t->config))))
        st = pt__err_prefix(st, "%s: the tokenizer rebuilt from tokenizer.ggml.*", path);
    if (st == PT_OK)
        st = pt__modelio_check_tokenizer(t->tok, c->vocab_size, path);
    if (st)
        gguf_tok_free(t);
    if (st == PT_EUNSUPPORTED) {
        pt__log(PT_LOG_WARN, "%s; the model is loaded without a tokenizer", pt_last_error());
        pt_clear_error();
        return PT_OK;
    }
    return st;
}

/* ---- loading and inspection ------------------------------------------------------------ */

static int load(pt_model **out, const pt_gguf *g, const char *path, const pt_model_load_options *o)
{
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    pt_model *m = NULL;
    int st = pt__gguf_model_config(&cfg, g, path);
    if (st == PT_OK)
        st = pt__gguf_weights_check(g, &cfg, path);
    if (st == PT_OK && (st = pt__model_create_uninit(&m, &cfg)))
        st = pt__err_prefix(st, "%s", path);
    if (st == PT_OK)
        st = fill_model(m, g, &cfg, path);
    gguf_tok t = { 0 };
    if (st == PT_OK)
        st = load_tokenizer(&t, g, &cfg, path, o->load_tokenizer);
    char *d = NULL;
    if (st == PT_OK && !(d = pt__strdup(path)))
        st = PT_ENOMEM;
    if (st == PT_OK) {
        st = pt__modelio_set_record(m, d, t.tok); /* owns d and the tokenizer now */
        t.tok = NULL;
    }
    if (st == PT_OK) {
        st = pt__modelio_set_tokenizer_texts(m, t.json, t.config);
        t.json = t.config = NULL;
    }
    gguf_tok_free(&t);
    if (st) {
        pt_model_free(m);
        return st;
    }
    *out = m;
    return PT_OK;
}

int pt__gguf_load_model(pt_model **out, const char *path, const pt_model_load_options *o)
{
    pt_gguf *g = NULL;
    int st = pt__gguf_open(&g, path);
    if (st == PT_OK)
        st = load(out, g, path, o);
    pt__gguf_close(g);
    return st;
}

/* Count the tensors and bytes of each ggml type. */
static void count_types(pt_model_dir_info *info, const pt_gguf *g)
{
    info->num_files = 1;
    for (size_t i = 0; i < pt__gguf_tensor_count(g); i++) {
        const pt_gguf_tensor *t = pt__gguf_tensor_at(g, i);
        pt__model_info_add_tensor(info, pt__ggml_type_name(t->type), t->nbytes);
        if (!pt__ggml_type_is_float(t->type))
            info->quantised = true;
    }
}

int pt__gguf_inspect(pt_model_dir_info *info, const char *path)
{
    pt_gguf *g = NULL;
    int st = pt__gguf_open(&g, path);
    if (st == PT_OK)
        st = pt__gguf_model_config(&info->config, g, path);
    if (st == PT_OK)
        st = pt_model_config_num_params(&info->num_params, &info->config);
    if (st == PT_OK) {
        info->gguf_version = (int)pt__gguf_version(g);
        info->has_tokenizer = pt__tok_gguf_present(g);
        count_types(info, g);
        if ((info->weights_status = pt__gguf_weights_check(g, &info->config, path)) != PT_OK) {
            snprintf(info->weights_problem, sizeof info->weights_problem, "%s", pt_last_error());
            pt_clear_error();
        }
    }
    pt__gguf_close(g);
    return st;
}
