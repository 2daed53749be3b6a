/* The parts of the tokenizer.json loader (tok_load.c runs them in order).
 * Not installed. */
#ifndef PT_TEXT_TOK_LOAD_H
#define PT_TEXT_TOK_LOAD_H

#include "text/tok_json.h"

/* tok_load_model.c: "model" (a BPE model: options, vocab, unk, merges);
 * *max_id is raised to the largest id seen. */
int tk_parse_model(pt_tokenizer *t, const cJSON *m, int32_t *max_id);

/* tok_load_added.c: "added_tokens"; after the normalizers are loaded, the
 * tries of normalized and raw added tokens. */
int tk_parse_added(pt_tokenizer *t, const cJSON *arr, int32_t *max_id);
int tk_build_tries(pt_tokenizer *t);

/* tok_load_pipeline.c: "normalizer", "pre_tokenizer", "decoder" (one
 * component at JSON path `path`, Sequences recursively). */
int tk_parse_normalizer(pt_tokenizer *t, const cJSON *n, const char *path, int depth, void *arg);
int tk_parse_pretok(pt_tokenizer *t, const cJSON *n, const char *path, int depth, void *arg);
int tk_parse_decoder(pt_tokenizer *t, const cJSON *n, const char *path, int depth, void *arg);

/* tok_load_post.c: "post_processor" (arg: int counting the template
 * processors seen), "truncation" and "padding", and, once the id table is
 * built, the check that every id they name exists. */
int tk_parse_post(pt_tokenizer *t, const cJSON *n, const char *path, int depth, void *arg);
int tk_parse_trunc_pad(pt_tokenizer *t, const cJSON *root);
int tk_check_post_ids(pt_tokenizer *t);

#endif
