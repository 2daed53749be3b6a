/* JSON helpers, written once for the library.  Internal to libposttrain.
 *
 * Typed getters read one member of a cJSON object.  JSON null counts as
 * absent everywhere (as transformers treats its optional fields); an absent
 * member leaves *out as it was (bool, numbers) or sets it to NULL (string,
 * object, array), and is an error only when `required`.  Each failure is
 * recorded with a message naming the file, the JSON path and the key:
 *
 *     config.json: 'rope_scaling.factor' must be a number, got a string
 *     config.json: required field 'vocab_size' is missing
 *     config.json: 'hidden_size' = 0 is out of range [1, 65536]
 *     tokenizer.json: duplicate key 'model.type'
 *
 * A pt_json_ctx says where the object came from and which status a bad value
 * gets (config.json's PT_ECONFIG, tokenizer.json's PT_EFORMAT).  A key given
 * twice is PT_EFORMAT (JSON parsers disagree on which one wins) unless the
 * context asks for the first one, as cJSON's own lookup does.
 *
 * Writers append JSON text to a pt_strbuf (sticky error: check once at the
 * end): strings quoted and escaped, doubles in their shortest exact form. */
#ifndef PT_IO_JSON_H
#define PT_IO_JSON_H

#include "core/strbuf.h"
#include "posttrain/jsonl.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where an object was read from.  All fields may be zero/NULL; a NULL
 * context means {NULL, NULL, PT_EFORMAT, false}. */
typedef struct pt_json_ctx {
    const char *file;  /* message prefix ("config.json"); NULL or "": none */
    const char *path;  /* JSON path of the object ("rope_scaling", "model");
                        * NULL or "": the document's root */
    int status;        /* wrong type, missing required key, value out of
                        * range; 0 means PT_EFORMAT */
    bool first_wins;   /* a duplicate key: false = PT_EFORMAT, true = the
                        * first one is read */
} pt_json_ctx;

/* "a string", "an array", "null", ... for messages. */
const char *pt__json_type_name(const cJSON *item);

/* Is `key` a member of obj at all (null values included)? */
bool pt__json_has_key(const cJSON *obj, const char *key);

/* The member `key` of obj (case-sensitive) into *out; NULL when absent or
 * null (or when obj is NULL).  PT_EFORMAT for a duplicate key (see above). */
int pt__json_field(const cJSON **out, const cJSON *obj, const pt_json_ctx *c, const char *key);

/* An integer in [lo, hi] (an integral, finite number).  *present (if not
 * NULL) says whether the member was given, also when it is then rejected. */
int pt__json_get_i64(int64_t *out, bool *present, const cJSON *obj, const pt_json_ctx *c,
                    const char *key, bool required, int64_t lo, int64_t hi);
int pt__json_get_int(int *out, bool *present, const cJSON *obj, const pt_json_ctx *c,
                    const char *key, bool required, int lo, int hi);
/* A finite number. */
int pt__json_get_double(double *out, bool *present, const cJSON *obj, const pt_json_ctx *c,
                       const char *key, bool required);
/* true or false. */
int pt__json_get_bool(bool *out, bool *present, const cJSON *obj, const pt_json_ctx *c,
                     const char *key, bool required);
/* A string (pointing into the cJSON tree); NULL when absent. */
int pt__json_get_string(const char **out, const cJSON *obj, const pt_json_ctx *c,
                       const char *key, bool required);
/* An object / an array (the member itself); NULL when absent. */
int pt__json_get_object(const cJSON **out, const cJSON *obj, const pt_json_ctx *c,
                       const char *key, bool required);
int pt__json_get_array(const cJSON **out, const cJSON *obj, const pt_json_ctx *c,
                      const char *key, bool required);

/* ---- writers ---------------------------------------------------------------- */

/* s[0..n) as a JSON string: '"' and '\\' backslash-escaped, every byte below
 * 0x20 (NUL included) as \u00xx (lower-case hex), every other byte as it is
 * (UTF-8 stays UTF-8; the caller checks validity).  This is the form of the
 * safetensors header writer. */
int pt__json_put_string(pt_strbuf *b, const char *s, size_t n);

/* Variants for writers that must match another JSON encoder byte for byte:
 * the flags of the public pt_json_quote (posttrain/jsonl.h). */
int pt__json_put_string_ex(pt_strbuf *b, const char *s, size_t n, unsigned flags);

/* The shortest "%.15g".."%.17g" text that reads back (strtod) as exactly v,
 * with ".0" appended when it has neither '.' nor an exponent, so it reads
 * back as a float in Python too: 0.02, 1e-06, 10000.0, 1.0000000000000002.
 * v must be finite (NaN and infinities are not JSON; they come out as
 * printf spells them). */
int pt__json_put_double(pt_strbuf *b, double v);

/* item as JSON text (free()), numbers written by pt__json_put_double so that
 * every double reads back exactly (cJSON_Print keeps 15 digits whenever
 * they come within an epsilon: 2.0000042890023906 came back as
 * 2.00000428900239); with `formatted` one member or element a line,
 * indented with tabs as cJSON_Print does.  NULL without memory. */
char *pt__json_print(const cJSON *item, bool formatted);

#endif
