/* Write the GGUF fuzz seeds (fuzz/corpus/gguf/) with the library's own
 * writer: small files that exercise every metadata type, string arrays
 * with arbitrary bytes, F32/F16/BF16 tensors and a raw quantised one.
 * Usage: build/tests/io/make_gguf_seeds fuzz/corpus/gguf  (the output is
 * committed; rerun after a format change). */
#include "core/core.h"
#include "io/gguf.h"

#include <stdio.h>
#include <string.h>

static int fail(const char *what)
{
    fprintf(stderr, "make_gguf_seeds: %s: %s\n", what, pt_last_error());
    return 1;
}

static int write_to(pt_gguf_writer *w, const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int st = pt__gguf_write(w, path);
    pt__gguf_writer_free(w);
    return st == PT_OK ? 0 : fail(path);
}

static int tiny(const char *dir)
{
    pt_gguf_writer *w;
    static const float v[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    uint64_t ne[1] = {4};
    if (pt__gguf_writer_new(&w) || pt__gguf_set_str(w, "general.architecture", "llama") ||
        pt__gguf_set_u32(w, "llama.block_count", 1) ||
        pt__gguf_add_tensor_f32(w, "output_norm.weight", 1, ne, PT_GGML_F32, v))
        return fail("tiny");
    return write_to(w, dir, "tiny.gguf");
}

static int all_types(const char *dir)
{
    pt_gguf_writer *w;
    static const float v[8] = {1.0f, 0.1f, -65520.0f, 1e-8f, 3.0f, -0.0f, 2.5f, 7.0f};
    static const int16_t i16[2] = {-3, 3};
    static const double f64[1] = {0.25};
    static const uint8_t flags[2] = {0, 1};
    uint64_t ne2[2] = {4, 2}, ne1[1] = {8};
    if (pt__gguf_writer_new(&w) || pt__gguf_set_u8(w, "a.u8", 7) || pt__gguf_set_i32(w, "a.i32", -9) ||
        pt__gguf_set_u64(w, "a.u64", 1ull << 40) || pt__gguf_set_f32(w, "a.f32", 1e-5f) ||
        pt__gguf_set_bool(w, "a.bool", true) || pt__gguf_set_str_n(w, "a.bytes", "\0\xff\n", 3) ||
        pt__gguf_set_arr(w, "a.i16", PT_GGUF_INT16, i16, 2) ||
        pt__gguf_set_arr(w, "a.f64", PT_GGUF_FLOAT64, f64, 1) ||
        pt__gguf_set_arr(w, "a.bools", PT_GGUF_BOOL, flags, 2) ||
        pt__gguf_add_tensor_f32(w, "t.f32", 2, ne2, PT_GGML_F32, v) ||
        pt__gguf_add_tensor_f32(w, "t.f16", 1, ne1, PT_GGML_F16, v) ||
        pt__gguf_add_tensor_f32(w, "t.bf16", 2, ne2, PT_GGML_BF16, v))
        return fail("all_types");
    return write_to(w, dir, "all_types.gguf");
}

static int tokenizer(const char *dir)
{
    pt_gguf_writer *w;
    static const char *const tokens[5] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81the", "<0x0A>"};
    static const char *const merges[2] = {"t h", "th e"};
    static const float scores[5] = {0, 0, 0, -1.5f, -2.0f};
    static const int32_t types[5] = {2, 3, 3, 1, 6};
    if (pt__gguf_writer_new(&w) || pt__gguf_set_str(w, "tokenizer.ggml.model", "llama") ||
        pt__gguf_set_arr_str(w, "tokenizer.ggml.tokens", tokens, NULL, 5) ||
        pt__gguf_set_arr(w, "tokenizer.ggml.scores", PT_GGUF_FLOAT32, scores, 5) ||
        pt__gguf_set_arr(w, "tokenizer.ggml.token_type", PT_GGUF_INT32, types, 5) ||
        pt__gguf_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 2) ||
        pt__gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 1))
        return fail("tokenizer");
    return write_to(w, dir, "tokenizer.gguf");
}

static int quantised(const char *dir)
{
    pt_gguf_writer *w;
    uint8_t q8[34];
    for (int i = 0; i < 34; i++)
        q8[i] = (uint8_t)(i * 7);
    static const float v[2] = {1.0f, 2.0f};
    uint64_t neq[2] = {32, 1}, ne[1] = {2};
    if (pt__gguf_writer_new(&w) || pt__gguf_set_u32(w, "general.alignment", 64) ||
        pt__gguf_add_tensor_raw(w, "blk.0.ffn_up.weight", 2, neq, PT_GGML_Q8_0, q8, sizeof q8) ||
        pt__gguf_add_tensor_f32(w, "blk.0.ffn_norm.weight", 1, ne, PT_GGML_F16, v))
        return fail("quantised");
    return write_to(w, dir, "quantised.gguf");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_gguf_seeds DIR\n");
        return 2;
    }
    return tiny(argv[1]) | all_types(argv[1]) | tokenizer(argv[1]) | quantised(argv[1]);
}
