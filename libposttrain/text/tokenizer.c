/* Public tokenizer API: loading, encode/decode, vocabulary accessors, the
 * incremental decode stream and the built-in byte tokenizer. */
#include "text/tok_internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TK_MAX_FILE ((size_t)1 << 30)

static atomic_uint_fast64_t tk_next_uid = 1;

static int tk_new(pt_tokenizer **out)
{
    pt_tokenizer *t = pt_calloc(1, sizeof *t);
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

int pt_tokenizer_load_memory_config(pt_tokenizer **out, const char *json, size_t len, const char *config_json,
                                    size_t config_len)
{
    if (!out)
        return pt_err(PT_EINVAL, "pt_tokenizer_load_memory: out is NULL");
    *out = NULL;
    if (!json)
        return pt_err(PT_EINVAL, "pt_tokenizer_load_memory: json is NULL");
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

int pt_tokenizer_load_memory(pt_tokenizer **out, const char *json, size_t len)
{
    return pt_tokenizer_load_memory_config(out, json, len, NULL, 0);
}

int pt_tokenizer_load(pt_tokenizer **out, const char *path)
{
    if (!out)
        return pt_err(PT_EINVAL, "pt_tokenizer_load: out is NULL");
    *out = NULL;
    if (!path)
        return pt_err(PT_EINVAL, "pt_tokenizer_load: path is NULL");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return pt_err(errno == ENOENT ? PT_ENOTFOUND : PT_EIO, "%s: %s", path, strerror(errno));
    size_t plen = strlen(path);
    char *file = pt_malloc(plen + 32), *conf = pt_malloc(plen + 32);
    if (!file || !conf) {
        free(file);
        free(conf);
        return PT_ENOMEM;
    }
    if (S_ISDIR(sb.st_mode)) {
        snprintf(file, plen + 32, "%s/tokenizer.json", path);
        snprintf(conf, plen + 32, "%s/tokenizer_config.json", path);
    } else {
        memcpy(file, path, plen + 1);
        const char *slash = strrchr(path, '/');
        if (slash)
            snprintf(conf, plen + 32, "%.*s/tokenizer_config.json", (int)(slash - path), path);
        else
            snprintf(conf, plen + 32, "tokenizer_config.json");
    }
    char *json = NULL, *cjson = NULL;
    size_t n = 0, cn = 0;
    int st = pt_read_file(&json, &n, file, TK_MAX_FILE);
    if (st) {
        pt_err_prefix(st, "loading tokenizer");
        goto done;
    }
    if (stat(conf, &sb) == 0 && S_ISREG(sb.st_mode)) {
        st = pt_read_file(&cjson, &cn, conf, TK_MAX_FILE);
        if (st)
            goto done;
    }
    st = pt_tokenizer_load_memory_config(out, json, n, cjson, cn);
    if (st)
        pt_err_prefix(st, "%s", st == PT_EFORMAT || st == PT_EUNSUPPORTED || st == PT_ERANGE ? file : "tokenizer");
done:
    free(json);
    free(cjson);
    free(file);
    free(conf);
    return st;
}

/* The built-in byte tokenizer is an ordinary tokenizer.json (a byte-level
 * BPE without merges, so id == byte), so it runs through the same code as any
 * other; its ByteLevel decoder turns bytes that are not UTF-8 into U+FFFD per
 * maximal invalid sequence. */
int pt_tokenizer_create_bytes(pt_tokenizer **out)
{
    if (!out)
        return pt_err(PT_EINVAL, "pt_tokenizer_create_bytes: out is NULL");
    *out = NULL;
    static const char *const specials[5] = {"<|bos|>", "<|eos|>", "<|pad|>", "<|im_start|>", "<|im_end|>"};
    tk_buf j = {0};
    char tmp[256];
    int st = 0;
#define PUT(s) do { if (st == 0) st = tk_buf_put(&j, (s), strlen(s)); } while (0)
    PUT("{\"version\":\"1.0\",\"added_tokens\":[");
    for (int i = 0; i < 5; i++) {
        snprintf(tmp, sizeof tmp,
                 "%s{\"id\":%d,\"content\":\"%s\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                 "\"normalized\":false,\"special\":true}",
                 i ? "," : "", 256 + i, specials[i]);
        PUT(tmp);
    }
    PUT("],\"normalizer\":null,"
        "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,"
        "\"use_regex\":false},"
        "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|bos|>\","
        "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"<|bos|>\":"
        "{\"id\":\"<|bos|>\",\"ids\":[256],\"tokens\":[\"<|bos|>\"]}}},"
        "\"decoder\":{\"type\":\"ByteLevel\"},"
        "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"byte_fallback\":false,\"fuse_unk\":false,"
        "\"vocab\":{");
    /* token of byte b: its character in the byte-level alphabet (as GPT-2) */
    for (int b = 0; b < 256; b++) {
        size_t cl;
        const char *c = tk_byte_char((unsigned)b, &cl);
        if (b == '"' || b == '\\')
            snprintf(tmp, sizeof tmp, "%s\"\\%c\":%d", b ? "," : "", b, b);
        else
            snprintf(tmp, sizeof tmp, "%s\"%.*s\":%d", b ? "," : "", (int)cl, c, b);
        PUT(tmp);
    }
    PUT("},\"merges\":[]}}");
#undef PUT
    const char *config = "{\"bos_token\":\"<|bos|>\",\"eos_token\":\"<|eos|>\",\"pad_token\":\"<|pad|>\","
                         "\"add_bos_token\":true,\"add_eos_token\":false}";
    if (st == 0)
        st = pt_tokenizer_load_memory_config(out, j.p, j.n, config, strlen(config));
    tk_buf_free(&j);
    return st;
}

int pt_tokenizer_encode(int32_t **ids, size_t *n_ids, const pt_tokenizer *t, const char *text, size_t len,
                        unsigned flags)
{
    if (!ids || !n_ids)
        return pt_err(PT_EINVAL, "pt_tokenizer_encode: ids or n_ids is NULL");
    *ids = NULL;
    *n_ids = 0;
    if (!t || (!text && len))
        return pt_err(PT_EINVAL, "pt_tokenizer_encode: tokenizer or text is NULL");
    tk_ids out = {0};
    int st = tk_encode(&out, t, text ? text : "", len, flags);
    if (st) {
        free(out.v);
        return st;
    }
    if (out.n == 0) {
        free(out.v);
        return 0;
    }
    *ids = out.v;
    *n_ids = out.n;
    return 0;
}

int pt_tokenizer_decode(char **text, size_t *len, const pt_tokenizer *t, const int32_t *ids, size_t n,
                        unsigned flags)
{
    if (!text)
        return pt_err(PT_EINVAL, "pt_tokenizer_decode: text is NULL");
    *text = NULL;
    if (len)
        *len = 0;
    if (!t || (!ids && n))
        return pt_err(PT_EINVAL, "pt_tokenizer_decode: tokenizer or ids is NULL");
    tk_buf b = {0};
    int st = tk_decode(&b, t, ids, n, flags);
    if (st == 0)
        st = tk_buf_putc(&b, '\0');
    if (st) {
        tk_buf_free(&b);
        return st;
    }
    *text = b.p;
    if (len)
        *len = b.n - 1;
    return 0;
}

int32_t pt_tokenizer_vocab_size(const pt_tokenizer *t)
{
    return t ? t->vocab_size : 0;
}

int pt_tokenizer_token_to_id(int32_t *id, const pt_tokenizer *t, const char *token)
{
    if (!id || !t || !token)
        return pt_err(PT_EINVAL, "pt_tokenizer_token_to_id: NULL argument");
    size_t n = strlen(token);
    int32_t v = tk_strmap_get(&t->added_map, token, n);
    if (v < 0)
        v = tk_strmap_get(&t->vocab, token, n);
    if (v < 0) {
        *id = -1;
        return pt_err(PT_ENOTFOUND, "token \"%.64s\" is not in the vocabulary", token);
    }
    *id = v;
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

static int32_t lookup(const pt_tokenizer *t, const char *s)
{
    if (!t || !s)
        return -1;
    size_t n = strlen(s);
    int32_t v = tk_strmap_get(&t->added_map, s, n);
    return v >= 0 ? v : tk_strmap_get(&t->vocab, s, n);
}

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

const char *pt_tokenizer_bos_token(const pt_tokenizer *t)
{
    return t ? t->bos_token : NULL;
}

const char *pt_tokenizer_eos_token(const pt_tokenizer *t)
{
    return t ? t->eos_token : NULL;
}

const char *pt_tokenizer_pad_token(const pt_tokenizer *t)
{
    return t ? t->pad_token : NULL;
}

int pt_tokenizer_add_bos(const pt_tokenizer *t)
{
    return t ? t->add_bos : -1;
}

int pt_tokenizer_add_eos(const pt_tokenizer *t)
{
    return t ? t->add_eos : -1;
}

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

/* ---- incremental decoding ------------------------------------------------------------ */
struct pt_decode_stream {
    const pt_tokenizer *t;
    unsigned flags;
    tk_ids ids;          /* window of ids still needed as context */
    size_t prefix_index; /* ids[0..prefix_index) decode to `prefix` */
    tk_buf prefix, cur, out;
};

int pt_decode_stream_new(pt_decode_stream **out, const pt_tokenizer *t, unsigned flags)
{
    if (!out)
        return pt_err(PT_EINVAL, "pt_decode_stream_new: out is NULL");
    *out = NULL;
    if (!t)
        return pt_err(PT_EINVAL, "pt_decode_stream_new: tokenizer is NULL");
    pt_decode_stream *s = pt_calloc(1, sizeof *s);
    if (!s)
        return PT_ENOMEM;
    s->t = t;
    s->flags = flags;
    *out = s;
    return 0;
}

void pt_decode_stream_free(pt_decode_stream *s)
{
    if (!s)
        return;
    free(s->ids.v);
    tk_buf_free(&s->prefix);
    tk_buf_free(&s->cur);
    tk_buf_free(&s->out);
    free(s);
}

static bool ends_incomplete(const tk_buf *b)
{
    return b->n >= 3 && memcmp(b->p + b->n - 3, "\xEF\xBF\xBD", 3) == 0;
}

int pt_decode_stream_step(const char **text, size_t *len, pt_decode_stream *s, int32_t id)
{
    if (!text || !len || !s)
        return pt_err(PT_EINVAL, "pt_decode_stream_step: NULL argument");
    *text = "";
    *len = 0;
    const pt_tokenizer *t = s->t;
    if (id < 0 || id >= t->vocab_size)
        return pt_err(PT_ERANGE, "pt_decode_stream_step: id %d is outside the vocabulary (size %d)", (int)id,
                      (int)t->vocab_size);
    int st;
    if (s->prefix.n == 0 && s->ids.n > 0) {
        s->cur.n = 0;
        if ((st = tk_decode(&s->cur, t, s->ids.v, s->ids.n, s->flags)))
            return st;
        if (!ends_incomplete(&s->cur)) {
            s->prefix.n = 0;
            if ((st = tk_buf_put(&s->prefix, s->cur.p, s->cur.n)))
                return st;
            s->prefix_index = s->ids.n;
        }
    }
    if ((st = tk_ids_push(&s->ids, id)))
        return st;
    s->cur.n = 0;
    if ((st = tk_decode(&s->cur, t, s->ids.v, s->ids.n, s->flags)))
        return st;
    if (s->cur.n > s->prefix.n && !ends_incomplete(&s->cur)) {
        if (memcmp(s->cur.p, s->prefix.p ? s->prefix.p : "", s->prefix.n) != 0)
            return pt_err(PT_ESTATE, "pt_decode_stream_step: the decoded text no longer extends what was emitted");
        s->out.n = 0;
        if ((st = tk_buf_put(&s->out, s->cur.p + s->prefix.n, s->cur.n - s->prefix.n)) ||
            (st = tk_buf_putc(&s->out, '\0')))
            return st;
        size_t new_prefix_index = s->ids.n - s->prefix_index;
        memmove(s->ids.v, s->ids.v + s->prefix_index, new_prefix_index * sizeof *s->ids.v);
        s->ids.n = new_prefix_index;
        s->prefix.n = 0;
        if ((st = tk_decode(&s->prefix, t, s->ids.v, s->ids.n, s->flags)))
            return st;
        s->prefix_index = new_prefix_index;
        *text = s->out.p;
        *len = s->out.n - 1;
    }
    return 0;
}

int pt_decode_stream_flush(const char **text, size_t *len, pt_decode_stream *s)
{
    if (!text || !len || !s)
        return pt_err(PT_EINVAL, "pt_decode_stream_flush: NULL argument");
    *text = "";
    *len = 0;
    int st;
    s->cur.n = 0;
    if ((st = tk_decode(&s->cur, s->t, s->ids.v, s->ids.n, s->flags)))
        return st;
    s->out.n = 0;
    if (s->cur.n > s->prefix.n && (st = tk_buf_put(&s->out, s->cur.p + s->prefix.n, s->cur.n - s->prefix.n)))
        return st;
    if ((st = tk_buf_putc(&s->out, '\0')))
        return st;
    *text = s->out.p;
    *len = s->out.n - 1;
    s->ids.n = 0;
    s->prefix.n = 0;
    s->prefix_index = 0;
    return 0;
}
