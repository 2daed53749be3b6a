/* Comparing a GGUF file, read with io/gguf.h, against a digest of the file
 * llama.cpp's converter wrote for the same model
 * (tests/modelio/gguf_golden/CASE.digest.json; the format is described in
 * gguf_golden/gguf_digest.py, which made it). */
#ifndef PT_TEST_GGUF_GOLDEN_CMP_H
#define PT_TEST_GGUF_GOLDEN_CMP_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "io/gguf.h"

/* Called once per difference with a one-line message such as
 * "kv tokenizer.ggml.pre: converter \"qwen2\", ours \"gpt2\"" or
 * "tensor blk.0.attn_q.weight (F32): data differs: ...". */
typedef void (*pt_golden_diff_fn)(void *ctx, const char *msg);

/* Compare g with the digest: the version and alignment, every metadata key
 * (type, element type, count, value or sha256 of its serialised bytes),
 * every tensor (ggml type, ne, sha256 of its data), and the order of both
 * (the first out-of-place key and tensor).  Returns the number of
 * differences. */
int pt_golden_compare(const pt_gguf *g, const cJSON *digest, pt_golden_diff_fn fn, void *ctx);

#endif
