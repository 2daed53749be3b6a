/* libFuzzer harness for the tokenizer.  The first byte chooses what the rest
 * of the input is:
 *   0: a tokenizer.json document (load it; if it loads, encode and decode a
 *      fixed text and the input itself with it);
 *   1: text for the built-in byte tokenizer;
 *   2: text for a fixed SentencePiece-style tokenizer (Prepend/Replace/NFC,
 *      byte fallback, added tokens with lstrip/rstrip/single_word);
 *   3: text for a fixed byte-level tokenizer (Llama-3 Split regex, ByteLevel,
 *      a few merges, ignore_merges).
 * Every encode is decoded again, in one call and through a decode stream. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "posttrain/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char SPM_HEAD[] =
    "{\"added_tokens\":["
    "{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"normalized\":false},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true,\"normalized\":false},"
    "{\"id\":2,\"content\":\"</s>\",\"special\":false,\"rstrip\":true,\"normalized\":false},"
    "{\"id\":259,\"content\":\"<|a|>\",\"special\":true,\"lstrip\":true,\"normalized\":false},"
    "{\"id\":260,\"content\":\"word\",\"single_word\":true,\"normalized\":true}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},"
    "{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},"
    "\"pre_tokenizer\":null,"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},"
    "{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1]}}},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},"
    "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \","
    "\"start\":1,\"stop\":1}]},"
    "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,\"vocab\":{"
    "\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"\\u2581\":261,\"a\":262,\"b\":263,\"\\u2581a\":264,\"ab\":265,"
    "\"\\u2581ab\":266,\"\\u00e9\":267,\"word\":260";
static const char SPM_TAIL[] = "},\"merges\":[\"\\u2581 a\",\"a b\",\"\\u2581a b\",\"\\u2581 ab\"]}}";

static const char BL_JSON[] =
    "{\"added_tokens\":[{\"id\":300,\"content\":\"<|eot|>\",\"special\":true,\"normalized\":false},"
    "{\"id\":301,\"content\":\"<think>\",\"special\":false,\"normalized\":false}],"
    "\"normalizer\":null,"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
    "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+"
    "[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]},"
    "\"post_processor\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},"
    "\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{";

static pt_tokenizer *g_bytes, *g_spm, *g_bl;

static int init(void)
{
    if (pt_tokenizer_create_bytes(&g_bytes))
        return -1;
    static char buf[65536];
    size_t o = (size_t)snprintf(buf, sizeof buf, "%s", SPM_HEAD);
    for (int b = 0; b < 256; b++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, ",\"<0x%02X>\":%d", b, 3 + b);
    o += (size_t)snprintf(buf + o, sizeof buf - o, "%s", SPM_TAIL);
    if (pt_tokenizer_load_memory(&g_spm, buf, o))
        return -1;
    /* byte-level: the same vocabulary as the built-in byte tokenizer, plus merges */
    o = (size_t)snprintf(buf, sizeof buf, "%s", BL_JSON);
    for (int b = 0; b < 256; b++) {
        const char *tok = pt_tokenizer_id_to_token(g_bytes, b);
        if (b == '"' || b == '\\')
            o += (size_t)snprintf(buf + o, sizeof buf - o, "\"\\%c\":%d,", b, b);
        else
            o += (size_t)snprintf(buf + o, sizeof buf - o, "\"%s\":%d,", tok, b);
    }
    o += (size_t)snprintf(buf + o, sizeof buf - o,
                          "\"he\":256,\"ll\":257,\"hell\":258,\"hello\":259,\"ell\":263,\"\\u0120h\":260,\"ello\":262,\"\\u0120hello\":261},"
                          "\"merges\":[\"h e\",\"l l\",\"he ll\",\"hell o\",\"\\u0120 h\",\"e ll\",\"ell o\",\"\\u0120h ello\"]}}");
    if (pt_tokenizer_load_memory(&g_bl, buf, o))
        return -1;
    return 0;
}

/* Decoded text must be valid UTF-8 (the library's promise). */
static int utf8_ok(const char *p, size_t n)
{
    const unsigned char *s = (const unsigned char *)p;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i], lo = 0x80, hi = 0xBF;
        size_t need;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            lo = c == 0xE0 ? 0xA0 : 0x80;
            hi = c == 0xED ? 0x9F : 0xBF;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            lo = c == 0xF0 ? 0x90 : 0x80;
            hi = c == 0xF4 ? 0x8F : 0xBF;
        } else {
            return 0;
        }
        if (i + need >= n)
            return 0;
        for (size_t k = 1; k <= need; k++) {
            if (s[i + k] < lo || s[i + k] > hi)
                return 0;
            lo = 0x80;
            hi = 0xBF;
        }
        i += need + 1;
    }
    return 1;
}

static void roundtrip(const pt_tokenizer *t, const char *text, size_t len)
{
    for (unsigned flags = 0; flags < 2; flags++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (pt_tokenizer_encode(&ids, &n, t, text, len, flags ? PT_TOK_ADD_SPECIAL : 0))
            continue;
        char *s = NULL;
        size_t sl = 0;
        if (pt_tokenizer_decode(&s, &sl, t, ids, n, flags ? PT_TOK_SKIP_SPECIAL : 0) == 0) {
            if (!utf8_ok(s, sl))
                abort(); /* decoded text is not UTF-8 */
            pt_free(s);
        }
        pt_decode_stream *ds = NULL;
        if (pt_decode_stream_create(&ds, t, flags ? PT_TOK_SKIP_SPECIAL : 0) == 0) {
            const char *p;
            size_t pl;
            for (size_t i = 0; i < n && i < 4096; i++) {
                if (pt_decode_stream_step(&p, &pl, ds, ids[i]))
                    break;
                if (!utf8_ok(p, pl))
                    abort(); /* a stream piece is not UTF-8 (half a character) */
            }
            pt_decode_stream_flush(&p, &pl, ds);
            pt_decode_stream_free(ds);
        }
        pt_free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready = 0;
    if (!ready) {
        if (init() != 0) {
            fprintf(stderr, "fuzz_tokenizer: a fixed tokenizer does not load: %s\n", pt_last_error());
            abort(); /* the fixed tokenizers must load */
        }
        ready = 1;
    }
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    switch (data[0] % 4) {
    case 0: {
        pt_tokenizer *t = NULL;
        if (pt_tokenizer_load_memory(&t, text, len) == 0) {
            static const char fixed[] = "Hello world, it's 2024! <s>caf\xC3\xA9 \xF0\x9F\xA6\x99\n\t x";
            roundtrip(t, fixed, sizeof fixed - 1);
            roundtrip(t, text, len < 4096 ? len : 4096);
            int32_t v = pt_tokenizer_vocab_size(t);
            for (int32_t i = 0; i < v && i < 64; i++)
                (void)pt_tokenizer_id_to_token(t, i);
            pt_tokenizer_free(t);
        }
        break;
    }
    case 1:
        roundtrip(g_bytes, text, len);
        break;
    case 2:
        roundtrip(g_spm, text, len);
        break;
    default:
        roundtrip(g_bl, text, len);
        break;
    }
    return 0;
}
