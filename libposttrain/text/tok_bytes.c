/* The built-in byte tokenizer is an ordinary tokenizer.json (a byte-level
 * BPE without merges, so id == byte), so it runs through the same code as any
 * other; its ByteLevel decoder turns bytes that are not UTF-8 into U+FFFD per
 * maximal invalid sequence. */
#include "text/tok_internal.h"

#include <string.h>

static const char *const SPECIALS[5] = {"<|bos|>", "<|eos|>", "<|pad|>", "<|im_start|>", "<|im_end|>"};

static const char PIPELINE[] =
    "],\"normalizer\":null,"
    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,"
    "\"use_regex\":false},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|bos|>\","
    "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"<|bos|>\":"
    "{\"id\":\"<|bos|>\",\"ids\":[256],\"tokens\":[\"<|bos|>\"]}}},"
    "\"decoder\":{\"type\":\"ByteLevel\"},"
    "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"byte_fallback\":false,\"fuse_unk\":false,"
    "\"vocab\":{";

static const char CONFIG[] = "{\"bos_token\":\"<|bos|>\",\"eos_token\":\"<|eos|>\",\"pad_token\":\"<|pad|>\","
                             "\"add_bos_token\":true,\"add_eos_token\":false}";

/* The byte tokenizer's tokenizer.json. */
static int bytes_json(pt_strbuf *j)
{
    pt__strbuf_puts(j, "{\"version\":\"1.0\",\"added_tokens\":[");
    for (int i = 0; i < 5; i++)
        pt__strbuf_printf(j,
                         "%s{\"id\":%d,\"content\":\"%s\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                         "\"normalized\":false,\"special\":true}",
                         i ? "," : "", 256 + i, SPECIALS[i]);
    pt__strbuf_puts(j, PIPELINE);
    /* token of byte b: its character in the byte-level alphabet (as GPT-2) */
    for (int b = 0; b < 256; b++) {
        size_t cl;
        const char *c = tk_byte_char((unsigned)b, &cl);
        if (b == '"' || b == '\\')
            pt__strbuf_printf(j, "%s\"\\%c\":%d", b ? "," : "", b, b);
        else
            pt__strbuf_printf(j, "%s\"%.*s\":%d", b ? "," : "", (int)cl, c, b);
    }
    return pt__strbuf_puts(j, "},\"merges\":[]}}");
}

int pt_tokenizer_create_bytes(pt_tokenizer **out)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    pt_strbuf j = PT_STRBUF_INIT;
    int st = bytes_json(&j);
    if (st == 0)
        st = pt_tokenizer_load_memory_config(out, j.p, j.len, CONFIG, strlen(CONFIG));
    pt__strbuf_free(&j);
    return st;
}
