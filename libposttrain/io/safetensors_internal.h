/* What the files of the safetensors reader share.  Internal to io/:
 *   safetensors_lex.c      the strict lexer over the raw header bytes
 *   safetensors_header.c   header parsing and validation into the tables
 *   safetensors_read.c     opening (mmap or memory), the handle's accessors
 *   safetensors_convert.c  dtypes, scalar conversions, pt__st_read_f32
 *   safetensors_write.c    the durable writer */
#ifndef PT_IO_SAFETENSORS_INTERNAL_H
#define PT_IO_SAFETENSORS_INTERNAL_H

#include "io/safetensors.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the lexer's record of every number token ------------------------------
 * cJSON reads numbers through strtod; the lexer records each number's source
 * text exactly, in document order, so the k-th number node of the cJSON tree
 * is the k-th token here. */
enum st_num_kind { ST_NUM_OK, ST_NUM_NEGATIVE, ST_NUM_NOT_INTEGER, ST_NUM_LEADING_ZERO, ST_NUM_TOO_LARGE };

typedef struct st_num_token {
    uint64_t value;     /* valid when kind == ST_NUM_OK */
    uint32_t pos;       /* byte offset in the header */
    uint8_t kind;       /* enum st_num_kind */
} st_num_token;

typedef struct st_lex_result {
    st_num_token *nums; /* free() */
    size_t n_nums, cap_nums;
} st_lex_result;

/* Enforce strict JSON lexical rules on the header h[0..n) (one object, then
 * only space padding) and record its number tokens into lr.  PT_EFORMAT
 * naming the offset and the rule. */
int pt__st_lex_header(st_lex_result *lr, const uint8_t *h, size_t n);

/* ---- the handle -------------------------------------------------------------- */

struct pt_st_file {
    const uint8_t *base;
    size_t len;
    bool mapped;
    char *path;
    uint64_t header_len;
    uint64_t data_len;
    pt_st_tensor *tensors; /* offset order */
    size_t count;
    size_t *by_name;       /* indices into tensors, sorted by name */
    const char **meta;     /* key, value, key, value ... in header order */
    size_t n_meta;
    char *strings;         /* arena for names and metadata */
};

/* Validate f->base[0..f->len) and fill header_len, data_len, the tensors,
 * the by-name index and the metadata (everything copied out of the JSON). */
int pt__st_parse_header(pt_st_file *f);

#endif
