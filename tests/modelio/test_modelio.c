/* Model directories in and out, JSONL rows, evaluation; and the real
 * stories260K model when ../shared/data is present. */
#include "testutil.h"
#include "testfs.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <unistd.h>

#include "core/core.h"
#include "io/fileio.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "io/jsonl.h"
#include "posttrain/jsonl.h"
#include "model/schema.h"

/* ---- helpers ------------------------------------------------------------------ */

static void write_text(const char *dir, const char *name, const char *text)
{
    char *p = pt__path_join(dir, name);
    ck_assert_ok(pt__write_file_atomic(p, text, strlen(text)));
    pt_free(p);
}

/* root, printed, as dir/name. */
static void write_json(const char *dir, const char *name, const cJSON *root)
{
    char *s = cJSON_Print(root);
    ck_assert_ptr_nonnull(s);
    write_text(dir, name, s);
    free(s);
}

static pt_model_config tiny_config(int arch, bool tied)
{
    pt_model_config c;
    pt_test_tiny_config(&c, arch, 64);
    if (arch == PT_ARCH_QWEN3)
        c.head_dim = 8;
    c.rms_norm_eps = 1e-5;
    c.tie_word_embeddings = tied;
    c.bos_token_id = 1;
    c.eos_token_id = 2;
    return c;
}

static pt_model *tiny_model(int arch, bool tied, uint64_t seed)
{
    pt_model_config c = tiny_config(arch, tied);
    pt_model *m = NULL;
    ck_assert_ok(pt_model_create(&m, &c, seed));
    return m;
}

static void assert_same_model(const pt_model *a, const pt_model *b)
{
    pt_model_config ca, cb;
    pt_model_config_init(&ca);
    pt_model_get_config(&ca, a);
    pt_model_config_init(&cb);
    pt_model_get_config(&cb, b);
    ck_assert_msg(memcmp(&ca, &cb, sizeof ca) == 0, "configs differ");
    ck_assert_uint_eq(pt_model_tensor_count(a), pt_model_tensor_count(b));
    for (size_t i = 0; i < pt_model_tensor_count(a); i++) {
        const pt_tensor_ref *ta = pt__model_tensor(a, i);
        const pt_tensor_ref *tb = pt__model_find_tensor(b, ta->name);
        ck_assert_msg(tb != NULL, "%s missing", ta->name);
        ck_assert_uint_eq(ta->numel, tb->numel);
        ck_assert_msg(memcmp(ta->data, tb->data, ta->numel * sizeof(float)) == 0,
                      "tensor %s differs", ta->name);
    }
}

/* The model's tensors as writer entries (F32, pointing into the model). */
typedef struct wlist {
    pt_st_write_tensor t[256];
    size_t n;
} wlist;

static void wlist_from_model(wlist *w, const pt_model *m)
{
    w->n = pt_model_tensor_count(m);
    ck_assert_uint_le(w->n, 250);
    for (size_t i = 0; i < w->n; i++) {
        const pt_tensor_ref *r = pt__model_tensor(m, i);
        memset(&w->t[i], 0, sizeof w->t[i]);
        w->t[i].name = r->name;
        w->t[i].dtype = PT_ST_F32;
        w->t[i].ndim = r->ndim;
        w->t[i].shape[0] = r->shape[0];
        w->t[i].shape[1] = r->ndim == 2 ? r->shape[1] : 0;
        w->t[i].data = r->data;
    }
}

static pt_st_write_tensor *wlist_find(wlist *w, const char *name)
{
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return &w->t[i];
    ck_abort_msg("no tensor %s", name);
    return NULL;
}

static void wlist_remove(wlist *w, const char *name)
{
    pt_st_write_tensor *t = wlist_find(w, name);
    *t = w->t[--w->n];
}

static void write_weights(const char *dir, const char *fname, const pt_st_write_tensor *t,
                          size_t n)
{
    char *p = pt__path_join(dir, fname);
    static const char *const meta[] = { "format", "pt" };
    ck_assert_ok(pt__st_write(p, t, n, meta, 1));
    pt_free(p);
}

/* A directory with config.json for m and the given weights. */
static char *dir_with(const pt_model *m, wlist *w)
{
    char *dir = pt_test_tmpdir("pt_modelio_");
    pt_model_config c;
    pt_model_config_init(&c);
    pt_model_get_config(&c, m);
    char *json;
    ck_assert_ok(pt_model_config_to_json(&json, &c));
    write_text(dir, "config.json", json);
    pt_free(json);
    if (w)
        write_weights(dir, "model.safetensors", w->t, w->n);
    return dir;
}

static pt_model_load_options no_tok(void)
{
    pt_model_load_options o;
    pt_model_load_options_init(&o);
    o.load_tokenizer = false;
    return o;
}

static void free_loaded(pt_model *m)
{
    pt_model_free(m); /* also frees modelio's record (source dir, tokenizer) */
}

static bool files_equal(const char *a, const char *b)
{
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    bool eq = pt__read_file(&x, &nx, a, 1u << 30) == PT_OK &&
              pt__read_file(&y, &ny, b, 1u << 30) == PT_OK && nx == ny && memcmp(x, y, nx) == 0;
    pt_free(x);
    pt_free(y);
    return eq;
}

/* pt_model_load_dir fails with status/frag, and pt_model_dir_inspect
 * reports the same problem from the headers alone. */
static void load_and_inspect_fail(const char *dir, int status, const char *frag)
{
    pt_model_load_options o = no_tok();
    pt_model *r = NULL;
    ck_assert_status(pt_model_load_dir(&r, dir, &o), status, frag);
    ck_assert_ptr_null(r);
    pt_model_dir_info info;
    pt_model_dir_info_init(&info);
    ck_assert_ok(pt_model_dir_inspect(&info, dir));
    ck_assert_msg(info.weights_status == status, "inspect: %s (%s)",
                  pt_status_name(info.weights_status), info.weights_problem);
    ck_assert_msg(strstr(info.weights_problem, frag) != NULL, "inspect: '%s' lacks '%s'",
                  info.weights_problem, frag);
}

/* ---- save and reload ------------------------------------------------------------ */

START_TEST(test_save_reload_bit_identical)
{
    static const int archs[] = { PT_ARCH_LLAMA, PT_ARCH_QWEN2, PT_ARCH_QWEN3, PT_ARCH_MISTRAL };
    for (int k = 0; k < 8; k++) {
        pt_model *m = tiny_model(archs[k % 4], k < 4, 100 + (uint64_t)k);
        char *dir = pt_test_tmpdir("pt_modelio_");
        ck_assert_ok(pt_model_save_dir(m, dir, NULL));
        ck_assert(pt__dir_has_file(dir, "config.json"));
        ck_assert(pt__dir_has_file(dir, "model.safetensors"));
        ck_assert(pt__dir_has_file(dir, "generation_config.json"));
        pt_model_load_options o = no_tok();
        pt_model *r = NULL;
        ck_assert_ok(pt_model_load_dir(&r, dir, &o));
        assert_same_model(m, r);
        ck_assert_str_eq(pt_model_source_dir(r), dir);
        ck_assert_ptr_null(pt_model_source_dir(m));

        /* the file: F32 only, metadata format=pt, lm_head only when untied */
        char *p = pt__path_join(dir, "model.safetensors");
        pt_st_file *f;
        ck_assert_ok(pt__st_open(&f, p));
        ck_assert_str_eq(pt__st_metadata(f, "format"), "pt");
        ck_assert_uint_eq(pt__st_count(f), pt_model_tensor_count(m));
        for (size_t i = 0; i < pt__st_count(f); i++)
            ck_assert_int_eq(pt__st_tensor_at(f, i)->dtype, PT_ST_F32);
        ck_assert((pt__st_find(f, "lm_head.weight") != NULL) == (k >= 4));
        pt__st_close(f);
        pt_free(p);

        /* generation_config.json carries the token ids */
        p = pt__path_join(dir, "generation_config.json");
        char *text;
        size_t len;
        ck_assert_ok(pt__read_file(&text, &len, p, 1 << 20));
        cJSON *g = cJSON_Parse(text);
        ck_assert_ptr_nonnull(g);
        ck_assert_int_eq(cJSON_GetObjectItem(g, "bos_token_id")->valueint, 1);
        ck_assert_int_eq(cJSON_GetObjectItem(g, "eos_token_id")->valueint, 2);
        cJSON_Delete(g);
        pt_free(text);
        pt_free(p);

        /* saving the reloaded model again gives the same bytes */
        char *dir2 = pt_test_tmpdir("pt_modelio_");
        ck_assert_ok(pt_model_save_dir(r, dir2, NULL));
        char *a = pt__path_join(dir, "model.safetensors"), *b = pt__path_join(dir2, "model.safetensors");
        ck_assert(files_equal(a, b));
        pt_free(a);
        pt_free(b);
        a = pt__path_join(dir, "config.json");
        b = pt__path_join(dir2, "config.json");
        ck_assert(files_equal(a, b));
        pt_free(a);
        pt_free(b);
        pt_test_rm_rf(dir2);
        free(dir2);
        free_loaded(r);
        pt_model_free(m);
        pt_test_rm_rf(dir);
        free(dir);
    }
}
END_TEST

START_TEST(test_save_copies_tokenizer_files)
{
    pt_model *m = tiny_model(PT_ARCH_LLAMA, true, 3);
    char *src = pt_test_tmpdir("pt_modelio_");
    ck_assert_ok(pt_model_save_dir(m, src, NULL));
    write_text(src, "tokenizer_config.json", "{\"add_bos_token\": true}\n");
    write_text(src, "special_tokens_map.json", "{\"bos_token\": \"<s>\"}\n");
    write_text(src, "generation_config.json", "{\"bos_token_id\": 1, \"temperature\": 0.7}\n");
    pt_model_load_options o = no_tok();
    pt_model *r = NULL;
    ck_assert_ok(pt_model_load_dir(&r, src, &o));
    char *dst = pt_test_tmpdir("pt_modelio_");
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/a/b", dst); /* created with its parents */
    ck_assert_ok(pt_model_save_dir(r, sub, NULL));
    static const char *const names[] = { "tokenizer_config.json", "special_tokens_map.json",
                                         "generation_config.json" };
    for (int i = 0; i < 3; i++) {
        char *a = pt__path_join(src, names[i]), *b = pt__path_join(sub, names[i]);
        ck_assert_msg(files_equal(a, b), "%s not copied through", names[i]);
        pt_free(a);
        pt_free(b);
    }
    ck_assert(!pt__dir_has_file(sub, "tokenizer.json"));
    /* copy_tokenizer = false, and an explicit tokenizer_dir */
    char sub2[4200];
    snprintf(sub2, sizeof sub2, "%s/c", dst);
    pt_model_save_options so;
    pt_model_save_options_init(&so);
    so.copy_tokenizer = false;
    ck_assert_ok(pt_model_save_dir(r, sub2, &so));
    ck_assert(!pt__dir_has_file(sub2, "tokenizer_config.json"));
    so.copy_tokenizer = true;
    so.tokenizer_dir = sub;
    snprintf(sub2, sizeof sub2, "%s/d", dst);
    ck_assert_ok(pt_model_save_dir(m, sub2, &so)); /* m was never loaded: names the dir */
    ck_assert(pt__dir_has_file(sub2, "special_tokens_map.json"));
    /* saving over the source directory itself keeps its files */
    ck_assert_ok(pt_model_save_dir(r, src, NULL));
    pt_model *r2 = NULL;
    ck_assert_ok(pt_model_load_dir(&r2, src, &o));
    assert_same_model(m, r2);
    ck_assert(pt__dir_has_file(src, "special_tokens_map.json"));
    /* a file where the directory should be */
    char *cfgpath = pt__path_join(src, "config.json");
    ck_assert_int_ne(pt_model_save_dir(r, cfgpath, NULL), PT_OK);
    pt_free(cfgpath);
    free_loaded(r2);
    free_loaded(r);
    pt_model_free(m);
    pt_test_rm_rf(src);
    pt_test_rm_rf(dst);
    free(src);
    free(dst);
}
END_TEST


static int always_abort(void *payload)
{
    (void)payload;
    return 1;
}

/* Cancellation during a load; an eos_token_id list survives load + save. */
START_TEST(test_abort_and_eos_list)
{
    pt_model *m = tiny_model(PT_ARCH_LLAMA, true, 5);
    char *dir = pt_test_tmpdir("pt_modelio_");
    ck_assert_ok(pt_model_save_dir(m, dir, NULL));
    pt_model_load_options o = no_tok();
    pt_model *r = NULL;
    ck_assert_ok(pt_set_abort_callback(always_abort, NULL));
    ck_assert_int_eq(pt_model_load_dir(&r, dir, &o), PT_ECANCELLED);
    ck_assert_ok(pt_set_abort_callback(NULL, NULL));
    ck_assert_ptr_null(r);

    /* a config whose eos_token_id is a list starting with the model's eos */
    char *p = pt__path_join(dir, "config.json"), *text;
    size_t len;
    ck_assert_ok(pt__read_file(&text, &len, p, 1 << 20));
    cJSON *root = cJSON_Parse(text);
    pt_free(text);
    cJSON_ReplaceItemInObject(root, "eos_token_id", cJSON_CreateIntArray((const int[]){ 2, 5, 7 }, 3));
    write_json(dir, "config.json", root);
    cJSON_Delete(root);
    ck_assert_ok(pt_model_load_dir(&r, dir, &o));
    pt_model_config c;
    pt_model_config_init(&c);
    pt_model_get_config(&c, r);
    ck_assert_int_eq(c.eos_token_id, 2);
    char *out = pt_test_tmpdir("pt_modelio_");
    ck_assert_ok(pt_model_save_dir(r, out, NULL));
    char *q = pt__path_join(out, "config.json");
    ck_assert_ok(pt__read_file(&text, &len, q, 1 << 20));
    root = cJSON_Parse(text);
    const cJSON *e = cJSON_GetObjectItem(root, "eos_token_id");
    ck_assert(cJSON_IsArray(e) && cJSON_GetArraySize(e) == 3);
    ck_assert_int_eq(cJSON_GetArrayItem(e, 2)->valueint, 7);
    cJSON_Delete(root);
    pt_free(text);
    pt_free(q);
    pt_free(p);
    free_loaded(r);
    pt_model_free(m);
    pt_test_rm_rf(dir);
    pt_test_rm_rf(out);
    free(dir);
    free(out);
}
END_TEST

/* The tensors the schema gives a config (what loading and inspection check
 * the weights against) are exactly the model's table, in its order. */
START_TEST(test_expected_tensors_match_model)
{
    static const int archs[] = { PT_ARCH_LLAMA, PT_ARCH_QWEN2, PT_ARCH_QWEN3, PT_ARCH_MISTRAL };
    for (int k = 0; k < 8; k++) {
        pt_model *m = tiny_model(archs[k % 4], k < 4, 1);
        pt_model_config c;
        pt_model_config_init(&c);
        pt_model_get_config(&c, m);
        pt_schema_tensor *e = NULL;
        size_t n = 0;
        ck_assert_ok(pt__schema_tensors(&e, &n, &c));
        ck_assert_uint_eq(n, pt_model_tensor_count(m));
        for (size_t i = 0; i < n; i++) {
            const pt_tensor_ref *t = pt__model_find_tensor(m, e[i].name);
            ck_assert_msg(t != NULL, "%s not in the model", e[i].name);
            ck_assert_ptr_eq(t, pt__model_tensor(m, i));
            ck_assert_int_eq(t->ndim, e[i].ndim);
            ck_assert_int_eq(t->shape[0], e[i].shape[0]);
            if (t->ndim == 2)
                ck_assert_int_eq(t->shape[1], e[i].shape[1]);
            ck_assert_int_eq(t->id, (int)e[i].row->id);
        }
        uint64_t np = 0, mp = 0;
        ck_assert_ok(pt_model_config_num_params(&np, &c));
        mp = pt_model_param_count(m);
        ck_assert_uint_eq(np, mp);
        pt_free(e);
        pt_model_free(m);
    }
}
END_TEST

/* ---- dtypes, shards, extras ---------------------------------------------------- */

START_TEST(test_bf16_f16_load)
{
    pt_model *m = tiny_model(PT_ARCH_QWEN2, false, 11);
    for (int dt = 0; dt < 2; dt++) {
        wlist w;
        wlist_from_model(&w, m);
        uint16_t *bufs[256];
        for (size_t i = 0; i < w.n; i++) {
            const pt_tensor_ref *r = pt__model_find_tensor(m, w.t[i].name);
            bufs[i] = malloc(r->numel * 2);
            for (size_t j = 0; j < r->numel; j++)
                bufs[i][j] = dt ? pt__f32_to_f16(r->data[j]) : pt__f32_to_bf16(r->data[j]);
            w.t[i].dtype = dt ? PT_ST_F16 : PT_ST_BF16;
            w.t[i].data = bufs[i];
        }
        char *dir = dir_with(m, &w);
        pt_model *r = NULL;
        pt_model_load_options o = no_tok();
        ck_assert_ok(pt_model_load_dir(&r, dir, &o));
        for (size_t i = 0; i < w.n; i++) {
            const pt_tensor_ref *t = pt__model_find_tensor(r, w.t[i].name);
            for (size_t j = 0; j < t->numel; j++) {
                float want = dt ? pt__f16_to_f32(bufs[i][j]) : pt__bf16_to_f32(bufs[i][j]);
                ck_assert_msg(memcmp(&want, &t->data[j], 4) == 0, "%s[%zu]", t->name, j);
            }
            free(bufs[i]);
        }
        /* info sees the dtype */
        pt_model_dir_info info;
        pt_model_dir_info_init(&info);
        ck_assert_ok(pt_model_dir_inspect(&info, dir));
        ck_assert_int_eq(info.num_dtypes, 1);
        ck_assert_str_eq(info.dtypes[0].name, dt ? "F16" : "BF16");
        ck_assert_uint_eq(info.dtypes[0].tensors, pt_model_tensor_count(m));
        uint64_t np;
        np = pt_model_param_count(m);
        ck_assert_uint_eq(info.num_params, np);
        ck_assert_uint_eq(info.weight_bytes, np * 2);
        free_loaded(r);
        pt_test_rm_rf(dir);
        free(dir);
    }
    pt_model_free(m);
}
END_TEST

static char *sharded_dir(const pt_model *m, const char *index_json)
{
    wlist w;
    wlist_from_model(&w, m);
    char *dir = dir_with(m, NULL);
    /* shard 1: the embedding and layer 0; shard 2: the rest */
    pt_st_write_tensor a[256], b[256];
    size_t na = 0, nb = 0;
    for (size_t i = 0; i < w.n; i++) {
        if (strstr(w.t[i].name, "embed") || strstr(w.t[i].name, "layers.0."))
            a[na++] = w.t[i];
        else
            b[nb++] = w.t[i];
    }
    write_weights(dir, "model-00001-of-00002.safetensors", a, na);
    write_weights(dir, "model-00002-of-00002.safetensors", b, nb);
    if (index_json) {
        write_text(dir, "model.safetensors.index.json", index_json);
        return dir;
    }
    cJSON *root = cJSON_CreateObject(), *wm = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "metadata", cJSON_CreateObject());
    for (size_t i = 0; i < na; i++)
        cJSON_AddStringToObject(wm, a[i].name, "model-00001-of-00002.safetensors");
    for (size_t i = 0; i < nb; i++)
        cJSON_AddStringToObject(wm, b[i].name, "model-00002-of-00002.safetensors");
    cJSON_AddItemToObject(root, "weight_map", wm);
    write_json(dir, "model.safetensors.index.json", root);
    cJSON_Delete(root);
    return dir;
}

START_TEST(test_sharded)
{
    pt_model *m = tiny_model(PT_ARCH_LLAMA, false, 21);
    char *dir = sharded_dir(m, NULL);
    pt_model *r = NULL;
    pt_model_load_options o = no_tok();
    ck_assert_ok(pt_model_load_dir(&r, dir, &o));
    assert_same_model(m, r);
    free_loaded(r);
    pt_model_dir_info info;
    pt_model_dir_info_init(&info);
    ck_assert_ok(pt_model_dir_inspect(&info, dir));
    ck_assert(info.sharded);
    ck_assert_int_eq(info.weights_status, PT_OK);
    ck_assert_int_eq(info.num_files, 2);
    ck_assert_uint_eq(info.num_tensors, pt_model_tensor_count(m));

    /* a tensor missing from the map */
    char *ip = pt__path_join(dir, "model.safetensors.index.json");
    char *text;
    size_t len;
    ck_assert_ok(pt__read_file(&text, &len, ip, 1 << 20));
    cJSON *root = cJSON_Parse(text);
    char *text_of_index = text;
    cJSON *wm = cJSON_GetObjectItem(root, "weight_map");
    cJSON_DeleteItemFromObject(wm, "model.norm.weight");
    write_json(dir, "model.safetensors.index.json", root);
    ck_assert_status(pt_model_load_dir(&r, dir, &o), PT_EFORMAT,
                     "'model.norm.weight' in shard model-00002-of-00002.safetensors is not in "
                     "weight_map");
    /* a tensor mapped to the wrong shard */
    cJSON_AddStringToObject(wm, "model.norm.weight", "model-00001-of-00002.safetensors");
    write_json(dir, "model.safetensors.index.json", root);
    ck_assert_status(pt_model_load_dir(&r, dir, &o), PT_EFORMAT,
                     "puts tensor 'model.norm.weight' in model-00001-of-00002.safetensors");
    /* a shard name that leaves the directory */
    cJSON_ReplaceItemInObject(wm, "model.norm.weight",
                              cJSON_CreateString("../model-00002-of-00002.safetensors"));
    write_json(dir, "model.safetensors.index.json", root);
    ck_assert_status(pt_model_load_dir(&r, dir, &o), PT_EFORMAT, "not a plain");
    /* a shard that does not exist */
    cJSON_ReplaceItemInObject(wm, "model.norm.weight",
                              cJSON_CreateString("model-00003-of-00002.safetensors"));
    write_json(dir, "model.safetensors.index.json", root);
    ck_assert_status(pt_model_load_dir(&r, dir, &o), PT_ENOTFOUND, "model-00003-of-00002");
    /* a map entry that is not a string */
    cJSON_ReplaceItemInObject(wm, "model.norm.weight", cJSON_CreateNumber(2));
    write_json(dir, "model.safetensors.index.json", root);
    ck_assert_status(pt_model_load_dir(&r, dir, &o), PT_EFORMAT,
                     "weight_map['model.norm.weight'] must be a file name");
    /* a key given twice */
    cJSON_ReplaceItemInObject(wm, "model.norm.weight",
                              cJSON_CreateString("model-00002-of-00002.safetensors"));
    cJSON_AddStringToObject(wm, "model.norm.weight", "model-00002-of-00002.safetensors");
    write_json(dir, "model.safetensors.index.json", root);
    ck_assert_status(pt_model_load_dir(&r, dir, &o), PT_EFORMAT,
                     "weight_map lists 'model.norm.weight' twice");
    cJSON_Delete(root);
    /* a tensor held by two shards */
    {
        const pt_tensor_ref *nw = pt__model_find_tensor(m, "model.norm.weight");
        pt_st_write_tensor extra = { .name = "model.norm.weight", .dtype = PT_ST_F32, .ndim = 1,
                                     .shape = { nw->shape[0] }, .data = nw->data };
        write_weights(dir, "model-00003-of-00003.safetensors", &extra, 1);
        root = cJSON_Parse(text_of_index);
        wm = cJSON_GetObjectItem(root, "weight_map");
        cJSON_AddStringToObject(wm, "zz.unused", "model-00003-of-00003.safetensors");
        write_json(dir, "model.safetensors.index.json", root);
        ck_assert_status(pt_model_load_dir(&r, dir, &o), PT_EFORMAT,
                         "tensor 'model.norm.weight' is in both");
    }
    /* no weight_map at all; not JSON */
    write_text(dir, "model.safetensors.index.json", "{\"metadata\": {}}");
    ck_assert_status(pt_model_load_dir(&r, dir, &o), PT_EFORMAT, "'weight_map' is missing");
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\": ");
    ck_assert_status(pt_model_load_dir(&r, dir, &o), PT_EFORMAT, "not valid JSON");
    ck_assert_ptr_null(r);
    cJSON_Delete(root);
    pt_free(text_of_index);
    pt_free(ip);
    pt_test_rm_rf(dir);
    free(dir);
    pt_model_free(m);
}
END_TEST

START_TEST(test_bad_dirs)
{
    pt_model *m = tiny_model(PT_ARCH_LLAMA, true, 31);
    pt_model_load_options o = no_tok();
    pt_model *r = NULL;
    wlist w;
    char *dir;

    /* missing tensor */
    wlist_from_model(&w, m);
    wlist_remove(&w, "model.layers.1.mlp.up_proj.weight");
    dir = dir_with(m, &w);
    load_and_inspect_fail(dir, PT_ENOTFOUND, "tensor 'model.layers.1.mlp.up_proj.weight' is missing");
    pt_test_rm_rf(dir);
    free(dir);

    /* unexpected tensor (a layer the config does not have) */
    wlist_from_model(&w, m);
    w.t[w.n] = *wlist_find(&w, "model.layers.1.input_layernorm.weight");
    w.t[w.n++].name = "model.layers.2.input_layernorm.weight";
    dir = dir_with(m, &w);
    load_and_inspect_fail(dir, PT_EFORMAT, "unexpected tensor 'model.layers.2.input_layernorm.weight'");
    pt_test_rm_rf(dir);
    free(dir);

    /* mis-shaped tensor: same element count, transposed */
    wlist_from_model(&w, m);
    pt_st_write_tensor *t = wlist_find(&w, "model.layers.0.self_attn.o_proj.weight");
    t->shape[0] = 8;
    t->shape[1] = 32; /* [16, 16] in the model */
    dir = dir_with(m, &w);
    load_and_inspect_fail(dir, PT_ESHAPE,
                          "tensor 'model.layers.0.self_attn.o_proj.weight' has shape [8, 32]");
    pt_test_rm_rf(dir);
    free(dir);

    /* 2-D where 1-D is expected */
    wlist_from_model(&w, m);
    t = wlist_find(&w, "model.norm.weight");
    t->ndim = 2;
    t->shape[0] = 1;
    t->shape[1] = 16;
    dir = dir_with(m, &w);
    load_and_inspect_fail(dir, PT_ESHAPE, "'model.norm.weight'");
    pt_test_rm_rf(dir);
    free(dir);

    /* an integer tensor */
    wlist_from_model(&w, m);
    t = wlist_find(&w, "model.norm.weight");
    t->dtype = PT_ST_I32;
    dir = dir_with(m, &w);
    load_and_inspect_fail(dir, PT_EUNSUPPORTED, "dtype I32");
    pt_test_rm_rf(dir);
    free(dir);

    /* rotary inv_freq buffers are ignored; a tied lm_head equal to the
     * embedding is accepted, a different one is not */
    wlist_from_model(&w, m);
    static const float inv[2] = { 1.0f, 0.01f };
    w.t[w.n] = (pt_st_write_tensor){ .name = "model.layers.0.self_attn.rotary_emb.inv_freq",
                                     .dtype = PT_ST_F32, .ndim = 1, .shape = { 2 }, .data = inv };
    w.n++;
    w.t[w.n] = *wlist_find(&w, "model.embed_tokens.weight");
    w.t[w.n++].name = "lm_head.weight";
    dir = dir_with(m, &w);
    ck_assert_ok(pt_model_load_dir(&r, dir, &o));
    assert_same_model(m, r);
    free_loaded(r);
    r = NULL;
    pt_test_rm_rf(dir);
    free(dir);
    const pt_tensor_ref *emb = pt__model_find_tensor(m, "model.embed_tokens.weight");
    float *other = malloc(emb->numel * sizeof(float));
    memcpy(other, emb->data, emb->numel * sizeof(float));
    other[17] += 1.0f;
    w.t[w.n - 1].data = other;
    dir = dir_with(m, &w);
    ck_assert_status(pt_model_load_dir(&r, dir, &o), PT_EFORMAT,
                     "'lm_head.weight' differs from 'model.embed_tokens.weight'");
    free(other);
    pt_test_rm_rf(dir);
    free(dir);

    /* no weights; no config; not a directory; a malformed safetensors */
    dir = dir_with(m, NULL);
    load_and_inspect_fail(dir, PT_ENOTFOUND, "no model.safetensors");
    write_text(dir, "model.safetensors", "\x08\0\0\0\0\0\0\0{}      ");
    ck_assert_int_eq(pt_model_load_dir(&r, dir, &o), PT_EFORMAT);
    char *cp = pt__path_join(dir, "config.json");
    remove(cp);
    ck_assert_status(pt_model_load_dir(&r, dir, &o), PT_ENOTFOUND, "config.json");
    ck_assert_status(pt_model_load_dir(&r, cp, &o), PT_ENOTFOUND, "not a directory");
    /* a bad config names the file */
    write_text(dir, "config.json", "{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": \"big\"}");
    ck_assert_status(pt_model_load_dir(&r, dir, &o), PT_ECONFIG, "hidden_size");
    ck_assert(strstr(pt_last_error(), cp) != NULL);
    ck_assert_ptr_null(r);
    pt_free(cp);
    pt_test_rm_rf(dir);
    free(dir);

    /* options with a wrong size */
    pt_model_load_options bad = o;
    bad.size = 3;
    ck_assert_status(pt_model_load_dir(&r, "/", &bad), PT_EINVAL, "size");
    pt_model_free(m);
}
END_TEST

/* ---- JSONL rows ---------------------------------------------------------------- */

START_TEST(test_jsonl_rows)
{
    const char *data = "\xEF\xBB\xBF{\"text\": \"hello\"}\r\n"
                       "\n"
                       "   \n"
                       "{\"input_ids\": [1, 2, 3], \"loss_mask\": [0, 1, true]}\n"
                       "{\"prompt\": \"p\", \"completion\": \"c\"}\n"
                       "{\"input_ids\": []}";
    pt_jsonl *r;
    ck_assert_ok(pt__jsonl_open_memory(&r, data, strlen(data), "rows.jsonl", 0));
    const cJSON *row;
    ck_assert_int_eq(pt__jsonl_next(r, &row), 1);
    ck_assert_uint_eq(pt__jsonl_line(r), 1);
    ck_assert_int_eq(pt__jsonl_row_kind(r, row), PT_JSONL_TEXT);
    const char *s;
    size_t len;
    ck_assert_ok(pt__jsonl_row_string(&s, &len, r, row, "text", 1));
    ck_assert_str_eq(s, "hello");
    ck_assert_uint_eq(len, 5);
    ck_assert_status(pt__jsonl_row_string(&s, &len, r, row, "prompt", 1), PT_ENOTFOUND,
                     "rows.jsonl line 1: the row has no \"prompt\"");

    ck_assert_int_eq(pt__jsonl_next(r, &row), 1);
    ck_assert_uint_eq(pt__jsonl_line(r), 4);
    ck_assert_int_eq(pt__jsonl_row_kind(r, row), PT_JSONL_IDS);
    int32_t *ids;
    uint8_t *mask;
    size_t n;
    ck_assert_ok(pt__jsonl_row_ids(&ids, &mask, &n, r, row, 10));
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[2], 3);
    ck_assert_int_eq(mask[0], 0);
    ck_assert_int_eq(mask[1], 1);
    ck_assert_int_eq(mask[2], 1);
    pt_free(ids);
    pt_free(mask);
    ck_assert_status(pt__jsonl_row_ids(&ids, &mask, &n, r, row, 3), PT_ERANGE,
                     "line 4: \"input_ids\"[2] = 3 is out of range [0, 3)");

    ck_assert_int_eq(pt__jsonl_next(r, &row), 1);
    ck_assert_uint_eq(pt__jsonl_line(r), 5);
    ck_assert_int_eq(pt__jsonl_row_kind(r, row), PT_JSONL_OTHER);
    ck_assert_int_eq(pt__jsonl_next(r, &row), 1);
    ck_assert_uint_eq(pt__jsonl_line(r), 6);
    ck_assert_ok(pt__jsonl_row_ids(&ids, &mask, &n, r, row, 10));
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(ids);
    ck_assert_ptr_null(mask);
    ck_assert_int_eq(pt__jsonl_next(r, &row), 0);
    ck_assert_uint_eq(pt__jsonl_rows(r), 4);
    ck_assert_ok(pt__jsonl_rewind(r));
    ck_assert_int_eq(pt__jsonl_next(r, &row), 1);
    ck_assert_uint_eq(pt__jsonl_line(r), 1);
    pt__jsonl_close(r);
}
END_TEST

static void expect_row_error(const char *line, int status, const char *frag, int vocab)
{
    char data[512];
    snprintf(data, sizeof data, "{\"text\": \"ok\"}\n\n%s\n{\"text\": \"after\"}\n", line);
    pt_jsonl *r;
    ck_assert_ok(pt__jsonl_open_memory(&r, data, strlen(data), "d.jsonl", 256));
    const cJSON *row;
    ck_assert_int_eq(pt__jsonl_next(r, &row), 1);
    int st = pt__jsonl_next(r, &row);
    if (st == 1) {
        st = pt__jsonl_row_kind(r, row);
        if (st == PT_JSONL_IDS) {
            int32_t *ids;
            uint8_t *mask;
            size_t n;
            st = pt__jsonl_row_ids(&ids, &mask, &n, r, row, vocab);
            if (st == PT_OK) {
                pt_free(ids);
                pt_free(mask);
            }
        } else if (st == PT_JSONL_TEXT) {
            const char *s;
            st = pt__jsonl_row_string(&s, NULL, r, row, "text", 1);
        }
    }
    ck_assert_msg(st == status, "'%s': got %s (%s)", line, pt_status_name(st), pt_last_error());
    ck_assert_msg(strstr(pt_last_error(), "d.jsonl line 3: ") != NULL, "no line: %s",
                  pt_last_error());
    ck_assert_msg(strstr(pt_last_error(), frag) != NULL, "'%s' lacks '%s'", pt_last_error(), frag);
    /* the reader goes on with the next line */
    ck_assert_int_eq(pt__jsonl_next(r, &row), 1);
    ck_assert_uint_eq(pt__jsonl_line(r), 4);
    pt__jsonl_close(r);
}

START_TEST(test_jsonl_public_reader)
{
    char *dir = pt_test_tmpdir("pt_modelio_");
    char *p = pt__path_join(dir, "rows.jsonl");
    static const char text[] = "{\"prompt\": \"hi\", \"answer\": \"2\"}\n\n{\"prompt\": 5}\n"
                               "{\"prompt\": \"a\"} x\n{\"answer\": \"b\"}\n";
    ck_assert_ok(pt__write_file_atomic(p, text, sizeof text - 1));
    pt_jsonl_reader *r;
    ck_assert_ok(pt_jsonl_reader_open(&r, p, 0));
    const char *s, *json;
    size_t len, line;
    ck_assert_status(pt_jsonl_reader_string(&s, &len, r, "prompt", true), PT_ESTATE, "no current row");
    ck_assert_int_eq(pt_jsonl_reader_next(r), 1);
    ck_assert_ok(pt_jsonl_reader_string(&s, &len, r, "prompt", true));
    ck_assert_str_eq(s, "hi");
    ck_assert_uint_eq(len, 2);
    ck_assert_ok(pt_jsonl_reader_string(&s, NULL, r, "missing", false));
    ck_assert_ptr_null(s);
    ck_assert_ok(pt_jsonl_reader_json(&json, r));
    ck_assert_str_eq(json, "{\"prompt\":\"hi\",\"answer\":\"2\"}");
    ck_assert_int_eq(pt_jsonl_reader_next(r), 1);
    line = pt_jsonl_reader_line_number(r);
    ck_assert_uint_eq(line, 3);
    ck_assert_status(pt_jsonl_reader_string(&s, NULL, r, "prompt", true), PT_EFORMAT,
                     "rows.jsonl line 3: \"prompt\" must be a string");
    ck_assert_status(pt_jsonl_reader_next(r), PT_EFORMAT, "rows.jsonl line 4: unexpected data after");
    ck_assert_int_eq(pt_jsonl_reader_next(r), 1);
    ck_assert_status(pt_jsonl_reader_string(&s, NULL, r, "prompt", true), PT_ENOTFOUND,
                     "rows.jsonl line 5: the row has no \"prompt\"");
    ck_assert_int_eq(pt_jsonl_reader_next(r), 0);
    pt_jsonl_reader_free(r);
    pt_jsonl_reader_free(NULL);
    ck_assert_status(pt_jsonl_reader_open(&r, "/nonexistent/x.jsonl", 0), PT_ENOTFOUND, "x.jsonl");
    ck_assert_ptr_null(r);
    unlink(p);
    pt_free(p);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(test_jsonl_bad_rows)
{
    expect_row_error("{\"text\": \"x\"", PT_EFORMAT, "not valid JSON", 10);
    expect_row_error("[1, 2]", PT_EFORMAT, "must be a JSON object", 10);
    expect_row_error("{\"a\": 1} {\"b\": 2}", PT_EFORMAT, "one row per line", 10);
    expect_row_error("{\"text\": 5}", PT_EFORMAT, "\"text\" must be a string", 10);
    expect_row_error("{\"text\": \"\xff\xfe\"}", PT_EFORMAT, "not valid UTF-8", 10);
    expect_row_error("{\"text\": \"\xed\xa0\x80\"}", PT_EFORMAT, "not valid UTF-8", 10);
    expect_row_error("{\"text\": \"a\", \"input_ids\": [1]}", PT_EFORMAT, "both", 10);
    expect_row_error("{\"input_ids\": 5}", PT_EFORMAT, "must be an array", 10);
    expect_row_error("{\"input_ids\": [1, \"2\"]}", PT_EFORMAT, "\"input_ids\"[1] is not an integer",
                     10);
    expect_row_error("{\"input_ids\": [1, 2.5]}", PT_EFORMAT, "is not an integer", 10);
    expect_row_error("{\"input_ids\": [-1]}", PT_ERANGE, "= -1 is out of range", 10);
    expect_row_error("{\"input_ids\": [1, 10]}", PT_ERANGE, "= 10 is out of range [0, 10)", 10);
    expect_row_error("{\"input_ids\": [1, 1e300]}", PT_ERANGE, "out of range", 10);
    expect_row_error("{\"input_ids\": [1, 2], \"loss_mask\": [1]}", PT_EFORMAT,
                     "\"loss_mask\" has 1 entries but \"input_ids\" has 2", 10);
    expect_row_error("{\"input_ids\": [1, 2], \"loss_mask\": [1, 2]}", PT_EFORMAT,
                     "\"loss_mask\"[1] must be 0 or 1", 10);
    expect_row_error("{\"input_ids\": [1, 2], \"loss_mask\": \"11\"}", PT_EFORMAT,
                     "\"loss_mask\" must be an array", 10);
    char longline[400];
    memset(longline, ' ', sizeof longline - 1);
    longline[0] = '{';
    longline[sizeof longline - 2] = '}';
    longline[sizeof longline - 1] = '\0';
    expect_row_error(longline, PT_ERANGE, "longer than 256 bytes", 10);
    expect_row_error("{\"text\": \"a\\u0000b\"}", PT_EFORMAT,
                     "\"text\": the string contains \\u0000 (a NUL character)", 10);
    expect_row_error("{\"text\": \"a\\\\u0000b\", \"x\\u0000\": 1}", PT_EFORMAT,
                     "a key (column 23) contains \\u0000", 10);
    expect_row_error("{\"text\": \"a\", \"text\": \"b\"}", PT_EFORMAT, "duplicate key \"text\"", 10);
    expect_row_error("{\"messages\": [{\"role\": \"user\", \"role\": \"x\"}]}", PT_EFORMAT,
                     "duplicate key \"role\"", 10);

    /* a NUL byte in a line; a missing file */
    static const char nul[] = "{\"text\": \"a\"}\n{\"te\0t\": 1}\n";
    pt_jsonl *r;
    ck_assert_ok(pt__jsonl_open_memory(&r, nul, sizeof nul - 1, "n.jsonl", 0));
    const cJSON *row;
    ck_assert_int_eq(pt__jsonl_next(r, &row), 1);
    ck_assert_status(pt__jsonl_next(r, &row), PT_EFORMAT, "n.jsonl line 2: the line contains a NUL");
    /* a NUL byte stops the reader: the rest is not read */
    ck_assert_status(pt__jsonl_next(r, &row), PT_EFORMAT, "n.jsonl line 2: reading stopped");
    pt__jsonl_close(r);
    /* /dev/zero: stops at the first NUL instead of reading forever */
    ck_assert_ok(pt__jsonl_open(&r, "/dev/zero", 0));
    ck_assert_status(pt__jsonl_next(r, &row), PT_EFORMAT, "/dev/zero line 1: the line contains a NUL byte");
    pt__jsonl_close(r);
    /* an endless line without a newline: stops after twice the cap */
    static char endless[4096];
    memset(endless, 'a', sizeof endless);
    ck_assert_ok(pt__jsonl_open_memory(&r, endless, sizeof endless, "e.jsonl", 256));
    ck_assert_status(pt__jsonl_next(r, &row), PT_ERANGE,
                     "e.jsonl line 1: the line is longer than 256 bytes and no newline follows");
    ck_assert_status(pt__jsonl_next(r, &row), PT_ERANGE, "reading stopped");
    pt__jsonl_close(r);
    ck_assert_status(pt__jsonl_open(&r, "/nonexistent/x.jsonl", 0), PT_ENOTFOUND, "x.jsonl");
    ck_assert_status(pt__jsonl_open(&r, "/tmp", 0), PT_EIO, "is a directory");
}
END_TEST

START_TEST(test_jsonl_file_chunks)
{
    /* a file read in 64 KiB chunks: rows spanning chunk boundaries */
    char *dir = pt_test_tmpdir("pt_modelio_");
    char *p = pt__path_join(dir, "big.jsonl");
    FILE *f = fopen(p, "w");
    for (int i = 0; i < 3000; i++) {
        fprintf(f, "{\"input_ids\": [");
        for (int j = 0; j <= i % 50; j++)
            fprintf(f, "%s%d", j ? ", " : "", (i + j) % 97);
        fprintf(f, "]}\n");
    }
    fclose(f);
    pt_jsonl *r;
    ck_assert_ok(pt__jsonl_open(&r, p, 0));
    const cJSON *row;
    int i = 0, st;
    while ((st = pt__jsonl_next(r, &row)) == 1) {
        int32_t *ids;
        size_t n;
        ck_assert_ok(pt__jsonl_row_ids(&ids, NULL, &n, r, row, 97));
        ck_assert_uint_eq(n, (size_t)(i % 50 + 1));
        ck_assert_int_eq(ids[n - 1], (i + (int)n - 1) % 97);
        ck_assert_uint_eq(pt__jsonl_line(r), (size_t)i + 1);
        pt_free(ids);
        i++;
    }
    ck_assert_int_eq(st, 0);
    ck_assert_int_eq(i, 3000);
    pt__jsonl_close(r);
    pt_free(p);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

/* ---- evaluation ------------------------------------------------------------------ */

/* Reference: pt_model_loss of one row (every position predicting the next,
 * weights from the mask). */
static double ref_loss(pt_model *m, const int32_t *ids, const uint8_t *mask, int n)
{
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 1, n));
    int32_t tg[64];
    float wt[64];
    for (int t = 0; t < n; t++) {
        tg[t] = t + 1 < n ? ids[t + 1] : -1;
        wt[t] = t + 1 < n && (!mask || mask[t + 1]) ? 1.0f : 0.0f;
    }
    pt_batch b = pt_test_row_batch(ids, tg, n);
    float loss;
    ck_assert_ok(pt_model_loss(ctx, &b, wt, false, &loss));
    pt_context_free(ctx);
    return loss;
}

/* A BPE tokenizer.json with ids 0 .. n-1 (tokens "t0" ...) as dir/tokenizer.json,
 * or of model type `type` when not NULL. */
static void write_tokenizer(const char *dir, int n, const char *type)
{
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", type ? type : "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        cJSON_AddNumberToObject(vocab, name, i);
    }
    cJSON_AddArrayToObject(model, "merges");
    write_json(dir, "tokenizer.json", root);
    cJSON_Delete(root);
}

#define ck_assert_pstr_contains(needle) \
    ck_assert_msg(strstr(pt_last_error(), (needle)) != NULL, "'%s' lacks '%s'", pt_last_error(), \
                  (needle))

static pt_model *vocab_model(int vocab)
{
    pt_model_config c;
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, vocab);
    pt_model *m;
    ck_assert_ok(pt_model_create(&m, &c, 5));
    return m;
}

/* A tokenizer meets a model: every id it gives must have an embedding row,
 * and the model's vocabulary may exceed its ids only by padding (the next
 * multiple of 128, or 1%). */
START_TEST(test_eval_tokenizer_vocab)
{
    char *dir = pt_test_tmpdir("pt_modelio_tokv");
    char *p = pt__path_join(dir, "d.jsonl");
    write_text(dir, "d.jsonl", "{\"text\": \"hi\"}\n");
    pt_tokenizer *tok;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    ck_assert_int_eq(pt_tokenizer_vocab_size(tok), 261);
    static const int ok_vocab[] = { 261, 300, 384 };
    for (int i = 0; i < 3; i++) {
        pt_model *m = vocab_model(ok_vocab[i]);
        pt_eval_result *res;
        ck_assert_ok(pt_model_eval_jsonl(&res, m, tok, p, NULL));
        ck_assert_int_eq(res->tokens, 2); /* BOS h i: two targets */
        pt_eval_result_free(res);
        pt_model_free(m);
    }
    pt_eval_result *res = (pt_eval_result *)1;
    pt_model *m = vocab_model(512);
    ck_assert_status(pt_model_eval_jsonl(&res, m, tok, p, NULL), PT_ESHAPE,
                     "pt_model_eval_jsonl: the model's vocab_size 512 exceeds the tokenizer's 261 "
                     "ids by more than embedding padding (at most 384)");
    ck_assert_ptr_null(res);
    pt_model_free(m);
    m = vocab_model(385);
    ck_assert_status(pt_model_eval_jsonl(&res, m, tok, p, NULL), PT_ESHAPE,
                     "vocab_size 385 exceeds the tokenizer's 261 ids");
    pt_model_free(m);
    /* too small: refused even for {"input_ids"} rows */
    write_text(dir, "d.jsonl", "{\"input_ids\": [1, 2, 3]}\n");
    m = vocab_model(200);
    ck_assert_status(pt_model_eval_jsonl(&res, m, tok, p, NULL), PT_ESHAPE,
                     "the tokenizer's ids go up to 260 (261 ids) but the model's vocab_size is 200");
    ck_assert_ok(pt_model_eval_jsonl(&res, m, NULL, p, NULL));
    pt_eval_result_free(res);
    pt_model_free(m);
    pt_tokenizer_free(tok);
    pt_free(p);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

/* pt_model_load_dir checks the directory's tokenizer.json against the model
 * (so eval and sft of the directory both see it), and an unsupported
 * tokenizer is named as such by eval, not as a missing tokenizer.json. */
START_TEST(test_load_dir_tokenizer_checks)
{
    char *dir = pt_test_tmpdir("pt_modelio_tokd");
    pt_model *m = vocab_model(200);
    ck_assert_ok(pt_model_save_dir(m, dir, NULL));
    pt_model_free(m);
    char *tj = pt__path_join(dir, "tokenizer.json");

    write_tokenizer(dir, 150, NULL); /* 150 ids in a vocabulary of 200: padding to 256 */
    ck_assert_ok(pt_model_load_dir(&m, dir, NULL));
    ck_assert_ptr_nonnull(pt_model_tokenizer(m));
    pt_model_free(m);

    write_tokenizer(dir, 10, NULL);
    m = (pt_model *)1;
    ck_assert_status(pt_model_load_dir(&m, dir, NULL), PT_ESHAPE,
                     "tokenizer.json: the model's vocab_size 200 exceeds the tokenizer's 10 ids");
    ck_assert_pstr_contains(tj);
    ck_assert_ptr_null(m);
    write_tokenizer(dir, 201, NULL);
    ck_assert_status(pt_model_load_dir(&m, dir, NULL), PT_ESHAPE,
                     "the tokenizer's ids go up to 200 (201 ids) but the model's vocab_size is 200");
    /* not asked for: not checked */
    pt_model_load_options lo;
    pt_model_load_options_init(&lo);
    lo.load_tokenizer = false;
    ck_assert_ok(pt_model_load_dir(&m, dir, &lo));
    pt_model_free(m);

    /* an unsupported model type: the loader names it and the file */
    write_tokenizer(dir, 150, "WordPiece");
    pt_tokenizer *tok = (pt_tokenizer *)1;
    ck_assert_status(pt_tokenizer_load(&tok, dir), PT_EUNSUPPORTED,
                     "model.type: model \"WordPiece\" is not supported (only BPE)");
    ck_assert_pstr_contains(tj);
    ck_assert_ptr_null(tok);
    write_tokenizer(dir, 150, "Unigram");
    ck_assert_status(pt_tokenizer_load(&tok, dir), PT_EUNSUPPORTED, "\"Unigram\" is not supported");
    /* the model loads without it (a warning), and a {"text"} row says why */
    write_tokenizer(dir, 150, "WordPiece");
    ck_assert_ok(pt_model_load_dir(&m, dir, NULL));
    ck_assert_ptr_null(pt_model_tokenizer(m));
    write_text(dir, "d.jsonl", "{\"text\": \"hi\"}\n");
    char *p = pt__path_join(dir, "d.jsonl");
    pt_eval_result *res;
    ck_assert_status(pt_model_eval_jsonl(&res, m, NULL, p, NULL), PT_EUNSUPPORTED,
                     "line 1: a {\"text\"} row needs a tokenizer, and the model's was not loaded");
    ck_assert_pstr_contains("model \"WordPiece\" is not supported");
    ck_assert_pstr_contains(tj);
    pt_model_free(m);
    pt_free(p);
    pt_free(tj);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(test_eval_ids)
{
    pt_model *m = tiny_model(PT_ARCH_QWEN3, false, 41);
    char *dir = pt_test_tmpdir("pt_modelio_");
    char *p = pt__path_join(dir, "d.jsonl");
    static const int32_t r1[] = { 1, 5, 9, 33, 2, 60, 7 };
    static const int32_t r2[] = { 4, 4, 4, 8, 10, 11, 12, 13, 14, 15 };
    static const uint8_t m2[] = { 1, 1, 1, 0, 0, 1, 1, 0, 1, 1 };
    write_text(dir, "d.jsonl",
               "{\"input_ids\": [1, 5, 9, 33, 2, 60, 7]}\n"
               "\n"
               "{\"input_ids\": [4, 4, 4, 8, 10, 11, 12, 13, 14, 15], "
               "\"loss_mask\": [1, 1, 1, 0, 0, 1, 1, 0, 1, 1]}\n"
               "{\"input_ids\": [3]}\n");
    pt_eval_result *res;
    ck_assert_ok(pt_model_eval_jsonl(&res, m, NULL, p, NULL));
    ck_assert_uint_eq(res->n_rows, 3);
    ck_assert_int_eq(res->row_tokens[0], 6);
    ck_assert_int_eq(res->row_tokens[1], 6); /* mask of targets 1..9: 1,1,0,0,1,1,0,1,1 */
    ck_assert_int_eq(res->row_tokens[2], 0);
    ck_assert(isnan(res->row_loss[2]));
    ck_assert_int_eq(res->tokens, 12);
    double l1 = ref_loss(m, r1, NULL, 7), l2 = ref_loss(m, r2, m2, 10);
    ck_assert_msg(fabs(res->row_loss[0] - l1) < 1e-5, "%g vs %g", res->row_loss[0], l1);
    ck_assert_msg(fabs(res->row_loss[1] - l2) < 1e-5, "%g vs %g", res->row_loss[1], l2);
    ck_assert(fabs(res->loss - (6 * l1 + 6 * l2) / 12) < 1e-5);
    ck_assert(l1 > 3.0 && l1 < 5.5); /* about log(64) for random weights */
    pt_eval_result_free(res);

    /* max_length cuts rows to their first tokens */
    pt_eval_options eo;
    pt_eval_options_init(&eo);
    eo.max_length = 4;
    ck_assert_ok(pt_model_eval_jsonl(&res, m, NULL, p, &eo));
    ck_assert_int_eq(res->row_tokens[0], 3);
    double l4 = ref_loss(m, r1, NULL, 4);
    ck_assert(fabs(res->row_loss[0] - l4) < 1e-5);
    pt_eval_result_free(res);

    /* many rows: several packs of up to 512 tokens, with rows that have no
     * target in between; each row equals its own forward */
    {
        FILE *f = fopen(p, "w");
        int32_t rows[60][40];
        int lens[60];
        for (int i = 0; i < 60; i++) {
            lens[i] = i % 7 == 3 ? 1 : 20 + (i * 7) % 21;
            fprintf(f, "{\"input_ids\": [");
            for (int t = 0; t < lens[i]; t++) {
                rows[i][t] = (i * 31 + t * 17) % 64;
                fprintf(f, "%s%d", t ? ", " : "", rows[i][t]);
            }
            fprintf(f, "]}\n");
        }
        fclose(f);
        ck_assert_ok(pt_model_eval_jsonl(&res, m, NULL, p, NULL));
        ck_assert_uint_eq(res->n_rows, 60);
        double tot = 0;
        int64_t cnt = 0;
        for (int i = 0; i < 60; i++) {
            ck_assert_int_eq(res->row_tokens[i], lens[i] - 1);
            if (lens[i] < 2) {
                ck_assert(isnan(res->row_loss[i]));
                continue;
            }
            double want = ref_loss(m, rows[i], NULL, lens[i]);
            ck_assert_msg(fabs(res->row_loss[i] - want) < 1e-5, "row %d: %.8f vs %.8f", i,
                          res->row_loss[i], want);
            tot += want * (lens[i] - 1);
            cnt += lens[i] - 1;
        }
        ck_assert_int_eq(res->tokens, cnt);
        ck_assert(cnt > 1100); /* more than two packs */
        ck_assert(fabs(res->loss - tot / (double)cnt) < 1e-5);
        pt_eval_result_free(res);
    }

    /* errors name the line */
    write_text(dir, "d.jsonl", "{\"input_ids\": [1, 2]}\n{\"input_ids\": [1, 64]}\n");
    ck_assert_status(pt_model_eval_jsonl(&res, m, NULL, p, NULL), PT_ERANGE,
                     "d.jsonl line 2: \"input_ids\"[1] = 64 is out of range [0, 64)");
    write_text(dir, "d.jsonl", "{\"input_ids\": [1, 2]}\n{\"text\": \"hi\"}\n");
    ck_assert_status(pt_model_eval_jsonl(&res, m, NULL, p, NULL), PT_EUNSUPPORTED,
                     "d.jsonl line 2: a {\"text\"} row needs a tokenizer");
    write_text(dir, "d.jsonl", "{\"prompt\": \"hi\"}\n");
    ck_assert_status(pt_model_eval_jsonl(&res, m, NULL, p, NULL), PT_EFORMAT,
                     "line 1: a row needs \"text\" or \"input_ids\"");
    /* an empty file: no rows, loss 0 */
    write_text(dir, "d.jsonl", "");
    ck_assert_ok(pt_model_eval_jsonl(&res, m, NULL, p, NULL));
    ck_assert_uint_eq(res->n_rows, 0);
    ck_assert_int_eq(res->tokens, 0);
    pt_eval_result_free(res);
    pt_free(p);
    pt_test_rm_rf(dir);
    free(dir);
    pt_model_free(m);
}
END_TEST

/* ---- the real model ------------------------------------------------------------- */

static char g_model_dir[4096];

static const char *real_model(void)
{
    const char *d = pt_test_shared_data("modelio real model");
    if (!d)
        return NULL;
    snprintf(g_model_dir, sizeof g_model_dir, "%s/models/stories260K", d);
    return g_model_dir;
}

/* The bytes of one tensor, found by parsing the safetensors header here
 * (independently of io/safetensors.c). */
static void raw_tensor(const char *file, const char *name, float **out, size_t *n)
{
    char *buf;
    size_t len;
    ck_assert_ok(pt__read_file(&buf, &len, file, 1u << 30));
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | (unsigned char)buf[i];
    ck_assert_uint_lt(hl + 8, len);
    cJSON *h = cJSON_ParseWithLength(buf + 8, hl);
    ck_assert_ptr_nonnull(h);
    cJSON *t = cJSON_GetObjectItem(h, name);
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(cJSON_GetObjectItem(t, "dtype")->valuestring, "F32");
    cJSON *off = cJSON_GetObjectItem(t, "data_offsets");
    size_t a = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble;
    size_t b = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
    *n = (b - a) / 4;
    *out = malloc(b - a);
    memcpy(*out, buf + 8 + hl + a, b - a);
    cJSON_Delete(h);
    pt_free(buf);
}

START_TEST(test_real_model_load_save)
{
    const char *dir = real_model();
    if (!dir)
        return;
    pt_model *m = NULL;
    ck_assert_ok(pt_model_load_dir(&m, dir, NULL));
    pt_model_config c;
    pt_model_config_init(&c);
    pt_model_get_config(&c, m);
    ck_assert_int_eq(c.arch, PT_ARCH_LLAMA);
    ck_assert_int_eq(c.vocab_size, 512);
    ck_assert_int_eq(c.hidden_size, 64);
    ck_assert_int_eq(c.intermediate_size, 172);
    ck_assert_int_eq(c.num_hidden_layers, 5);
    ck_assert_int_eq(c.num_attention_heads, 8);
    ck_assert_int_eq(c.num_key_value_heads, 4);
    ck_assert_int_eq(c.head_dim, 8);
    ck_assert_int_eq(c.max_position_embeddings, 512);
    ck_assert(c.rms_norm_eps == 1e-5);
    ck_assert(c.tie_word_embeddings);
    ck_assert_int_eq(c.bos_token_id, 1);
    ck_assert_int_eq(c.eos_token_id, 2);
    uint64_t np;
    np = pt_model_param_count(m);
    ck_assert_uint_eq(np, 260032); /* the README's count */
    ck_assert_uint_eq(pt_model_tensor_count(m), 47);

    char *file = pt__path_join(dir, "model.safetensors");
    static const char *const names[] = { "model.layers.3.self_attn.k_proj.weight",
                                         "model.embed_tokens.weight", "model.norm.weight" };
    for (int i = 0; i < 3; i++) {
        float *raw;
        size_t n;
        raw_tensor(file, names[i], &raw, &n);
        const pt_tensor_ref *t = pt__model_find_tensor(m, names[i]);
        ck_assert_uint_eq(n, t->numel);
        ck_assert(memcmp(raw, t->data, n * 4) == 0);
        free(raw);
    }
    pt_free(file);

    pt_model_dir_info info;
    pt_model_dir_info_init(&info);
    ck_assert_ok(pt_model_dir_inspect(&info, dir));
    ck_assert_uint_eq(info.num_params, 260032);
    ck_assert_uint_eq(info.num_tensors, 47);
    ck_assert_int_eq(info.num_dtypes, 1);
    ck_assert_str_eq(info.dtypes[0].name, "F32");
    ck_assert_uint_eq(info.weight_bytes, 260032 * 4);
    ck_assert(info.has_tokenizer && !info.sharded);
    ck_assert_int_eq(info.weights_status, PT_OK);

    char *out = pt_test_tmpdir("pt_modelio_");
    ck_assert_ok(pt_model_save_dir(m, out, NULL));
    pt_model *r = NULL;
    ck_assert_ok(pt_model_load_dir(&r, out, NULL));
    assert_same_model(m, r);
    static const char *const copied[] = { "tokenizer.json", "tokenizer_config.json" };
    for (int i = 0; i < 2; i++) {
        char *a = pt__path_join(dir, copied[i]), *b = pt__path_join(out, copied[i]);
        ck_assert_msg(files_equal(a, b), "%s differs", copied[i]);
        pt_free(a);
        pt_free(b);
    }
    /* the original file and ours hold the same tensors and bytes (both
     * sorted, F32, format=pt, padded): the files are identical */
    char *a = pt__path_join(dir, "model.safetensors"), *b = pt__path_join(out, "model.safetensors");
    ck_assert(files_equal(a, b));
    pt_free(a);
    pt_free(b);
    if (pt_model_tokenizer(m) == NULL)
        fprintf(stderr, "NOTE modelio: no tokenizer loaded with the model (this build)\n");
    free_loaded(r);
    free_loaded(m);
    pt_test_rm_rf(out);
    free(out);
}
END_TEST

START_TEST(test_real_model_eval)
{
    const char *dir = real_model();
    if (!dir)
        return;
    pt_model *m = NULL;
    ck_assert_ok(pt_model_load_dir(&m, dir, NULL));
    char *ref = pt__path_join(dir, "reference/greedy_200_ids.json");
    char *text;
    size_t len;
    ck_assert_ok(pt__read_file(&text, &len, ref, 1 << 20));
    while (len && (text[len - 1] == '\n' || text[len - 1] == ' '))
        text[--len] = '\0';
    char *tmp = pt_test_tmpdir("pt_modelio_");
    char *p = pt__path_join(tmp, "d.jsonl");
    size_t n = strlen("{\"input_ids\": }\n") + len + 64;
    char *row = malloc(n + 256);
    snprintf(row, n + 256, "{\"input_ids\": %s}\n", text);
    /* the story row as text, when a tokenizer is there */
    const pt_tokenizer *tok = pt_model_tokenizer(m);
    if (tok) {
        char *story = pt__path_join(dir, "reference/story.txt"), *st;
        size_t sl;
        ck_assert_ok(pt__read_file(&st, &sl, story, 1 << 20));
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "text", st);
        char *js = cJSON_PrintUnformatted(s);
        row = realloc(row, strlen(row) + strlen(js) + 4);
        strcat(row, js);
        strcat(row, "\n");
        free(js);
        cJSON_Delete(s);
        pt_free(st);
        pt_free(story);
    }
    write_text(tmp, "d.jsonl", row);
    pt_eval_result *res;
    ck_assert_ok(pt_model_eval_jsonl(&res, m, tok, p, NULL));
    ck_assert_int_eq(res->row_tokens[0], 200);
    ck_assert_msg(fabs(res->row_loss[0] - 0.4734176614490911) < 1e-5, "greedy loss %.9f",
                  res->row_loss[0]);
    if (tok) {
        ck_assert_uint_eq(res->n_rows, 2);
        ck_assert_int_eq(res->row_tokens[1], 102);
        ck_assert_msg(fabs(res->row_loss[1] - 0.925986813586426) < 1e-5, "story loss %.9f",
                      res->row_loss[1]);
        ck_assert(fabs(res->loss - (200 * 0.4734176614490911 + 102 * 0.925986813586426) / 302) <
                  1e-5);
    } else {
        fprintf(stderr, "SKIP modelio: story text row (no tokenizer in this build)\n");
    }
    pt_eval_result_free(res);
    free(row);
    pt_free(text);
    pt_free(ref);
    pt_free(p);
    pt_test_rm_rf(tmp);
    free(tmp);
    free_loaded(m);
}
END_TEST

static Suite *modelio_suite(void)
{
    Suite *s = suite_create("modelio");
    TCase *tc = tcase_create("dirs");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_save_reload_bit_identical);
    tcase_add_test(tc, test_save_copies_tokenizer_files);
    tcase_add_test(tc, test_expected_tensors_match_model);
    tcase_add_test(tc, test_bf16_f16_load);
    tcase_add_test(tc, test_sharded);
    tcase_add_test(tc, test_bad_dirs);
    tcase_add_test(tc, test_abort_and_eos_list);
    suite_add_tcase(s, tc);
    TCase *tj = tcase_create("jsonl");
    tcase_add_test(tj, test_jsonl_rows);
    tcase_add_test(tj, test_jsonl_bad_rows);
    tcase_add_test(tj, test_jsonl_public_reader);
    tcase_add_test(tj, test_jsonl_file_chunks);
    suite_add_tcase(s, tj);
    TCase *te = tcase_create("eval");
    tcase_set_timeout(te, 120);
    tcase_add_test(te, test_eval_ids);
    tcase_add_test(te, test_eval_tokenizer_vocab);
    tcase_add_test(te, test_load_dir_tokenizer_checks);
    suite_add_tcase(s, te);
    TCase *tr = tcase_create("real");
    tcase_set_timeout(tr, 120);
    tcase_add_test(tr, test_real_model_load_save);
    tcase_add_test(tr, test_real_model_eval);
    suite_add_tcase(s, tr);
    return s;
}

int main(void)
{
    return pt_test_run(modelio_suite());
}
