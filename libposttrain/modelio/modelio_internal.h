/* Internal pieces of the modelio layer, shared by its files: the weight
 * files of a directory, their check against the model schema, the
 * per-model record, and config.json helpers. */
#ifndef PT_MODELIO_INTERNAL_H
#define PT_MODELIO_INTERNAL_H

#include "io/safetensors.h"
#include "posttrain/model.h"
#include "posttrain/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "posttrain/modelio.h"

#define PT_MODELIO_MAX_CONFIG_BYTES ((size_t)16 << 20)

/* ---- the weight files of a directory (weights.c) ------------------------------ */

typedef struct pt_weight_entry {
    const char *name;
    const pt_st_tensor *t;
    int shard;                  /* index into file_names */
} pt_weight_entry;

/* model.safetensors, or the shards of model.safetensors.index.json, with
 * every tensor of them sorted by name (a name in two shards is an error). */
typedef struct pt_weight_files {
    pt_st_file **files;
    char **file_names;
    size_t nfiles;
    pt_weight_entry *e;
    size_t n;
    bool sharded;               /* from the index */
} pt_weight_files;

/* PT_ENOTFOUND when dir has neither file. */
int pt__weight_files_open(pt_weight_files *w, const char *dir);
void pt__weight_files_close(pt_weight_files *w);
/* The entry called name, or NULL. */
const pt_weight_entry *pt__weight_files_find(const pt_weight_files *w, const char *name);

/* ---- the weights against the schema (weights_check.c) -------------------------- */

/* The first problem pt_model_load_dir would find with weights w for config
 * c, from the headers alone (missing, mis-shaped, undecodable, unexpected
 * tensor), as a status with the message set.  A tied config's left-over
 * "lm_head.weight" of the embedding's shape is accepted and returned in
 * *tied_head (may be NULL): whether it equals the embedding is only known
 * after reading it. */
int pt__weights_check(const pt_weight_files *w, const pt_model_config *c, const char *dir,
                     const pt_weight_entry **tied_head);

/* ---- the per-model record (record.c) --------------------------------------------- */

/* Keep dir and tok with model m (taking ownership of both, freed on failure
 * too); pt_model_source_dir and pt_model_tokenizer read them back. */
/* Count one tensor of `nbytes` bytes of type `dtype` (NULL: "?") in a
 * pt_model_dir_info: its per-dtype table, tensor count and weight bytes
 * (inspect.c; shared by the safetensors and GGUF inspectors). */
void pt__model_info_add_tensor(pt_model_dir_info *info, const char *dtype, uint64_t nbytes);

int pt__modelio_set_record(pt_model *m, char *dir, pt_tokenizer *tok);
/* PT_ENONFINITE naming fn, path, the first of the model's tensors [from, to)
 * that holds a NaN or an infinity and its element, then `not_done` ("a
 * non-finite model is not saved"); else PT_OK (record.c). */
int pt__modelio_check_finite(const pt_model *m, size_t from, size_t to, const char *fn, const char *path,
                            const char *not_done);
/* Keep the tokenizer.json / tokenizer_config.json texts generated for a
 * model loaded from a GGUF file (taking ownership; either may be NULL), so
 * that pt_model_save_dir writes them; read back with the getters (NULL
 * when there are none). */
int pt__modelio_set_tokenizer_texts(pt_model *m, char *tok_json, char *tok_config);
const char *pt__modelio_tokenizer_json(const pt_model *m);
const char *pt__modelio_tokenizer_config(const pt_model *m);

/* ---- a tokenizer against a model (eval.c) -------------------------------------- */

/* PT_ESHAPE (the message starting with `what`) unless tok belongs to a
 * model of vocab_size model_vocab: every id it can produce is below
 * model_vocab, and model_vocab exceeds its id range by no more than
 * embedding padding (the next multiple of 128, or 1%, whichever is more). */
int pt__modelio_check_tokenizer(const pt_tokenizer *tok, int32_t model_vocab, const char *what);
/* DIR/tokenizer.json as pt_model_load_dir loads it: *out NULL and PT_OK when
 * there is none; an entry that is not a regular file (a directory, a FIFO, a
 * dangling link), a malformed file or one of another model (the check above)
 * is the error; PT_EUNSUPPORTED is a kind this build cannot run (the load
 * goes on without it).  Messages name the file (model_load.c). */
int pt__modelio_dir_tokenizer(pt_tokenizer **out, const char *dir, int32_t model_vocab);

/* ---- config.json (config_json.c) ------------------------------------------------ */

/* The config.json text of c; eos_list: the JSON text of an eos_token_id
 * list to write instead of the single id (NULL: the id). */
int pt__modelio_config_json(char **out, const pt_model_config *c, const char *eos_list);
/* The eos_token_id list of src_dir's config.json as JSON text, when it is a
 * list whose first entry is eos (the config struct keeps only the first);
 * NULL otherwise (no error is left set). */
char *pt__modelio_source_eos_list(const char *src_dir, int eos);

/* A report of a model directory (pt_model_dir_info_to_json, _to_text;
 * func: its name in the messages): info and est read as their _init sizes
 * say, their strings terminated, then put writes it into the buffer; *out
 * (not NULL; pt_free) and *len (may be NULL). */
struct pt_strbuf;
typedef void (*pt_dir_info_put)(struct pt_strbuf *b, const char *dir, const pt_model_dir_info *info,
                                const pt_memory_estimate *est);
int pt__dir_info_report(char **out, size_t *len, const char *dir, const pt_model_dir_info *info,
                        const pt_memory_estimate *est, pt_dir_info_put put, const char *func);

#endif
