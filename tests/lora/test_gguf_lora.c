/* pt_lora_export_gguf: the GGUF LoRA adapter llama.cpp's
 * convert_lora_to_gguf.py writes (keys and their order, tensor names, ggml
 * shapes and types, tensor order), read back with io/gguf's reader; the
 * adapter applied over the base as llama.cpp stores it (Q/K rows permuted
 * for llama) equals the model's merged weights; F16/BF16; errors; a PEFT
 * directory gives the same bytes as the model it was saved from. */
#include "testutil.h"
#include "testfs.h"

#include "core/core.h"
#include "io/fileio.h"
#include "io/gguf.h"
#include "model/lora.h"
#include "model/transformer.h"
#include "modelio/gguf_internal.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <unistd.h>

#define RANK 4
#define ALPHA 12.0

static pt_model *load_ref(const char *name)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/reference/%s", PT_TEST_SRCDIR, name);
    pt_model_load_options lo;
    ck_assert_ok(pt_model_load_options_init(&lo));
    lo.load_tokenizer = false;
    pt_model *m;
    ck_assert_ok(pt_model_load_dir(&m, dir, &lo));
    return m;
}

/* Adapters on every target with random (non-zero) B. */
static void add_lora(pt_model *m, unsigned targets)
{
    pt_lora_options o;
    ck_assert_ok(pt_lora_options_init(&o));
    o.rank = RANK;
    o.alpha = ALPHA;
    o.targets = targets;
    o.seed = 11;
    ck_assert_ok(pt_model_add_lora(m, &o));
    pt_rng r;
    pt__rng_seed(&r, 23);
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        if (t->adapter && strstr(t->name, "lora_B"))
            for (size_t j = 0; j < t->numel; j++)
                t->data[j] = (float)(0.3 * pt__rng_normal(&r));
    }
}

static void export_to(const pt_model *m, const char *path, int type, const char *name)
{
    pt_gguf_export_options o = { .size = sizeof o, .type = type, .name = name };
    ck_assert_ok(pt_lora_export_gguf(m, path, &o));
}

static void check_str(const pt_gguf *g, size_t i, const char *key, const char *want)
{
    const pt_gguf_kv *kv = pt__gguf_kv_at(g, i);
    ck_assert_str_eq(kv->key, key);
    ck_assert_int_eq(kv->type, PT_GGUF_STRING);
    const pt_gguf_str *s = kv->data;
    ck_assert_uint_eq(s->len, strlen(want));
    ck_assert_int_eq(memcmp(s->ptr, want, s->len), 0);
}

/* Every key, its type, value and position. */
static void check_keys(const pt_gguf *g, const char *arch, const char *name)
{
    ck_assert_uint_eq(pt__gguf_version(g), 3);
    ck_assert_uint_eq(pt__gguf_alignment(g), 32);
    ck_assert_uint_eq(pt__gguf_kv_count(g), 6);
    check_str(g, 0, "general.architecture", arch);
    check_str(g, 1, "general.type", "adapter");
    check_str(g, 2, "adapter.type", "lora");
    check_str(g, 3, "general.name", name);
    const pt_gguf_kv *kv = pt__gguf_kv_at(g, 4);
    ck_assert_str_eq(kv->key, "adapter.lora.alpha");
    ck_assert_int_eq(kv->type, PT_GGUF_FLOAT32);
    ck_assert(*(const float *)kv->data == (float)ALPHA);
    kv = pt__gguf_kv_at(g, 5);
    ck_assert_str_eq(kv->key, "general.quantization_version");
    ck_assert_int_eq(kv->type, PT_GGUF_UINT32);
    ck_assert_uint_eq(*(const uint32_t *)kv->data, 2);
}

/* The converter's order within a layer (PEFT names sorted as strings). */
static const char *const k_sorted[7] = { "ffn_down", "ffn_gate", "ffn_up", "attn_k",
                                         "attn_output", "attn_q", "attn_v" };
/* ... and their PT_LORA_* bit indexes. */
static const int k_sorted_bit[7] = { 6, 4, 5, 1, 3, 0, 2 };

/* Tensor names, order, shapes and types for a 2-layer model with all targets. */
static void check_tensors(const pt_gguf *g, const pt_model *m, int type)
{
    ck_assert_uint_eq(pt__gguf_tensor_count(g), 2 * 7 * 2);
    size_t i = 0;
    for (int layer = 0; layer < 2; layer++)
        for (int j = 0; j < 7; j++)
            for (int ab = 0; ab < 2; ab++, i++) {
                char want[128];
                snprintf(want, sizeof want, "blk.%d.%s.weight.lora_%c", layer, k_sorted[j],
                         ab ? 'b' : 'a');
                const pt_gguf_tensor *t = pt__gguf_tensor_at(g, i);
                ck_assert_str_eq(t->name, want);
                ck_assert_uint_eq(t->ndim, 2);
                ck_assert_int_eq(t->type, type);
                size_t in, out;
                pt__lora_module_dims(m, k_sorted_bit[j], &in, &out);
                ck_assert_uint_eq(t->ne[0], ab ? RANK : in);
                ck_assert_uint_eq(t->ne[1], ab ? out : RANK);
                ck_assert_uint_eq(t->offset % 32, 0);
            }
}

static float *read_tensor(const pt_gguf *g, const char *name, size_t numel)
{
    const pt_gguf_tensor *t = pt__gguf_find_tensor(g, name);
    ck_assert_msg(t != NULL, "no tensor %s", name);
    ck_assert_uint_eq(t->numel, numel);
    float *v = malloc(numel * sizeof *v);
    ck_assert_ok(pt__gguf_read_f32(t, v, numel));
    return v;
}

/* W as llama.cpp stores it: Q/K rows permuted for llama-type models. */
static float *as_stored(const pt_model *m, int k, const float *w, size_t out, size_t in)
{
    float *d = malloc(out * in * sizeof *d);
    int heads = !pt__gguf_arch_permutes(m->cfg.arch) ? 0
                : k == 0                            ? m->cfg.num_attention_heads
                : k == 1                            ? m->cfg.num_key_value_heads
                                                    : 0;
    if (heads)
        pt__gguf_permute_rows(d, w, (int64_t)out, (int64_t)in, heads);
    else
        memcpy(d, w, out * in * sizeof *d);
    return d;
}

/* base_stored + alpha/r * B_file A_file, computed in double. */
static double *apply_file(const float *base, const float *a, const float *b, size_t out,
                          size_t in)
{
    double *w = malloc(out * in * sizeof *w), s = ALPHA / RANK;
    for (size_t o = 0; o < out; o++)
        for (size_t i = 0; i < in; i++) {
            double acc = 0;
            for (size_t r = 0; r < RANK; r++)
                acc += (double)b[o * RANK + r] * a[r * in + i];
            w[o * in + i] = base[o * in + i] + s * acc;
        }
    return w;
}

/* The file applied over the (stored) base of every target equals the
 * model's merged weights (stored).  Consumes the model's adapters. */
static void check_applies(const pt_gguf *g, pt_model *m)
{
    double *applied[2][7];
    for (int layer = 0; layer < 2; layer++)
        for (int k = 0; k < 7; k++) {
            size_t in, out;
            pt__lora_module_dims(m, k, &in, &out);
            char name[128], base_name[128];
            pt__tensor_gguf_name(base_name, sizeof base_name, pt__tensor_row_lora(k), layer);
            snprintf(name, sizeof name, "%s.lora_a", base_name);
            float *a = read_tensor(g, name, in * RANK);
            snprintf(name, sizeof name, "%s.lora_b", base_name);
            float *b = read_tensor(g, name, out * RANK);
            float *base = as_stored(m, k, *pt__weights_slot(&m->w, layer,
                                                           pt__tensor_row_lora(k)->id),
                                    out, in);
            applied[layer][k] = apply_file(base, a, b, out, in);
            free(a);
            free(b);
            free(base);
        }
    ck_assert_ok(pt_model_merge_lora(m));
    for (int layer = 0; layer < 2; layer++)
        for (int k = 0; k < 7; k++) {
            size_t in, out;
            pt__lora_module_dims(m, k, &in, &out);
            float *merged = as_stored(
                m, k, *pt__weights_slot(&m->w, layer, pt__tensor_row_lora(k)->id), out, in);
            double maxw = 0, maxd = 0;
            for (size_t i = 0; i < out * in; i++) {
                maxw = fmax(maxw, fabs(merged[i]));
                maxd = fmax(maxd, fabs(merged[i] - applied[layer][k][i]));
            }
            ck_assert_msg(maxd <= 1e-6 * maxw, "layer %d target %d: %g vs max %g", layer, k,
                          maxd, maxw);
            free(merged);
            free(applied[layer][k]);
        }
}

/* The adapters really change the weights (B is not zero). */
static void check_nontrivial(const pt_gguf *g)
{
    const pt_gguf_tensor *t = pt__gguf_find_tensor(g, "blk.1.attn_q.weight.lora_b");
    ck_assert_ptr_nonnull(t);
    float *b = malloc(t->numel * sizeof *b);
    ck_assert_ok(pt__gguf_read_f32(t, b, t->numel));
    double mx = 0;
    for (size_t i = 0; i < t->numel; i++)
        mx = fmax(mx, fabs(b[i]));
    ck_assert(mx > 0.1);
    free(b);
}

static void roundtrip(const char *ref, const char *arch, const char *name)
{
    char *root = pt_test_tmpdir("pt_gguf_lora_");
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter.gguf", root);
    pt_model *m = load_ref(ref);
    add_lora(m, PT_LORA_ALL);
    ck_assert_ok(pt_lora_export_gguf(m, path, NULL));
    pt_gguf *g;
    ck_assert_ok(pt__gguf_open(&g, path));
    check_keys(g, arch, name);
    check_tensors(g, m, PT_GGML_F32);
    check_nontrivial(g);
    check_applies(g, m);
    pt__gguf_close(g);
    pt_model_free(m);
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
    free(root);
}

START_TEST(test_llama_f32)
{
    roundtrip("llama_tied_gqa", "llama", "Llama_Tied_Gqa");
}
END_TEST

START_TEST(test_qwen2_f32)
{
    roundtrip("qwen2_bias_untied", "qwen2", "Qwen2_Bias_Untied");
}
END_TEST

/* Permutation: llama's q/k lora_b rows are permuted, lora_a and the others
 * are the model's bytes; qwen2's are all the model's bytes. */
static void check_permuted(const char *ref, bool permutes)
{
    char *root = pt_test_tmpdir("pt_gguf_lora_");
    char path[4200];
    snprintf(path, sizeof path, "%s/a.gguf", root);
    pt_model *m = load_ref(ref);
    add_lora(m, PT_LORA_ALL);
    export_to(m, path, PT_GGUF_FTYPE_F32, "x");
    pt_gguf *g;
    ck_assert_ok(pt__gguf_open(&g, path));
    for (int k = 0; k < 7; k++) {
        const pt_lora_pair *p = &m->lora->mods[PT_LORA_NMOD + k];
        char base[96], name[128];
        pt__tensor_gguf_name(base, sizeof base, pt__tensor_row_lora(k), 1);
        snprintf(name, sizeof name, "%s.lora_a", base);
        const pt_gguf_tensor *ta = pt__gguf_find_tensor(g, name);
        ck_assert_int_eq(memcmp(ta->data, p->a, ta->nbytes), 0);
        snprintf(name, sizeof name, "%s.lora_b", base);
        const pt_gguf_tensor *tb = pt__gguf_find_tensor(g, name);
        bool same = memcmp(tb->data, p->b, tb->nbytes) == 0;
        ck_assert_msg(same == !(permutes && k < 2), "%s: permuted %d", name, !same);
        if (!same) {
            int heads = k == 0 ? m->cfg.num_attention_heads : m->cfg.num_key_value_heads;
            float *want = malloc(tb->nbytes);
            pt__gguf_permute_rows(want, p->b, (int64_t)p->out, RANK, heads);
            ck_assert_int_eq(memcmp(tb->data, want, tb->nbytes), 0);
            free(want);
        }
    }
    pt__gguf_close(g);
    pt_model_free(m);
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
    free(root);
}

START_TEST(test_permutation)
{
    check_permuted("llama_tied_gqa", true);
    check_permuted("qwen2_bias_untied", false);
}
END_TEST

/* ---- llama.cpp's own writer: byte-identical files ------------------------------- */

static void *slurp(const char *path, size_t *len)
{
    char *buf;
    ck_assert_ok(pt__read_file(&buf, len, path, 1 << 24));
    return buf;
}

static void check_golden(const char *ref, int type, const char *suffix)
{
    char dir[4096], golden[4200], path[4200];
    snprintf(dir, sizeof dir, "%s/lora/data/%s", PT_TEST_SRCDIR, ref);
    snprintf(golden, sizeof golden, "%s/adapter_%s.gguf", dir, suffix);
    char *root = pt_test_tmpdir("pt_gguf_lora_");
    snprintf(path, sizeof path, "%s/adapter.gguf", root);
    pt_model *m = load_ref(ref);
    ck_assert_ok(pt_lora_load_peft(m, dir));
    pt_gguf_export_options o = { .size = sizeof o, .type = type, .name = NULL };
    ck_assert_ok(pt_lora_export_gguf(m, path, &o));
    size_t n1, n2;
    unsigned char *a = slurp(golden, &n1), *b = slurp(path, &n2);
    ck_assert_uint_eq(n2, n1);
    size_t i = 0;
    while (i < n1 && a[i] == b[i])
        i++;
    ck_assert_msg(i == n1, "%s: first difference at byte %zu of %zu", golden, i, n1);
    pt_free(a);
    pt_free(b);
    pt_model_free(m);
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
    free(root);
}

START_TEST(test_golden_gguf_py)
{
    static const char *const refs[] = { "llama_tied_gqa", "qwen2_bias_untied" };
    for (int i = 0; i < 2; i++) {
        check_golden(refs[i], PT_GGUF_FTYPE_F32, "f32");
        check_golden(refs[i], PT_GGUF_FTYPE_F16, "f16");
        check_golden(refs[i], PT_GGUF_FTYPE_BF16, "bf16");
    }
}
END_TEST

/* ---- F16 / BF16 -------------------------------------------------------------------- */

/* Every value of the 16-bit file is the F32 file's to within half a unit in
 * the last place (rel 2^-11 for F16 with 2^-25 below its normal range,
 * 2^-8 for BF16), and the types are the 16-bit one. */
static void check_rounded(const pt_gguf *g16, const pt_gguf *g32, int type)
{
    double rel = type == PT_GGML_F16 ? 1.0 / 2048 : 1.0 / 256;
    double abs_floor = type == PT_GGML_F16 ? ldexp(1.0, -25) : 0;
    ck_assert_uint_eq(pt__gguf_tensor_count(g16), pt__gguf_tensor_count(g32));
    size_t changed = 0;
    for (size_t i = 0; i < pt__gguf_tensor_count(g32); i++) {
        const pt_gguf_tensor *t32 = pt__gguf_tensor_at(g32, i), *t16 = pt__gguf_tensor_at(g16, i);
        ck_assert_str_eq(t16->name, t32->name);
        ck_assert_int_eq(t16->type, type);
        ck_assert_uint_eq(t16->nbytes, t32->numel * 2);
        float *a = read_tensor(g32, t32->name, t32->numel);
        float *b = read_tensor(g16, t16->name, t16->numel);
        for (size_t j = 0; j < t32->numel; j++) {
            double d = fabs((double)a[j] - b[j]);
            ck_assert_msg(d <= rel * fabs(a[j]) + abs_floor, "%s[%zu]: %g vs %g", t32->name, j,
                          a[j], b[j]);
            changed += d > 0;
        }
        free(a);
        free(b);
    }
    ck_assert(changed > 0);
}

START_TEST(test_f16_bf16)
{
    char *root = pt_test_tmpdir("pt_gguf_lora_");
    char p32[4200], p16[4200], pb16[4200];
    snprintf(p32, sizeof p32, "%s/f32.gguf", root);
    snprintf(p16, sizeof p16, "%s/f16.gguf", root);
    snprintf(pb16, sizeof pb16, "%s/bf16.gguf", root);
    pt_model *m = load_ref("llama_tied_gqa");
    add_lora(m, PT_LORA_ALL);
    export_to(m, p32, PT_GGUF_FTYPE_F32, NULL);
    export_to(m, p16, PT_GGUF_FTYPE_F16, NULL);
    export_to(m, pb16, PT_GGUF_FTYPE_BF16, NULL);
    pt_gguf *g32, *g16, *gb16;
    ck_assert_ok(pt__gguf_open(&g32, p32));
    ck_assert_ok(pt__gguf_open(&g16, p16));
    ck_assert_ok(pt__gguf_open(&gb16, pb16));
    check_keys(g16, "llama", "Llama_Tied_Gqa");
    check_keys(gb16, "llama", "Llama_Tied_Gqa");
    check_tensors(g16, m, PT_GGML_F16);
    check_tensors(gb16, m, PT_GGML_BF16);
    check_rounded(g16, g32, PT_GGML_F16);
    check_rounded(gb16, g32, PT_GGML_BF16);
    pt__gguf_close(g32);
    pt__gguf_close(g16);
    pt__gguf_close(gb16);
    pt_model_free(m);
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
    free(root);
}
END_TEST

/* ---- order, name, options ---------------------------------------------------------- */

/* Twelve layers: the converter's string order puts blk.10 and blk.11
 * between blk.1 and blk.2; q_proj before v_proj. */
START_TEST(test_order_many_layers)
{
    pt_model_config c;
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, 29);
    c.num_hidden_layers = 12;
    pt_model *m;
    ck_assert_ok(pt_model_create(&m, &c, 5));
    add_lora(m, PT_LORA_Q | PT_LORA_V);
    char *root = pt_test_tmpdir("pt_gguf_lora_");
    char path[4200];
    snprintf(path, sizeof path, "%s/a.gguf", root);
    ck_assert_ok(pt_lora_export_gguf(m, path, NULL));
    pt_gguf *g;
    ck_assert_ok(pt__gguf_open(&g, path));
    static const int layers[12] = { 0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9 };
    ck_assert_uint_eq(pt__gguf_tensor_count(g), 12 * 4);
    for (size_t i = 0; i < 48; i++) {
        char want[96];
        snprintf(want, sizeof want, "blk.%d.attn_%c.weight.lora_%c", layers[i / 4],
                 (i / 2) % 2 ? 'v' : 'q', i % 2 ? 'b' : 'a');
        ck_assert_str_eq(pt__gguf_tensor_at(g, i)->name, want);
    }
    /* a model made in memory has no source directory: its model_type names it */
    pt_gguf_str s;
    ck_assert_ok(pt__gguf_get_str(g, "general.name", &s));
    ck_assert_uint_eq(s.len, 5);
    ck_assert_int_eq(memcmp(s.ptr, "Llama", 5), 0);
    pt__gguf_close(g);
    pt_model_free(m);
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
    free(root);
}
END_TEST

START_TEST(test_name_option)
{
    char *root = pt_test_tmpdir("pt_gguf_lora_");
    char path[4200];
    snprintf(path, sizeof path, "%s/a.gguf", root);
    pt_model *m = load_ref("qwen2_bias_untied");
    add_lora(m, PT_LORA_ALL);
    export_to(m, path, PT_GGUF_FTYPE_F32, "my tuned-adapter v2");
    pt_gguf *g;
    ck_assert_ok(pt__gguf_open(&g, path));
    check_keys(g, "qwen2", "my tuned-adapter v2");
    /* no tensor for the embedding, the LM head, norms or biases */
    for (size_t i = 0; i < pt__gguf_tensor_count(g); i++) {
        const char *n = pt__gguf_tensor_at(g, i)->name;
        ck_assert_msg(strncmp(n, "blk.", 4) == 0 && strstr(n, ".weight.lora_") != NULL, "%s", n);
    }
    pt__gguf_close(g);
    pt_model_free(m);
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
    free(root);
}
END_TEST

/* ---- errors: a status, a message, and nothing left behind --------------------------- */

static size_t dir_entries(const char *dir)
{
    size_t n = 0;
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

START_TEST(test_errors)
{
    char *root = pt_test_tmpdir("pt_gguf_lora_");
    char path[4200], keep[4200];
    snprintf(path, sizeof path, "%s/a.gguf", root);
    snprintf(keep, sizeof keep, "%s/keep.gguf", root);
    pt_model *m = load_ref("llama_tied_gqa");
    ck_assert_status(pt_lora_export_gguf(m, path, NULL), PT_ESTATE, "no LoRA adapters");
    ck_assert_msg(strstr(pt_last_error(), "pt_model_add_lora") != NULL, "%s", pt_last_error());
    ck_assert_int_eq(access(path, F_OK), -1);
    /* an existing file is not touched by a failed export */
    ck_assert_ok(pt__write_file_atomic(keep, "old", 3));
    ck_assert_status(pt_lora_export_gguf(m, keep, NULL), PT_ESTATE, "no LoRA adapters");
    add_lora(m, PT_LORA_ALL);
    ck_assert_status(pt_lora_export_gguf(NULL, path, NULL), PT_EINVAL, "model");
    ck_assert_status(pt_lora_export_gguf(m, NULL, NULL), PT_EINVAL, "path");
    pt_gguf_export_options o = { .size = sizeof o, .type = 3, .name = NULL };
    ck_assert_status(pt_lora_export_gguf(m, keep, &o), PT_EINVAL, "opts->type");
    o.type = -1;
    ck_assert_status(pt_lora_export_gguf(m, keep, &o), PT_EINVAL, "opts->type");
    o.size = 3;
    o.type = PT_GGUF_FTYPE_F32;
    ck_assert_status(pt_lora_export_gguf(m, keep, &o), PT_EINVAL, "pt_gguf_export_options_init");
    /* a directory in the way: the write fails and leaves no temporary file */
    snprintf(path, sizeof path, "%s/dir.gguf", root);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    char inner[4300];
    snprintf(inner, sizeof inner, "%s/x", path);
    ck_assert_ok(pt__write_file_atomic(inner, "x", 1));
    ck_assert_int_ne(pt_lora_export_gguf(m, path, NULL), PT_OK);
    snprintf(path, sizeof path, "%s/missing/a.gguf", root);
    ck_assert_int_ne(pt_lora_export_gguf(m, path, NULL), PT_OK);
    ck_assert_uint_eq(dir_entries(root), 2);
    size_t n;
    char *text = slurp(keep, &n);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(memcmp(text, "old", 3), 0);
    pt_free(text);
    pt_model_free(m);
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
    free(root);
}
END_TEST

/* ---- PEFT directories --------------------------------------------------------------- */

/* A PEFT directory saved from a model exports to the same bytes as the model. */
START_TEST(test_peft_same_bytes)
{
    char *root = pt_test_tmpdir("pt_gguf_lora_");
    char peft[4200], p1[4200], p2[4200];
    snprintf(p1, sizeof p1, "%s/mem.gguf", root);
    snprintf(p2, sizeof p2, "%s/peft.gguf", root);
    static const char *const refs[] = { "llama_tied_gqa", "qwen2_bias_untied" };
    for (int r = 0; r < 2; r++)
        for (int type = PT_GGUF_FTYPE_F32; type <= PT_GGUF_FTYPE_BF16; type++) {
            /* named as the base, so that the default general.name agrees */
            snprintf(peft, sizeof peft, "%s/%d/%s", root, type, refs[r]);
            pt_model *m = load_ref(refs[r]);
            add_lora(m, PT_LORA_Q | PT_LORA_K | PT_LORA_O | PT_LORA_GATE | PT_LORA_DOWN);
            ck_assert_ok(pt_lora_save_peft(m, peft, refs[r]));
            export_to(m, p1, type, NULL);
            pt_model *m2 = load_ref(refs[r]);
            ck_assert_ok(pt_lora_load_peft(m2, peft));
            export_to(m2, p2, type, NULL);
            size_t n1, n2;
            unsigned char *a = slurp(p1, &n1), *b = slurp(p2, &n2);
            ck_assert_uint_eq(n1, n2);
            ck_assert_int_eq(memcmp(a, b, n1), 0);
            pt_free(a);
            pt_free(b);
            pt_model_free(m);
            pt_model_free(m2);
        }
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
    free(root);
}
END_TEST

static void check_opt_str(const pt_gguf *g, const char *key, const char *want)
{
    pt_gguf_str v;
    ck_assert_msg(pt__gguf_get_str(g, key, &v) == PT_OK, "%s: %s", key, pt_last_error());
    ck_assert_msg(v.len == strlen(want) && memcmp(v.ptr, want, v.len) == 0, "%s is '%.*s', want '%s'",
                  key, (int)v.len, v.ptr, want);
}

/* general.* of an adapter loaded from a PEFT directory: the directory's
 * name through gguf-py's heuristics, as convert_lora_to_gguf.py (d32676d)
 * wrote for stories260K's adapter in a directory "tiny-Story-lora-v1.5":
 * name "Tiny Story Lora v1.5", version "v1.5", basename "tiny-Story", in
 * that order after adapter.type (the file was byte-identical to ours).
 * --name replaces only general.name; adapters added afterwards in memory
 * are named after the base directory again. */
START_TEST(test_peft_dir_name)
{
    char *root = pt_test_tmpdir("pt_gguf_lora_");
    char peft[4200], path[4200];
    snprintf(peft, sizeof peft, "%s/tiny-Story-lora-v1.5", root);
    snprintf(path, sizeof path, "%s/a.gguf", root);
    pt_model *m = load_ref("llama_tied_gqa");
    add_lora(m, PT_LORA_Q | PT_LORA_V);
    ck_assert_ok(pt_lora_save_peft(m, peft, "llama_tied_gqa"));
    pt_model_free(m);
    m = load_ref("llama_tied_gqa");
    ck_assert_ok(pt_lora_load_peft(m, peft));
    export_to(m, path, PT_GGUF_FTYPE_F32, NULL);
    pt_gguf *g;
    ck_assert_ok(pt__gguf_open(&g, path));
    ck_assert_uint_eq(pt__gguf_kv_count(g), 8);
    static const char *const order[] = { "general.architecture", "general.type", "adapter.type",
                                         "general.name", "general.version", "general.basename",
                                         "adapter.lora.alpha", "general.quantization_version" };
    for (size_t i = 0; i < 8; i++)
        ck_assert_str_eq(pt__gguf_kv_at(g, i)->key, order[i]);
    check_opt_str(g, "general.name", "Tiny Story Lora v1.5");
    check_opt_str(g, "general.version", "v1.5");
    check_opt_str(g, "general.basename", "tiny-Story");
    pt__gguf_close(g);
    export_to(m, path, PT_GGUF_FTYPE_F32, "Mine");
    ck_assert_ok(pt__gguf_open(&g, path));
    ck_assert_uint_eq(pt__gguf_kv_count(g), 8);
    check_opt_str(g, "general.name", "Mine");
    check_opt_str(g, "general.version", "v1.5");
    pt__gguf_close(g);
    ck_assert_ok(pt_model_remove_lora(m));
    add_lora(m, PT_LORA_Q);
    export_to(m, path, PT_GGUF_FTYPE_F32, NULL);
    ck_assert_ok(pt__gguf_open(&g, path));
    check_keys(g, "llama", "Llama_Tied_Gqa");
    pt__gguf_close(g);
    pt_model_free(m);
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
    free(root);
}
END_TEST

static Suite *gguf_lora_suite(void)
{
    Suite *s = suite_create("gguf_lora");
    TCase *tc = tcase_create("gguf_lora");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_llama_f32);
    tcase_add_test(tc, test_qwen2_f32);
    tcase_add_test(tc, test_permutation);
    tcase_add_test(tc, test_golden_gguf_py);
    tcase_add_test(tc, test_f16_bf16);
    tcase_add_test(tc, test_order_many_layers);
    tcase_add_test(tc, test_name_option);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_peft_same_bytes);
    tcase_add_test(tc, test_peft_dir_name);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return pt_test_run(gguf_lora_suite());
}
