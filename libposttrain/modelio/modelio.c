/* Hugging Face model directories in and out (see posttrain/modelio.h and
 * docs/model-files.md). */
#include "core/core.h"
#include "io/fileio.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "modelio/modelio_internal.h"
#include "modelio/tokshim.h"
#include "posttrain/modelio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_CONFIG_BYTES ((size_t)16 << 20)
#define MAX_INDEX_BYTES ((size_t)64 << 20)
#define MAX_COPY_BYTES ((size_t)1 << 30)
#define MAX_SHARDS 4096

/* ---- small string builder ---------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int err;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) PT_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->err)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->err = pt_err(PT_EINTERNAL, "modelio: formatting failed");
            return;
        }
        if (b->p && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *np = pt_realloc_array(b->p, cap, 1);
        if (!np) {
            b->err = PT_ENOMEM;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
}

/* A double that Python reads back as the same float: shortest round trip,
 * always with a '.' or an exponent. */
static void sb_double(sbuf *b, double v)
{
    char tmp[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v)
            break;
    }
    if (!strpbrk(tmp, ".eEn"))
        strcat(tmp, ".0");
    sb_printf(b, "%s", tmp);
}

static void sb_token_id(sbuf *b, int id)
{
    if (id >= 0)
        sb_printf(b, "%d", id);
    else
        sb_printf(b, "null");
}

/* ---- per-model record (source directory, tokenizer) ---------------------------
 *
 * pt_model's struct belongs to the model layer; modelio keeps what it knows
 * about a loaded model in the model's attachment, freed with the model. */
typedef struct mio_rec {
    char *dir;
    pt_tokenizer *tok;
} mio_rec;

static void free_rec(void *p)
{
    mio_rec *r = p;
    if (!r)
        return;
    pt_free(r->dir);
    if (r->tok)
        pt_modelio_tokenizer_free(r->tok);
    pt_free(r);
}

/* Takes ownership of dir and tok (freed on failure). */
static int set_rec(pt_model *m, char *dir, pt_tokenizer *tok)
{
    mio_rec *r = pt_calloc(1, sizeof *r);
    if (!r) {
        pt_free(dir);
        if (tok)
            pt_modelio_tokenizer_free(tok);
        return PT_ENOMEM;
    }
    r->dir = dir;
    r->tok = tok;
    pt_model_set_attachment(m, r, free_rec);
    return PT_OK;
}

const char *pt_model_source_dir(const pt_model *m)
{
    const mio_rec *r = pt_model_attachment(m);
    return r ? r->dir : NULL;
}

const pt_tokenizer *pt_model_tokenizer(const pt_model *m)
{
    const mio_rec *r = pt_model_attachment(m);
    return r ? r->tok : NULL;
}

/* ---- config.json -------------------------------------------------------------- */

int pt_model_config_load(pt_model_config *cfg, const char *path)
{
    if (!cfg || !path)
        return pt_err(PT_EINVAL, "pt_model_config_load: NULL argument");
    char *file = pt_is_dir(path) ? pt_path_join(path, "config.json") : pt_strdup(path);
    if (!file)
        return PT_ENOMEM;
    char *text = NULL;
    size_t len = 0;
    int st = pt_read_file(&text, &len, file, MAX_CONFIG_BYTES);
    if (st == PT_OK) {
        st = pt_model_config_from_json(cfg, text, len);
        if (st != PT_OK)
            pt_err_prefix(st, "%s", file);
    }
    pt_free(text);
    pt_free(file);
    return st;
}

static const char *const MODEL_TYPES[] = { "llama", "qwen2", "qwen3", "mistral" };
static const char *const CAUSAL_LMS[] = { "LlamaForCausalLM", "Qwen2ForCausalLM",
                                          "Qwen3ForCausalLM", "MistralForCausalLM" };

const char *pt_arch_model_type(int arch)
{
    return arch >= 0 && arch < 4 ? MODEL_TYPES[arch] : "?";
}

const char *pt_arch_class_name(int arch)
{
    return arch >= 0 && arch < 4 ? CAUSAL_LMS[arch] : "?";
}

/* eos_list: the JSON text of an eos_token_id list to write instead of the
 * single id (NULL: the id). */
static int config_to_json(char **out, const pt_model_config *c, const char *eos_list)
{
    int st = pt_model_config_validate(c);
    if (st)
        return st;
    const bool llama = c->arch == PT_ARCH_LLAMA, qwen2 = c->arch == PT_ARCH_QWEN2;
    const bool qwen3 = c->arch == PT_ARCH_QWEN3, mistral = c->arch == PT_ARCH_MISTRAL;
    sbuf b = { 0 };
    sb_printf(&b, "{\n  \"architectures\": [\n    \"%s\"\n  ],\n", pt_arch_class_name(c->arch));
    if (llama || qwen3)
        sb_printf(&b, "  \"attention_bias\": false,\n");
    sb_printf(&b, "  \"attention_dropout\": 0.0,\n  \"bos_token_id\": ");
    sb_token_id(&b, c->bos_token_id);
    sb_printf(&b, ",\n  \"eos_token_id\": ");
    if (eos_list)
        sb_printf(&b, "%s", eos_list);
    else
        sb_token_id(&b, c->eos_token_id);
    sb_printf(&b, ",\n  \"head_dim\": %d,\n", c->head_dim);
    sb_printf(&b, "  \"hidden_act\": \"silu\",\n  \"hidden_size\": %d,\n", c->hidden_size);
    sb_printf(&b, "  \"initializer_range\": ");
    sb_double(&b, c->initializer_range);
    sb_printf(&b, ",\n  \"intermediate_size\": %d,\n", c->intermediate_size);
    sb_printf(&b, "  \"max_position_embeddings\": %d,\n", c->max_position_embeddings);
    if (qwen2 || qwen3)
        sb_printf(&b, "  \"max_window_layers\": %d,\n", c->num_hidden_layers);
    if (llama)
        sb_printf(&b, "  \"mlp_bias\": false,\n");
    sb_printf(&b, "  \"model_type\": \"%s\",\n", pt_arch_model_type(c->arch));
    sb_printf(&b, "  \"num_attention_heads\": %d,\n", c->num_attention_heads);
    sb_printf(&b, "  \"num_hidden_layers\": %d,\n", c->num_hidden_layers);
    sb_printf(&b, "  \"num_key_value_heads\": %d,\n", c->num_key_value_heads);
    if (c->pad_token_id >= 0)
        sb_printf(&b, "  \"pad_token_id\": %d,\n", c->pad_token_id);
    if (llama)
        sb_printf(&b, "  \"pretraining_tp\": 1,\n");
    sb_printf(&b, "  \"rms_norm_eps\": ");
    sb_double(&b, c->rms_norm_eps);
    sb_printf(&b, ",\n  \"rope_scaling\": ");
    if (c->rope_type == PT_ROPE_LINEAR) {
        sb_printf(&b, "{\n    \"factor\": ");
        sb_double(&b, c->rope_factor);
        sb_printf(&b, ",\n    \"rope_type\": \"linear\",\n    \"type\": \"linear\"\n  }");
    } else if (c->rope_type == PT_ROPE_LLAMA3) {
        sb_printf(&b, "{\n    \"factor\": ");
        sb_double(&b, c->rope_factor);
        sb_printf(&b, ",\n    \"high_freq_factor\": ");
        sb_double(&b, c->rope_high_freq_factor);
        sb_printf(&b, ",\n    \"low_freq_factor\": ");
        sb_double(&b, c->rope_low_freq_factor);
        sb_printf(&b, ",\n    \"original_max_position_embeddings\": %d,\n",
                  c->rope_original_max_position_embeddings);
        sb_printf(&b, "    \"rope_type\": \"llama3\"\n  }");
    } else {
        sb_printf(&b, "null");
    }
    sb_printf(&b, ",\n  \"rope_theta\": ");
    sb_double(&b, c->rope_theta);
    sb_printf(&b, ",\n");
    if (mistral) {
        sb_printf(&b, "  \"sliding_window\": ");
        if (c->sliding_window > 0)
            sb_printf(&b, "%d,\n", c->sliding_window);
        else
            sb_printf(&b, "null,\n");
    } else if (qwen2 || qwen3) {
        sb_printf(&b, "  \"sliding_window\": null,\n");
    }
    sb_printf(&b, "  \"tie_word_embeddings\": %s,\n", c->tie_word_embeddings ? "true" : "false");
    sb_printf(&b, "  \"torch_dtype\": \"float32\",\n  \"use_cache\": true,\n");
    if (qwen2 || qwen3)
        sb_printf(&b, "  \"use_sliding_window\": false,\n");
    sb_printf(&b, "  \"vocab_size\": %d\n}\n", c->vocab_size);
    if (b.err) {
        pt_free(b.p);
        return b.err;
    }
    *out = b.p;
    return PT_OK;
}

int pt_model_config_to_json(char **out, const pt_model_config *cfg)
{
    if (!out || !cfg)
        return pt_err(PT_EINVAL, "pt_model_config_to_json: NULL argument");
    *out = NULL;
    return config_to_json(out, cfg, NULL);
}

/* ---- weights: one file or an index of shards --------------------------------- */

typedef struct wentry {
    const char *name;
    const pt_st_tensor *t;
    int shard;
} wentry;

typedef struct weights {
    pt_st_file **files;
    char **file_names;
    size_t nfiles;
    wentry *e;
    size_t n;
} weights;

static void weights_free(weights *w)
{
    for (size_t i = 0; i < w->nfiles; i++) {
        pt_st_close(w->files[i]);
        pt_free(w->file_names[i]);
    }
    pt_free(w->files);
    pt_free(w->file_names);
    pt_free(w->e);
    memset(w, 0, sizeof *w);
}

static int wentry_cmp(const void *a, const void *b)
{
    return strcmp(((const wentry *)a)->name, ((const wentry *)b)->name);
}

/* Needs weights_seal() first (entries sorted by name). */
static const wentry *weights_find(const weights *w, const char *name)
{
    wentry key = { name, NULL, 0 };
    return w->n ? bsearch(&key, w->e, w->n, sizeof *w->e, wentry_cmp) : NULL;
}

/* Sort the entries by name and reject a name held by two shards. */
static int weights_seal(weights *w, const char *dir)
{
    if (w->n > 1)
        qsort(w->e, w->n, sizeof *w->e, wentry_cmp);
    for (size_t i = 1; i < w->n; i++)
        if (strcmp(w->e[i - 1].name, w->e[i].name) == 0)
            return pt_err(PT_EFORMAT, "%s: tensor '%s' is in both %s and %s", dir, w->e[i].name,
                          w->file_names[w->e[i - 1].shard], w->file_names[w->e[i].shard]);
    return PT_OK;
}

static int weights_add_file(weights *w, const char *dir, const char *fname)
{
    char *path = pt_path_join(dir, fname);
    if (!path)
        return PT_ENOMEM;
    pt_st_file *f;
    int st = pt_st_open(&f, path);
    pt_free(path);
    if (st)
        return st;
    size_t cnt = pt_st_count(f), total;
    pt_st_file **nf = pt_realloc_array(w->files, w->nfiles + 1, sizeof *nf);
    if (nf)
        w->files = nf;
    char **nn = nf ? pt_realloc_array(w->file_names, w->nfiles + 1, sizeof *nn) : NULL;
    if (nn)
        w->file_names = nn;
    wentry *ne = NULL;
    if (nn && pt_add_size(w->n, cnt, &total))
        ne = pt_realloc_array(w->e, total ? total : 1, sizeof *ne);
    char *fn = ne ? pt_strdup(fname) : NULL;
    if (!fn) {
        if (ne)
            w->e = ne;
        pt_st_close(f);
        return PT_ENOMEM;
    }
    w->e = ne;
    int idx = (int)w->nfiles;
    w->files[w->nfiles] = f;
    w->file_names[w->nfiles] = fn;
    w->nfiles++;
    for (size_t i = 0; i < cnt; i++) {
        const pt_st_tensor *t = pt_st_tensor_at(f, i);
        w->e[w->n++] = (wentry){ t->name, t, idx };
    }
    return PT_OK;
}

static bool safe_shard_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 255 || s[0] == '.' || strchr(s, '/') || strchr(s, '\\'))
        return false;
    return n > 12 && strcmp(s + n - 12, ".safetensors") == 0;
}

static int item_key_cmp(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

static int item_val_cmp(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->valuestring, (*(const cJSON *const *)b)->valuestring);
}

static int load_index(weights *w, const char *dir)
{
    const cJSON **by_key = NULL, **by_val = NULL;
    char *path = pt_path_join(dir, "model.safetensors.index.json");
    if (!path)
        return PT_ENOMEM;
    char *text = NULL;
    size_t len = 0;
    int st = pt_read_file(&text, &len, path, MAX_INDEX_BYTES);
    if (st) {
        pt_free(path);
        return st;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    pt_free(text);
    if (!root) {
        st = pt_err(PT_EFORMAT, "%s: not valid JSON", path);
        goto done;
    }
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        st = pt_err(PT_EFORMAT, "%s: 'weight_map' is missing or not an object", path);
        goto done;
    }
    if (!wm->child) {
        st = pt_err(PT_EFORMAT, "%s: 'weight_map' is empty", path);
        goto done;
    }
    /* Validate the map (sorted copies keep every check O(n log n) however
     * large a hostile index is). */
    size_t nmap = 0;
    for (const cJSON *c = wm->child; c; c = c->next) {
        if (!cJSON_IsString(c) || !c->valuestring || !c->string) {
            st = pt_err(PT_EFORMAT, "%s: weight_map['%.200s'] must be a file name string", path,
                        c->string ? c->string : "");
            goto done;
        }
        if (!safe_shard_name(c->valuestring)) {
            st = pt_err(PT_EFORMAT,
                        "%s: weight_map['%.200s'] = '%.200s' is not a plain *.safetensors file "
                        "name in the directory",
                        path, c->string, c->valuestring);
            goto done;
        }
        nmap++;
    }
    by_key = pt_malloc_array(nmap, sizeof *by_key);
    by_val = pt_malloc_array(nmap, sizeof *by_val);
    if (!by_key || !by_val) {
        st = PT_ENOMEM;
        goto done;
    }
    size_t k = 0;
    for (const cJSON *c = wm->child; c; c = c->next, k++)
        by_key[k] = by_val[k] = c;
    qsort(by_key, nmap, sizeof *by_key, item_key_cmp);
    qsort(by_val, nmap, sizeof *by_val, item_val_cmp);
    for (size_t i = 1; i < nmap; i++)
        if (strcmp(by_key[i - 1]->string, by_key[i]->string) == 0) {
            st = pt_err(PT_EFORMAT, "%s: weight_map lists '%.200s' twice", path, by_key[i]->string);
            goto done;
        }
    /* Open each distinct shard once. */
    for (size_t i = 0; i < nmap; i++) {
        if (i && strcmp(by_val[i - 1]->valuestring, by_val[i]->valuestring) == 0)
            continue;
        if (w->nfiles >= MAX_SHARDS) {
            st = pt_err(PT_ERANGE, "%s: more than %d shards", path, MAX_SHARDS);
            goto done;
        }
        if ((st = weights_add_file(w, dir, by_val[i]->valuestring)) != PT_OK) {
            if (st == PT_ENOTFOUND)
                pt_err_prefix(st, "%s: shard named in weight_map", path);
            goto done;
        }
    }
    if ((st = weights_seal(w, dir)) != PT_OK)
        goto done;
    /* The map and the shards must agree exactly. */
    for (size_t i = 0; i < nmap; i++) {
        const cJSON *c = by_key[i];
        const wentry *e = weights_find(w, c->string);
        if (!e || strcmp(w->file_names[e->shard], c->valuestring) != 0) {
            st = pt_err(PT_EFORMAT, "%s: weight_map puts tensor '%.200s' in %s, which has no such "
                                    "tensor",
                        path, c->string, c->valuestring);
            goto done;
        }
    }
    if (nmap != w->n) {
        for (size_t i = 0; i < w->n; i++) {
            cJSON key;
            memset(&key, 0, sizeof key);
            key.string = (char *)(uintptr_t)w->e[i].name;
            const cJSON *kp = &key;
            if (!bsearch(&kp, by_key, nmap, sizeof *by_key, item_key_cmp)) {
                st = pt_err(PT_EFORMAT, "%s: tensor '%s' in shard %s is not in weight_map", path,
                            w->e[i].name, w->file_names[w->e[i].shard]);
                goto done;
            }
        }
    }
    st = PT_OK;
done:
    pt_free(by_key);
    pt_free(by_val);
    cJSON_Delete(root);
    pt_free(path);
    return st;
}

static bool ignorable_tensor(const char *name)
{
    size_t n = strlen(name);
    static const char suffix[] = ".rotary_emb.inv_freq";
    return n >= sizeof suffix - 1 && strcmp(name + n - (sizeof suffix - 1), suffix) == 0;
}

static int shape_matches(const pt_st_tensor *t, const pt_tensor_ref *r)
{
    if (t->ndim != r->ndim)
        return 0;
    if (t->shape[0] != r->shape[0])
        return 0;
    return r->ndim == 1 || t->shape[1] == r->shape[1];
}

static bool shape_matches_st(const pt_st_tensor *a, const pt_st_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

static int str_ptr_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Fill the model's tensors from w (validated first: missing, unexpected,
 * mis-shaped), converting to F32. */
static int fill_model(pt_model *m, const weights *w, const char *dir)
{
    pt_model_config cfg;
    pt_model_get_config(&cfg, m);
    size_t nt = pt_model_base_tensor_count(m);
    for (size_t i = 0; i < nt; i++) {
        const pt_tensor_ref *r = pt_model_tensor(m, i);
        const wentry *e = weights_find(w, r->name);
        if (!e)
            return pt_err(PT_ENOTFOUND, "%s: tensor '%s' is missing from the weights", dir,
                          r->name);
        if (!shape_matches(e->t, r)) {
            char want[64], got[160];
            shape_str(want, sizeof want, r->ndim, r->shape);
            shape_str(got, sizeof got, e->t->ndim, e->t->shape);
            return pt_err(PT_ESHAPE, "%s: tensor '%s' has shape %s in %s, the config needs %s",
                          dir, r->name, got, w->file_names[e->shard], want);
        }
        if (e->t->dtype != PT_ST_F32 && e->t->dtype != PT_ST_F16 && e->t->dtype != PT_ST_BF16)
            return pt_err(PT_EUNSUPPORTED, "%s: tensor '%s' has dtype %s (only F32, F16, BF16 load)",
                          dir, r->name, pt_st_dtype_name(e->t->dtype));
    }
    const pt_tensor_ref *embed = pt_model_find_tensor(m, "model.embed_tokens.weight");
    const wentry *head = NULL;
    /* Every tensor of the model was found above, so a file with as many
     * tensors (names being unique) has no other; else look for the extra one
     * (through a sorted copy of the model's names). */
    const char **names = NULL;
    if (w->n != nt) {
        names = pt_malloc_array(nt ? nt : 1, sizeof *names);
        if (!names)
            return PT_ENOMEM;
        for (size_t i = 0; i < nt; i++)
            names[i] = pt_model_tensor(m, i)->name;
        qsort(names, nt, sizeof *names, str_ptr_cmp);
    }
    for (size_t i = 0; names && i < w->n; i++) {
        const char *name = w->e[i].name;
        if (bsearch(&name, names, nt, sizeof *names, str_ptr_cmp) || ignorable_tensor(name))
            continue;
        if (cfg.tie_word_embeddings && strcmp(name, "lm_head.weight") == 0 && embed) {
            head = &w->e[i];
            continue;
        }
        pt_free(names);
        return pt_err(PT_EFORMAT,
                      "%s: unexpected tensor '%s' in %s (not part of a %s model with this config)",
                      dir, name, w->file_names[w->e[i].shard], pt_arch_model_type(cfg.arch));
    }
    pt_free(names);
    for (size_t i = 0; i < nt; i++) {
        const pt_tensor_ref *r = pt_model_tensor(m, i);
        const wentry *e = weights_find(w, r->name);
        int st = pt_check_abort();
        if (st)
            return st;
        st = pt_st_read_f32(e->t, r->data, r->numel);
        if (st)
            return pt_err_prefix(st, "%s: tensor '%s'", dir, r->name);
    }
    if (head) {
        /* A tied checkpoint that still carries lm_head.weight: accepted only
         * when it is the embedding matrix again, so nothing is silently dropped. */
        if (!shape_matches(head->t, embed))
            return pt_err(PT_ESHAPE, "%s: 'lm_head.weight' is present with tie_word_embeddings "
                                     "true and its shape differs from the embedding's",
                          dir);
        float *tmp = pt_malloc_array(embed->numel, sizeof(float));
        if (!tmp)
            return PT_ENOMEM;
        int st = pt_st_read_f32(head->t, tmp, embed->numel);
        if (st == PT_OK && memcmp(tmp, embed->data, embed->numel * sizeof(float)) != 0)
            st = pt_err(PT_EFORMAT,
                        "%s: 'lm_head.weight' differs from 'model.embed_tokens.weight' but "
                        "tie_word_embeddings is true",
                        dir);
        pt_free(tmp);
        if (st)
            return st;
    }
    return PT_OK;
}

int pt_model_load_options_init(pt_model_load_options *o)
{
    if (!o)
        return pt_err(PT_EINVAL, "pt_model_load_options_init: NULL");
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->load_tokenizer = true;
    return PT_OK;
}

static int open_weights(weights *w, const char *dir)
{
    memset(w, 0, sizeof *w);
    int st;
    if (pt_dir_has_file(dir, "model.safetensors")) {
        st = weights_add_file(w, dir, "model.safetensors");
        if (st == PT_OK)
            st = weights_seal(w, dir);
    }
    else if (pt_dir_has_file(dir, "model.safetensors.index.json"))
        st = load_index(w, dir);
    else
        return pt_err(PT_ENOTFOUND,
                      "%s: no model.safetensors or model.safetensors.index.json (pytorch_model.bin "
                      "is not supported)",
                      dir);
    if (st)
        weights_free(w);
    return st;
}

/* The tensors a config needs, by Hugging Face name, as the model layer lays
 * them out (checked against its table by the tests). */
static void exp_add(exp_tensor *e, size_t *n, int layer, const char *name, int64_t rows,
                    int64_t cols)
{
    exp_tensor *t = &e[(*n)++];
    if (layer >= 0)
        snprintf(t->name, sizeof t->name, "model.layers.%d.%s", layer, name);
    else
        snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
}

size_t pt_modelio_expected_tensors(exp_tensor *out, const pt_model_config *c)
{
    const int64_t V = c->vocab_size, H = c->hidden_size, I = c->intermediate_size;
    const int64_t hd = c->head_dim, Q = c->num_attention_heads * hd;
    const int64_t KV = c->num_key_value_heads * hd;
    size_t n = 0;
    exp_add(out, &n, -1, "model.embed_tokens.weight", V, H);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        exp_add(out, &n, l, "input_layernorm.weight", H, 0);
        exp_add(out, &n, l, "self_attn.q_proj.weight", Q, H);
        exp_add(out, &n, l, "self_attn.k_proj.weight", KV, H);
        exp_add(out, &n, l, "self_attn.v_proj.weight", KV, H);
        if (c->attention_bias) {
            exp_add(out, &n, l, "self_attn.q_proj.bias", Q, 0);
            exp_add(out, &n, l, "self_attn.k_proj.bias", KV, 0);
            exp_add(out, &n, l, "self_attn.v_proj.bias", KV, 0);
        }
        if (c->qk_norm) {
            exp_add(out, &n, l, "self_attn.q_norm.weight", hd, 0);
            exp_add(out, &n, l, "self_attn.k_norm.weight", hd, 0);
        }
        exp_add(out, &n, l, "self_attn.o_proj.weight", H, Q);
        exp_add(out, &n, l, "post_attention_layernorm.weight", H, 0);
        exp_add(out, &n, l, "mlp.gate_proj.weight", I, H);
        exp_add(out, &n, l, "mlp.up_proj.weight", I, H);
        exp_add(out, &n, l, "mlp.down_proj.weight", H, I);
    }
    exp_add(out, &n, -1, "model.norm.weight", H, 0);
    if (!c->tie_word_embeddings)
        exp_add(out, &n, -1, "lm_head.weight", V, H);
    return n;
}

static int exp_cmp(const void *a, const void *b)
{
    return strcmp(((const exp_tensor *)a)->name, ((const exp_tensor *)b)->name);
}

/* The first problem pt_model_load_dir would find with these weights
 * (without reading data), as a status with the message set. */
static int check_weights(const weights *w, const pt_model_config *c, const char *dir)
{
    size_t cap = 3 + 14 * (size_t)c->num_hidden_layers;
    exp_tensor *e = pt_malloc_array(cap, sizeof *e);
    if (!e)
        return PT_ENOMEM;
    size_t n = pt_modelio_expected_tensors(e, c);
    int st = PT_OK;
    const wentry *embed = NULL;
    for (size_t i = 0; i < n && st == PT_OK; i++) {
        const wentry *f = weights_find(w, e[i].name);
        if (!f) {
            st = pt_err(PT_ENOTFOUND, "%s: tensor '%s' is missing from the weights", dir,
                        e[i].name);
        } else if (f->t->ndim != e[i].ndim || f->t->shape[0] != e[i].shape[0] ||
                   (e[i].ndim == 2 && f->t->shape[1] != e[i].shape[1])) {
            char want[64], got[160];
            shape_str(want, sizeof want, e[i].ndim, e[i].shape);
            shape_str(got, sizeof got, f->t->ndim, f->t->shape);
            st = pt_err(PT_ESHAPE, "%s: tensor '%s' has shape %s in %s, the config needs %s", dir,
                        e[i].name, got, w->file_names[f->shard], want);
        } else if (f->t->dtype != PT_ST_F32 && f->t->dtype != PT_ST_F16 &&
                   f->t->dtype != PT_ST_BF16) {
            st = pt_err(PT_EUNSUPPORTED, "%s: tensor '%s' has dtype %s (only F32, F16, BF16 load)",
                        dir, e[i].name, pt_st_dtype_name(f->t->dtype));
        }
        if (f && i == 0)
            embed = f;
    }
    if (st == PT_OK && w->n != n) {
        qsort(e, n, sizeof *e, exp_cmp);
        for (size_t i = 0; i < w->n && st == PT_OK; i++) {
            exp_tensor key;
            snprintf(key.name, sizeof key.name, "%s", w->e[i].name);
            if ((strlen(w->e[i].name) < sizeof key.name &&
                 bsearch(&key, e, n, sizeof *e, exp_cmp)) ||
                ignorable_tensor(w->e[i].name))
                continue;
            if (c->tie_word_embeddings && strcmp(w->e[i].name, "lm_head.weight") == 0 && embed &&
                shape_matches_st(w->e[i].t, embed->t))
                continue; /* equality with the embedding is only known after reading */
            st = pt_err(PT_EFORMAT,
                        "%s: unexpected tensor '%s' in %s (not part of a %s model with this config)",
                        dir, w->e[i].name, w->file_names[w->e[i].shard],
                        pt_arch_model_type(c->arch));
        }
    }
    pt_free(e);
    return st;
}

int pt_model_config_num_params(uint64_t *out, const pt_model_config *c)
{
    if (!out || !c)
        return pt_err(PT_EINVAL, "pt_model_config_num_params: NULL argument");
    int st = pt_model_config_validate(c);
    if (st)
        return st;
    /* validate() bounds every size, so these products cannot overflow. */
    uint64_t H = (uint64_t)c->hidden_size, V = (uint64_t)c->vocab_size;
    uint64_t hd = (uint64_t)c->head_dim, I = (uint64_t)c->intermediate_size;
    uint64_t Q = (uint64_t)c->num_attention_heads * hd, KV = (uint64_t)c->num_key_value_heads * hd;
    uint64_t layer = 2 * H + H * Q + 2 * H * KV + Q * H + 3 * H * I;
    if (c->attention_bias)
        layer += Q + 2 * KV;
    if (c->qk_norm)
        layer += 2 * hd;
    *out = V * H + (uint64_t)c->num_hidden_layers * layer + H + (c->tie_word_embeddings ? 0 : V * H);
    return PT_OK;
}

int pt_model_dir_info_init(pt_model_dir_info *info)
{
    if (!info)
        return pt_err(PT_EINVAL, "pt_model_dir_info_init: NULL");
    memset(info, 0, sizeof *info);
    info->size = sizeof *info;
    pt_model_config_init(&info->config);
    return PT_OK;
}

int pt_model_dir_inspect(pt_model_dir_info *info, const char *dir)
{
    if (!info || !dir)
        return pt_err(PT_EINVAL, "pt_model_dir_inspect: NULL argument");
    if (info->size != sizeof *info)
        return pt_err(PT_EINVAL, "pt_model_dir_inspect: info size %zu, expected %zu", info->size,
                      sizeof *info);
    pt_model_dir_info_init(info);
    if (!pt_is_dir(dir))
        return pt_err(PT_ENOTFOUND, "%s: not a directory", dir);
    int st = pt_model_config_load(&info->config, dir);
    if (st == PT_OK)
        st = pt_model_config_num_params(&info->num_params, &info->config);
    if (st)
        return st;
    info->has_tokenizer = pt_dir_has_file(dir, "tokenizer.json");
    info->has_generation_config = pt_dir_has_file(dir, "generation_config.json");
    weights w;
    if ((st = open_weights(&w, dir)) != PT_OK) {
        /* a directory with a config but no weights is still described */
        if (st != PT_ENOTFOUND)
            return st;
        info->weights_status = st;
        snprintf(info->weights_problem, sizeof info->weights_problem, "%s", pt_last_error());
        pt_clear_error();
        return PT_OK;
    }
    info->sharded = !pt_dir_has_file(dir, "model.safetensors");
    info->num_files = (int)w.nfiles;
    for (size_t i = 0; i < w.n; i++) {
        const pt_st_tensor *t = w.e[i].t;
        const char *name = pt_st_dtype_name(t->dtype);
        int k = 0;
        while (k < info->num_dtypes && strcmp(info->dtypes[k].name, name ? name : "?") != 0)
            k++;
        if (k == info->num_dtypes && k < PT_MODEL_INFO_MAX_DTYPES) {
            snprintf(info->dtypes[k].name, sizeof info->dtypes[k].name, "%s", name ? name : "?");
            info->num_dtypes++;
        }
        if (k < PT_MODEL_INFO_MAX_DTYPES) {
            info->dtypes[k].tensors++;
            info->dtypes[k].bytes += t->nbytes;
        }
        info->num_tensors++;
        info->weight_bytes += t->nbytes;
    }
    info->weights_status = check_weights(&w, &info->config, dir);
    if (info->weights_status != PT_OK) {
        snprintf(info->weights_problem, sizeof info->weights_problem, "%s", pt_last_error());
        pt_clear_error();
    }
    weights_free(&w);
    return PT_OK;
}

int pt_model_load_dir(pt_model **out, const char *dir, const pt_model_load_options *opts)
{
    if (!out || !dir)
        return pt_err(PT_EINVAL, "pt_model_load_dir: NULL argument");
    *out = NULL;
    pt_model_load_options def;
    pt_model_load_options_init(&def);
    if (!opts)
        opts = &def;
    if (opts->size != sizeof *opts)
        return pt_err(PT_EINVAL, "pt_model_load_dir: options size %zu, expected %zu", opts->size,
                      sizeof *opts);
    if (!pt_is_dir(dir))
        return pt_err(PT_ENOTFOUND, "%s: not a directory", dir);
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    int st = pt_model_config_load(&cfg, dir);
    if (st)
        return st;
    weights w;
    if ((st = open_weights(&w, dir)) != PT_OK)
        return st;
    pt_model *m = NULL;
    if ((st = pt_model_create_uninit(&m, &cfg)) != PT_OK) {
        weights_free(&w);
        return pt_err_prefix(st, "%s", dir);
    }
    st = fill_model(m, &w, dir);
    weights_free(&w);
    if (st) {
        pt_model_free(m);
        return st;
    }
    pt_tokenizer *tok = NULL;
    if (opts->load_tokenizer && pt_dir_has_file(dir, "tokenizer.json")) {
        st = pt_modelio_tokenizer_load(&tok, dir);
        if (st == PT_EUNSUPPORTED) {
            /* A tokenizer kind this build cannot run: the weights are still
             * usable (ids in, ids out), so warn instead of failing. */
            pt_log(PT_LOG_WARN, "%s; the model is loaded without a tokenizer", pt_last_error());
            pt_clear_error();
            tok = NULL;
        } else if (st != PT_OK) {
            pt_model_free(m);
            return st;
        }
    }
    char *d = pt_strdup(dir);
    if (!d || (st = set_rec(m, d, tok)) != PT_OK) {
        if (!d && tok)
            pt_modelio_tokenizer_free(tok);
        pt_model_free(m);
        return d ? st : PT_ENOMEM;
    }
    *out = m;
    return PT_OK;
}

/* ---- saving ------------------------------------------------------------------ */

int pt_model_save_options_init(pt_model_save_options *o)
{
    if (!o)
        return pt_err(PT_EINVAL, "pt_model_save_options_init: NULL");
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->copy_tokenizer = true;
    return PT_OK;
}

static const char *const TOKENIZER_FILES[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
    "tokenizer.model", "added_tokens.json", "vocab.json", "merges.txt",
};

static bool same_dir(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

static int copy_file(const char *src_dir, const char *dst_dir, const char *name)
{
    char *src = pt_path_join(src_dir, name), *dst = pt_path_join(dst_dir, name);
    int st = PT_ENOMEM;
    if (src && dst) {
        char *buf = NULL;
        size_t len = 0;
        st = pt_read_file(&buf, &len, src, MAX_COPY_BYTES);
        if (st == PT_OK)
            st = pt_write_file_atomic(dst, buf, len);
        pt_free(buf);
    }
    pt_free(src);
    pt_free(dst);
    return st;
}

/* The eos_token_id list of the source config.json, when its first entry is
 * still the config's eos id (the config struct keeps only the first). */
static char *source_eos_list(const char *src_dir, int eos)
{
    if (!src_dir || eos < 0)
        return NULL;
    char *path = pt_path_join(src_dir, "config.json");
    char *text = NULL;
    size_t len = 0;
    char *res = NULL;
    if (path && pt_read_file(&text, &len, path, MAX_CONFIG_BYTES) == PT_OK) {
        cJSON *root = cJSON_ParseWithLength(text, len);
        const cJSON *e = root ? cJSON_GetObjectItemCaseSensitive(root, "eos_token_id") : NULL;
        if (cJSON_IsArray(e) && e->child && cJSON_IsNumber(e->child) &&
            e->child->valuedouble == (double)eos) {
            sbuf b = { 0 };
            sb_printf(&b, "[");
            for (const cJSON *c = e->child; c; c = c->next) {
                if (!cJSON_IsNumber(c) || c->valuedouble < 0 || c->valuedouble > INT_MAX)
                    b.err = PT_EFORMAT;
                sb_printf(&b, "%s%d", c == e->child ? "" : ", ", (int)c->valuedouble);
            }
            sb_printf(&b, "]");
            if (!b.err)
                res = b.p;
            else
                pt_free(b.p);
        }
        cJSON_Delete(root);
    }
    pt_clear_error();
    pt_free(text);
    pt_free(path);
    return res;
}

int pt_model_save_dir(const pt_model *m, const char *dir, const pt_model_save_options *opts)
{
    if (!m || !dir)
        return pt_err(PT_EINVAL, "pt_model_save_dir: NULL argument");
    pt_model_save_options def;
    pt_model_save_options_init(&def);
    if (!opts)
        opts = &def;
    if (opts->size != sizeof *opts)
        return pt_err(PT_EINVAL, "pt_model_save_dir: options size %zu, expected %zu", opts->size,
                      sizeof *opts);
    pt_model_config cfg;
    int st = pt_model_get_config(&cfg, m);
    if (st == PT_OK)
        st = pt_model_config_validate(&cfg);
    if (st)
        return st;
    /* Copy the source directory's name now: the record may change meanwhile. */
    char *src = NULL;
    {
        const char *s = opts->tokenizer_dir ? opts->tokenizer_dir : pt_model_source_dir(m);
        if (s && !(src = pt_strdup(s)))
            return PT_ENOMEM;
    }
    char *json = NULL, *path = NULL, *eos_list = NULL;
    pt_st_write_tensor *wt = NULL;
    if ((st = pt_mkdir_p(dir)) != PT_OK)
        goto done;
    eos_list = source_eos_list(pt_model_source_dir(m), cfg.eos_token_id);

    /* model.safetensors: the base tensors only */
    size_t nt = pt_model_base_tensor_count(m);
    if (pt_model_tensor_count(m) != nt)
        pt_log(PT_LOG_WARN,
               "%s: the model's LoRA adapters are not part of model.safetensors (merge them "
               "first with pt_model_merge_lora, or save them with pt_lora_save_peft)",
               dir);
    wt = pt_calloc(nt ? nt : 1, sizeof *wt);
    if (!wt) {
        st = PT_ENOMEM;
        goto done;
    }
    for (size_t i = 0; i < nt; i++) {
        const pt_tensor_ref *r = pt_model_tensor(m, i);
        wt[i].name = r->name;
        wt[i].dtype = PT_ST_F32;
        wt[i].ndim = r->ndim;
        wt[i].shape[0] = r->shape[0];
        wt[i].shape[1] = r->ndim == 2 ? r->shape[1] : 0;
        wt[i].data = r->data;
    }
    static const char *const meta[] = { "format", "pt" };
    if (!(path = pt_path_join(dir, "model.safetensors"))) {
        st = PT_ENOMEM;
        goto done;
    }
    if ((st = pt_st_write(path, wt, nt, meta, 1)) != PT_OK)
        goto done;
    pt_free(path);
    path = NULL;

    /* generation_config.json: the source's, else from the config's ids. */
    const char *msrc = pt_model_source_dir(m);
    if (msrc && pt_dir_has_file(msrc, "generation_config.json") && !same_dir(msrc, dir)) {
        if ((st = copy_file(msrc, dir, "generation_config.json")) != PT_OK)
            goto done;
    } else if (!(msrc && same_dir(msrc, dir) && pt_dir_has_file(dir, "generation_config.json"))) {
        sbuf b = { 0 };
        sb_printf(&b, "{\n  \"_from_model_config\": true");
        if (cfg.bos_token_id >= 0)
            sb_printf(&b, ",\n  \"bos_token_id\": %d", cfg.bos_token_id);
        if (cfg.eos_token_id >= 0) {
            sb_printf(&b, ",\n  \"eos_token_id\": ");
            if (eos_list)
                sb_printf(&b, "%s", eos_list);
            else
                sb_printf(&b, "%d", cfg.eos_token_id);
        }
        if (cfg.pad_token_id >= 0)
            sb_printf(&b, ",\n  \"pad_token_id\": %d", cfg.pad_token_id);
        sb_printf(&b, "\n}\n");
        if (b.err) {
            st = b.err;
            goto done;
        }
        json = b.p;
        if (!(path = pt_path_join(dir, "generation_config.json"))) {
            st = PT_ENOMEM;
            goto done;
        }
        if ((st = pt_write_file_atomic(path, json, strlen(json))) != PT_OK)
            goto done;
    }

    /* tokenizer files */
    if (opts->copy_tokenizer && src && !same_dir(src, dir)) {
        for (size_t i = 0; i < sizeof TOKENIZER_FILES / sizeof TOKENIZER_FILES[0]; i++) {
            if (!pt_dir_has_file(src, TOKENIZER_FILES[i]))
                continue;
            if ((st = copy_file(src, dir, TOKENIZER_FILES[i])) != PT_OK)
                goto done;
        }
    }
    /* config.json last: a config next to weights it does not describe would
     * be the worst state an interrupted save could leave. */
    pt_free(path);
    pt_free(json);
    path = json = NULL;
    if ((st = config_to_json(&json, &cfg, eos_list)) != PT_OK)
        goto done;
    if (!(path = pt_path_join(dir, "config.json"))) {
        st = PT_ENOMEM;
        goto done;
    }
    if ((st = pt_write_file_atomic(path, json, strlen(json))) != PT_OK)
        goto done;
    if (pt_dir_has_file(dir, "model.safetensors.index.json"))
        pt_log(PT_LOG_WARN,
               "%s: model.safetensors.index.json and its shards are stale now (model.safetensors "
               "takes precedence when loading); remove them to save space",
               dir);
    st = PT_OK;
done:
    pt_free(wt);
    pt_free(path);
    pt_free(json);
    pt_free(eos_list);
    pt_free(src);
    return st;
}
