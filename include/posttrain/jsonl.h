/*
 * libposttrain public API: JSONL data files, row by row.
 *
 * The reader every command of the library uses (SFT and GRPO data, eval),
 * offered to hosts so that they read rows with the same rules: one JSON
 * object per line, blank lines skipped, a UTF-8 byte order mark on the first
 * line allowed; each line is capped at max_line bytes; a NUL byte, trailing
 * data after the object, invalid UTF-8 in a string that is read, a \u0000
 * escape in a string and a duplicate key are refused.  Every error message
 * starts with "<path> line N: ".  A NUL byte or a line that runs on past
 * twice the cap without a newline stops the reader (later calls repeat the
 * error), so a stream such as /dev/zero is never read without bound.
 */
#ifndef POSTTRAIN_JSONL_H
#define POSTTRAIN_JSONL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "posttrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pt_jsonl_reader pt_jsonl_reader;

/* Open path (max_line 0: 64 MiB).  PT_ENOTFOUND, PT_EIO (e.g. a directory). */
PT_API int pt_jsonl_reader_open(pt_jsonl_reader **out, const char *path, size_t max_line);
/* Read from descriptor fd instead (a pipe, stdin, a socket, a file): the
 * reader reads a duplicate of fd and closes that in pt_jsonl_reader_free;
 * the caller keeps fd and closes it itself.  Lines are returned as they
 * arrive, so a pipe fed line by line is answered line by line.  Messages
 * start with "<name> line N: " (name NULL: "<fd N>").  PT_EINVAL for a
 * descriptor that is not open, PT_EIO for a directory. */
PT_API int pt_jsonl_reader_open_fd(pt_jsonl_reader **out, int fd, const char *name, size_t max_line);
/* NULL is fine. */
PT_API void pt_jsonl_reader_free(pt_jsonl_reader *r);

/* The next row: 1 when there is one, 0 at the end of the file, or a negative
 * status: PT_EFORMAT (not a JSON object, trailing data, a NUL byte, \u0000,
 * a duplicate key), PT_ERANGE (a line over the cap; the reader goes on with
 * the next line unless it stopped), PT_EIO. */
PT_API int pt_jsonl_reader_next(pt_jsonl_reader *r);

/* The 1-based line number of the current row (0 before the first, and
 * for NULL). */
PT_API size_t pt_jsonl_reader_line_number(const pt_jsonl_reader *r);
PT_API PT_DEPRECATED("pt_jsonl_reader_line_number")
int pt_jsonl_reader_line(size_t *line, const pt_jsonl_reader *r);

/* The current row's string member `key`: *s points into the reader (valid
 * until the next call; NUL-terminated, *len bytes, len may be NULL), checked
 * to be valid UTF-8.  Absent: PT_ENOTFOUND when required, else PT_OK with *s
 * NULL.  Not a string or not UTF-8: PT_EFORMAT.  Messages name the line. */
PT_API int pt_jsonl_reader_string(const char **s, size_t *len, const pt_jsonl_reader *r,
                                  const char *key, bool required);

/* The current row's member `key` as an array of integers: *ids allocated
 * (release with pt_free; NULL when the array is empty or absent), *n its
 * length.  Every element must be an integer in the int32_t range.  Absent:
 * PT_ENOTFOUND when required, else PT_OK with *ids NULL and *n 0.  Not an
 * array or a non-integer element: PT_EFORMAT; out of range: PT_ERANGE
 * (messages name the line and the index). */
PT_API int pt_jsonl_reader_int_array(int32_t **ids, size_t *n, const pt_jsonl_reader *r,
                                     const char *key, bool required);

/* The current row as compact JSON text (valid until the next call). */
PT_API int pt_jsonl_reader_json(const char **json, pt_jsonl_reader *r);

/* ---- writing --------------------------------------------------------------- */

/* Flags of pt_json_quote. */
enum {
    PT_JSON_SHORT_ESCAPES = 1u << 0, /* \n \r \t \b \f instead of \u000a ... */
    PT_JSON_ESCAPE_DEL = 1u << 1     /* 0x7f as \u007f */
};
/* s[0..n) as a JSON string literal, quotes included: *out allocated (release
 * with pt_free; NUL-terminated, *len bytes, len may be NULL).  '"' and '\\'
 * are backslash-escaped, other bytes below 0x20 (NUL included) written as
 * \u00xx in lower-case hex, every other byte as it is (UTF-8 stays UTF-8;
 * the caller checks validity).  flags 0 is the form of the library's own
 * files; PT_JSON_SHORT_ESCAPES is Python's json.dumps(s, ensure_ascii=False);
 * with PT_JSON_ESCAPE_DEL too, `posttrain tokenize --decode`'s "text".
 * PT_EINVAL for NULL out, s NULL with n > 0, or an unknown flag. */
PT_API int pt_json_quote(char **out, size_t *len, const char *s, size_t n, unsigned flags);

#ifdef __cplusplus
}
#endif

#endif
