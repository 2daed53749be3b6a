/* Public tokenizer API: loading, encode and decode, vocabulary accessors.
 * (The decode stream is tok_stream.c, the built-in byte tokenizer tok_bytes.c.) */
#include "text/tok_internal.h"

#include "io/fileio.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TK_MAX_FILE ((size_t)1 << 30)

static atomic_uint_fast64_t tk_next_uid = 1;

/* ---- loading ---------------------------------------------------------------------- */
static int tk_new(pt_tokenizer **out)
{
    pt_tokenizer *t = pt__calloc(1, sizeof *t);
    if (!t)
        return PT_ENOMEM;
    t->uid = atomic_fetch_add(&tk_next_uid, 1);
    t->unk_id = -1;
    t->add_bos = t->add_eos = -1;
    *out = t;
    return 0;
}

void pt_tokenizer_free(pt_tokenizer *t)
{
    if (!t)
        return;
    tk_destroy(t);
    free(t);
}

/* The work of the load functions, their arguments checked. */
static int load_memory(pt_tokenizer **out, const char *json, size_t len, const char *config_json,
                       size_t config_len)
{
    pt_tokenizer *t;
    int st = tk_new(&t);
    if (st)
        return st;
    st = tk_load_json(t, json, len);
    if (st == 0 && config_json)
        st = tk_load_config(t, config_json, config_len);
    if (st) {
        pt_tokenizer_free(t);
        return st;
    }
    *out = t;
    return 0;
}

int pt_tokenizer_load_memory_config(pt_tokenizer **out, const char *json, size_t len, const char *config_json,
                                    size_t config_len)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(json);
    PT_CHECK_COUNT(len, PT_MAX_TEXT_BYTES, "tokenizer.json");
    PT_CHECK_COUNT(config_len, PT_MAX_TEXT_BYTES, "tokenizer_config.json");
    return load_memory(out, json, len, config_json, config_len);
}

int pt_tokenizer_load_memory(pt_tokenizer **out, const char *json, size_t len)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(json);
    PT_CHECK_COUNT(len, PT_MAX_TEXT_BYTES, "tokenizer.json");
    return load_memory(out, json, len, NULL, 0);
}

/* The tokenizer.json and tokenizer_config.json that `path` (a file or a
 * directory) names. */
static int tokenizer_paths(pt_strbuf *file, pt_strbuf *conf, const char *path, bool is_dir)
{
    if (is_dir) {
        pt__strbuf_printf(file, "%s/tokenizer.json", path);
        return pt__strbuf_printf(conf, "%s/tokenizer_config.json", path);
    }
    pt__strbuf_puts(file, path);
    const char *slash = strrchr(path, '/');
    if (slash)
        return pt__strbuf_printf(conf, "%.*s/tokenizer_config.json", (int)(slash - path), path);
    return pt__strbuf_puts(conf, "tokenizer_config.json");
}

/* Read both files and load them. */
static int load_files(pt_tokenizer **out, const char *file, const char *conf)
{
    char *json = NULL, *cjson = NULL;
    size_t n = 0, cn = 0;
    struct stat sb;
    int st = pt__read_file(&json, &n, file, TK_MAX_FILE);
    if (st) {
        pt__err_prefix(st, "loading tokenizer");
        return st;
    }
    if (stat(conf, &sb) == 0 && S_ISREG(sb.st_mode))
        st = pt__read_file(&cjson, &cn, conf, TK_MAX_FILE);
    if (st == 0) {
        st = load_memory(out, json, n, cjson, cn);
        if (st)
            pt__err_prefix(st, "%s",
                          st == PT_EFORMAT || st == PT_EUNSUPPORTED || st == PT_ERANGE ? file : "tokenizer");
    }
    free(json);
    free(cjson);
    return st;
}

int pt_tokenizer_load(pt_tokenizer **out, const char *path)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(path);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return pt__err(errno == ENOENT ? PT_ENOTFOUND : PT_EIO, "%s: %s", path, strerror(errno));
    pt_strbuf file = PT_STRBUF_INIT, conf = PT_STRBUF_INIT;
    int st = tokenizer_paths(&file, &conf, path, S_ISDIR(sb.st_mode));
    if (st == 0)
        st = file.err ? file.err : load_files(out, file.p, conf.p);
    pt__strbuf_free(&file);
    pt__strbuf_free(&conf);
    return st;
}

/* ---- encode and decode ------------------------------------------------------------ */
int pt_tokenizer_encode(int32_t **ids, size_t *n_ids, const pt_tokenizer *t, const char *text, size_t len,
                        unsigned flags)
{
    PT_CHECK_NULL(ids);
    PT_CHECK_NULL(n_ids);
    *ids = NULL;
    *n_ids = 0;
    PT_CHECK_NULL(t);
    PT_CHECK_COUNT(len, PT_MAX_TEXT_BYTES, "text");
    PT_CHECK_ARG(text || !len, text, "is NULL with len %zu", len);
    tk_ids out = {0};
    int st = tk_encode(&out, t, text ? text : "", len, flags);
    if (st || out.n == 0) {
        free(out.v);
        return st;
    }
    *ids = out.v;
    *n_ids = out.n;
    return 0;
}

int pt_tokenizer_decode(char **text, size_t *len, const pt_tokenizer *t, const int32_t *ids, size_t n,
                        unsigned flags)
{
    PT_CHECK_NULL(text);
    *text = NULL;
    if (len)
        *len = 0;
    PT_CHECK_NULL(t);
    PT_CHECK_COUNT(n, PT_MAX_TOKENS, "id array");
    PT_CHECK_ARG(ids || !n, ids, "is NULL with n %zu", n);
    pt_strbuf b = PT_STRBUF_INIT;
    int st = tk_decode(&b, t, ids, n, flags);
    if (st) {
        pt__strbuf_free(&b);
        return pt__err_in(__func__, st);
    }
    *text = pt__strbuf_detach(&b, len);
    return *text ? 0 : PT_ENOMEM;
}

/* ---- vocabulary --------------------------------------------------------------------- */
PT_GETTER(int32_t, pt_tokenizer_vocab_size, pt_tokenizer, vocab_size, 0)
/* The id of token string s (added tokens first), or -1. */
static int32_t lookup(const pt_tokenizer *t, const char *s)
{
    if (!t || !s)
        return -1;
    size_t n = strlen(s);
    int32_t v = tk_strmap_get(&t->added_map, s, n);
    return v >= 0 ? v : tk_strmap_get(&t->vocab, s, n);
}

int pt_tokenizer_token_to_id(int32_t *id, const pt_tokenizer *t, const char *token)
{
    PT_CHECK_NULL(id);
    PT_CHECK_NULL(t);
    PT_CHECK_NULL(token);
    *id = lookup(t, token);
    if (*id < 0)
        return pt__err(PT_ENOTFOUND, "token \"%.64s\" is not in the vocabulary", token);
    return 0;
}

const char *pt_tokenizer_id_to_token(const pt_tokenizer *t, int32_t id)
{
    if (!t || id < 0 || id >= t->vocab_size)
        return NULL;
    return t->id_str[id];
}

int pt_tokenizer_is_special(const pt_tokenizer *t, int32_t id)
{
    return t && id >= 0 && id < t->vocab_size && (t->id_flags[id] & 2) ? 1 : 0;
}

int pt_tokenizer_is_added(const pt_tokenizer *t, int32_t id)
{
    return t && id >= 0 && id < t->vocab_size && (t->id_flags[id] & 1) ? 1 : 0;
}

/* ---- tokenizer_config.json ------------------------------------------------------------ */
int32_t pt_tokenizer_bos_id(const pt_tokenizer *t)
{
    return lookup(t, t ? t->bos_token : NULL);
}

int32_t pt_tokenizer_eos_id(const pt_tokenizer *t)
{
    return lookup(t, t ? t->eos_token : NULL);
}

int32_t pt_tokenizer_pad_id(const pt_tokenizer *t)
{
    return lookup(t, t ? t->pad_token : NULL);
}

int32_t pt_tokenizer_unk_id(const pt_tokenizer *t)
{
    if (!t)
        return -1;
    int32_t v = lookup(t, t->unk_token);
    return v >= 0 ? v : t->unk_id;
}

PT_GETTER(const char *, pt_tokenizer_bos_token, pt_tokenizer, bos_token, NULL)
PT_GETTER(const char *, pt_tokenizer_eos_token, pt_tokenizer, eos_token, NULL)
PT_GETTER(const char *, pt_tokenizer_pad_token, pt_tokenizer, pad_token, NULL)
PT_GETTER(int, pt_tokenizer_add_bos, pt_tokenizer, add_bos, -1)
PT_GETTER(int, pt_tokenizer_add_eos, pt_tokenizer, add_eos, -1)
const char *pt_tokenizer_chat_template(const pt_tokenizer *t, const char *name)
{
    if (!t)
        return NULL;
    if (!name && t->chat_template)
        return t->chat_template;
    const char *want = name ? name : "default";
    for (size_t i = 0; i < t->n_tmpl; i++)
        if (strcmp(t->tmpl_names[i], want) == 0)
            return t->tmpl_texts[i];
    return NULL;
}
