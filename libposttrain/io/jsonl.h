/* JSONL data files, row by row.  Internal to libposttrain (used by eval and
 * by the training data loaders).
 *
 * A reader streams a file one line at a time (a line is capped at
 * max_line bytes), skips blank lines, and parses each row with cJSON into an
 * object.  Every error message starts with "<path> line N: ", so a bad row is
 * named precisely.  The row helpers understand the shared row shapes:
 *   {"text": str}
 *   {"input_ids": [int, ...], "loss_mask": [0|1, ...] (optional, same length)}
 * and expose the parsed object for the other shapes (SFT's prompt/completion
 * and messages rows, GRPO's prompt rows). */
#ifndef PT_IO_JSONL_H
#define PT_IO_JSONL_H

#include "core/core.h"
#include "core/utf8.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pt_jsonl pt_jsonl;

/* Default cap on one line (64 MiB). */
#define PT_JSONL_DEFAULT_MAX_LINE ((size_t)64 << 20)

/* Open path for reading (max_line 0: the default).  PT_ENOTFOUND / PT_EIO. */
int pt__jsonl_open(pt_jsonl **out, const char *path, size_t max_line);
/* Read from descriptor fd, which the caller keeps: the reader reads a
 * duplicate of it (closed by pt__jsonl_close), as the bytes come (a pipe's
 * line is returned as soon as it arrives).  Messages name `name` (NULL:
 * "<fd N>").  PT_EINVAL for a descriptor that is not open. */
int pt__jsonl_open_fd(pt_jsonl **out, int fd, const char *name, size_t max_line);
/* Read from a caller's buffer instead (not copied; must outlive the reader);
 * messages name `name`. */
int pt__jsonl_open_memory(pt_jsonl **out, const char *buf, size_t len, const char *name,
                         size_t max_line);
void pt__jsonl_close(pt_jsonl *r);

/* Next row: 1 with *row set (owned by the reader, valid until the next call),
 * 0 at the end of the file, or a negative status (PT_EFORMAT for a line that
 * is not a JSON object, PT_ERANGE for a line over the cap, PT_EIO). */
int pt__jsonl_next(pt_jsonl *r, const cJSON **row);
/* Start again from the first line. */
int pt__jsonl_rewind(pt_jsonl *r);

/* 1-based line number of the current row (0 before the first). */
size_t pt__jsonl_line(const pt_jsonl *r);
/* Byte offset of the current row's line in the file. */
uint64_t pt__jsonl_offset(const pt_jsonl *r);
/* Rows returned so far. */
size_t pt__jsonl_rows(const pt_jsonl *r);
const char *pt__jsonl_name(const pt_jsonl *r);

/* pt__err with "<name> line N: " in front of the formatted message. */
int pt__jsonl_err(const pt_jsonl *r, int status, const char *fmt, ...) PT_PRINTF(3, 4);

/* Row shapes. */
typedef enum pt_jsonl_kind {
    PT_JSONL_OTHER = 0,
    PT_JSONL_TEXT = 1,   /* has "text" */
    PT_JSONL_IDS = 2     /* has "input_ids" */
} pt_jsonl_kind;

/* Which shared shape a row has.  A row with both "text" and "input_ids" is
 * PT_EFORMAT (ambiguous); returns the kind (>= 0) or a negative status. */
int pt__jsonl_row_kind(const pt_jsonl *r, const cJSON *row);

/* A string member: *s points into the row (NUL-terminated; *len bytes),
 * checked to be valid UTF-8.  PT_ENOTFOUND (with message) if absent and
 * required; *s NULL when absent and not required. */
int pt__jsonl_row_string(const char **s, size_t *len, const pt_jsonl *r, const cJSON *row,
                        const char *key, int required);

/* "input_ids" (each in [0, vocab_size)) and the optional "loss_mask" (0/1,
 * same length; *mask is NULL when the row has none).  Arrays are allocated
 * (pt_free); *n may be 0 (then both are NULL). */
int pt__jsonl_row_ids(int32_t **ids, uint8_t **mask, size_t *n, const pt_jsonl *r,
                     const cJSON *row, int32_t vocab_size);

/* An int array member under any key (used for other id lists). */
int pt__jsonl_int_array(int32_t **out, size_t *n, const pt_jsonl *r, const cJSON *row,
                       const char *key, int64_t lo, int64_t hi_exclusive);

#endif
