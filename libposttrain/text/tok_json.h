/* Reading tokenizer.json values: io/json.h's typed getters in the context
 * TK_JSON_CTX(path) (failures name the JSON path of the value, PT_EFORMAT),
 * the few value shapes of tokenizer.json on top of them, the common shape of
 * pipeline components, and the small allocation helpers the loaders share.
 * Not installed. */
#ifndef PT_TEXT_TOK_JSON_H
#define PT_TEXT_TOK_JSON_H

#include "text/tok_internal.h"

#include "io/json.h"

#include <cjson/cJSON.h>

/* Room for a JSON path in messages. */
#define TK_PATH_MAX 256

/* The pt_json_ctx of the object at JSON path json_path of tokenizer.json
 * (an lvalue: pass &TK_JSON_CTX(path)).  A duplicate key reads the first one, as
 * cJSON's own lookup does everywhere else in the loader. */
#define TK_JSON_CTX(json_path)                                                                     \
    ((pt_json_ctx){                                                                                \
        .file = "tokenizer.json", .path = (json_path), .status = PT_EFORMAT, .first_wins = true})

/* A string that must be there unless it has a default (dflt non-NULL). */
int tk_json_req_str(const cJSON *obj, const char *key, const char *dflt, const char **out, const char *path);
/* A copy of a string that must be there. */
int tk_json_dup_str(const cJSON *obj, const char *key, char **out, size_t *len, const char *path);
/* A non-negative integer id (below TK_MAX_ID); `what` is its path. */
int tk_json_id(const cJSON *v, int32_t *out, const char *what);
/* Optional integer in [0, TK_JSON_SIZE_MAX] (absent or null keeps *out). */
#define TK_JSON_SIZE_MAX 1000000000
int tk_json_size(const cJSON *obj, const char *key, size_t *out, const char *path);
/* The "type" string of a component, or NULL. */
const char *tk_json_type(const cJSON *obj);
/* A one-character string (Metaspace replacement, Strip content) into buf
 * (at least 5 bytes), with its length and code point (either may be NULL). */
int tk_json_char(const cJSON *obj, const char *key, char *buf, size_t *len, uint32_t *cp, const char *path,
                 const char *dflt);
/* A Replace/Split "pattern": {"String": s} or {"Regex": r}, compiled. */
int tk_json_pattern(const cJSON *obj, tk_regex *re, const char *path);
/* Replace (normalizer and decoder): the "content" it writes and the pattern. */
int tk_json_replace(const cJSON *obj, char **content, size_t *len, tk_regex *re, const char *path);

/* An optional string option naming one of table's values: *out set to
 * it, or unchanged when absent or null; an unknown name is PT_EFORMAT
 * listing the known ones. */
int tk_json_enum(int *out, const cJSON *obj, const char *key, const pt_enum_entry *table, size_t n,
                 const char *path);
#define TK_JSON_ENUM(out, obj, key, table, path) tk_json_enum((out), (obj), (key), (table), PT_ENUM_COUNT(table), (path))

/* The value named s in a table of component or option names, or -1. */
int tk_name_value(const pt_enum_entry *table, size_t n, const char *s);
#define TK_NAME_VALUE(table, s) tk_name_value((table), PT_ENUM_COUNT(table), (s))

/* The part every pipeline component shares: a depth limit, an object with a
 * "type", and "Sequence" components whose members (under seq_key) are parsed
 * by the same function.  Returns a status; *ty is NULL when the component
 * was a Sequence and has been handled. */
typedef int (*tk_component_fn)(pt_tokenizer *t, const cJSON *n, const char *path, int depth, void *arg);
int tk_component_begin(const char **ty, pt_tokenizer *t, const cJSON *n, const char *path, int depth,
                       const char *what, const char *seq_key, tk_component_fn fn, void *arg);

/* A NUL-terminated copy of s[0..n), or NULL (PT_ENOMEM recorded). */
char *tk_strndup(const char *s, size_t n);
/* Append a zeroed item to the array *arr_ptr of *n items of `size` bytes and
 * point *slot_ptr at it; PT_ENOMEM leaves the array as it was.  Use through
 * TK_APPEND(array, count, &item). */
int tk_append_zeroed(void *arr_ptr, size_t *n, size_t size, void *slot_ptr);
#define TK_APPEND(arr, n, slot) tk_append_zeroed(&(arr), &(n), sizeof *(arr), (slot))

#endif
