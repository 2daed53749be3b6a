/* JSON helpers: typed getters over cJSON and writers over pt_strbuf (see
 * json.h). */
#include "io/json.h"

#include "core/core.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- getters ---------------------------------------------------------------- */

const char *pt__json_type_name(const cJSON *item)
{
    if (cJSON_IsBool(item))
        return "a boolean";
    if (cJSON_IsNull(item))
        return "null";
    if (cJSON_IsNumber(item))
        return "a number";
    if (cJSON_IsString(item))
        return "a string";
    if (cJSON_IsArray(item))
        return "an array";
    if (cJSON_IsObject(item))
        return "an object";
    return "an invalid value";
}

static int ctx_status(const pt_json_ctx *c)
{
    return c && c->status ? c->status : PT_EFORMAT;
}

/* Record "<file>: <lead>'<path>.<key>'<rest>" and return status. */
PT_PRINTF(5, 6)
static int key_err(const pt_json_ctx *c, int status, const char *lead, const char *key,
                   const char *fmt, ...)
{
    char rest[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rest, sizeof rest, fmt, ap);
    va_end(ap);
    const char *file = c && c->file ? c->file : "";
    const char *path = c && c->path ? c->path : "";
    return pt__err(status, "%s%s%s'%s%s%s'%s", file, *file ? ": " : "", lead, path,
                  *path ? "." : "", key, rest);
}

bool pt__json_has_key(const cJSON *obj, const char *key)
{
    if (!obj || !key)
        return false;
    for (const cJSON *m = obj->child; m; m = m->next)
        if (m->string && strcmp(m->string, key) == 0)
            return true;
    return false;
}

int pt__json_field(const cJSON **out, const cJSON *obj, const pt_json_ctx *c, const char *key)
{
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(key);
    *out = NULL;
    if (!obj)
        return PT_OK;
    const cJSON *found = NULL;
    for (const cJSON *m = obj->child; m; m = m->next) {
        if (!m->string || strcmp(m->string, key) != 0)
            continue;
        if (!found)
            found = m;
        else if (!(c && c->first_wins))
            return key_err(c, PT_EFORMAT, "duplicate key ", key, "%s", "");
        else
            break;
    }
    *out = found && !cJSON_IsNull(found) ? found : NULL;
    return PT_OK;
}

/* The start every getter shares: the member (NULL when absent, an error
 * when required), whether it was given, and its JSON type (test, named
 * `want` in the message). */
static int typed_field(const cJSON **it, bool *present, const cJSON *obj, const pt_json_ctx *c,
                       const char *key, bool required, cJSON_bool (*test)(const cJSON *),
                       const char *want)
{
    int st = pt__json_field(it, obj, c, key);
    if (st)
        return st;
    if (present)
        *present = *it != NULL;
    if (!*it)
        return required ? key_err(c, ctx_status(c), "required field ", key, " is missing") : PT_OK;
    if (!test(*it)) {
        const char *got = pt__json_type_name(*it);
        *it = NULL;
        return key_err(c, ctx_status(c), "", key, " must be %s, got %s", want, got);
    }
    return PT_OK;
}

typedef enum { GET_I64, GET_DOUBLE, GET_BOOL } scalar_kind;

/* The scalar getters in one: the member's type, then (numbers) finiteness,
 * integrality and range; *out (int64_t, double or bool) only when valid. */
static int get_scalar(scalar_kind kind, void *out, bool *present, const cJSON *obj,
                      const pt_json_ctx *c, const char *key, bool required, int64_t lo, int64_t hi)
{
    static const char *const want[] = {"an integer", "a number", "true or false"};
    const cJSON *it;
    int st = typed_field(&it, present, obj, c, key, required,
                         kind == GET_BOOL ? cJSON_IsBool : cJSON_IsNumber, want[kind]);
    if (st || !it)
        return st;
    double v = it->valuedouble;
    if (kind == GET_BOOL) {
        *(bool *)out = cJSON_IsTrue(it);
    } else if (kind == GET_DOUBLE) {
        if (!isfinite(v))
            return key_err(c, ctx_status(c), "", key, " must be finite");
        *(double *)out = v;
    } else {
        if (!isfinite(v) || v != floor(v))
            return key_err(c, ctx_status(c), "", key, " must be an integer, got %g", v);
        if (v < (double)lo || v > (double)hi)
            return key_err(c, ctx_status(c), "", key, " = %.0f is out of range [%lld, %lld]", v,
                           (long long)lo, (long long)hi);
        *(int64_t *)out = (int64_t)v;
    }
    return PT_OK;
}

int pt__json_get_i64(int64_t *out, bool *present, const cJSON *obj, const pt_json_ctx *c,
                    const char *key, bool required, int64_t lo, int64_t hi)
{
    PT_CHECK_NULL(out);
    return get_scalar(GET_I64, out, present, obj, c, key, required, lo, hi);
}

int pt__json_get_int(int *out, bool *present, const cJSON *obj, const pt_json_ctx *c,
                    const char *key, bool required, int lo, int hi)
{
    PT_CHECK_NULL(out);
    int64_t v = *out; /* kept when the member is absent */
    int st = get_scalar(GET_I64, &v, present, obj, c, key, required, lo, hi);
    if (st == PT_OK)
        *out = (int)v;
    return st;
}

int pt__json_get_double(double *out, bool *present, const cJSON *obj, const pt_json_ctx *c,
                       const char *key, bool required)
{
    PT_CHECK_NULL(out);
    return get_scalar(GET_DOUBLE, out, present, obj, c, key, required, 0, 0);
}

int pt__json_get_bool(bool *out, bool *present, const cJSON *obj, const pt_json_ctx *c,
                     const char *key, bool required)
{
    PT_CHECK_NULL(out);
    return get_scalar(GET_BOOL, out, present, obj, c, key, required, 0, 0);
}

int pt__json_get_string(const char **out, const cJSON *obj, const pt_json_ctx *c,
                       const char *key, bool required)
{
    PT_CHECK_NULL(out);
    const cJSON *it;
    int st = typed_field(&it, NULL, obj, c, key, required, cJSON_IsString, "a string");
    *out = it ? it->valuestring : NULL;
    return st;
}

int pt__json_get_object(const cJSON **out, const cJSON *obj, const pt_json_ctx *c,
                       const char *key, bool required)
{
    PT_CHECK_NULL(out);
    return typed_field(out, NULL, obj, c, key, required, cJSON_IsObject, "an object");
}

int pt__json_get_array(const cJSON **out, const cJSON *obj, const pt_json_ctx *c,
                      const char *key, bool required)
{
    PT_CHECK_NULL(out);
    return typed_field(out, NULL, obj, c, key, required, cJSON_IsArray, "an array");
}

/* ---- writers ---------------------------------------------------------------- */

/* The short escape of c under flags, or NULL. */
static const char *short_escape(unsigned char c, unsigned flags)
{
    switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    default: break;
    }
    if (!(flags & PT_JSON_SHORT_ESCAPES))
        return NULL;
    switch (c) {
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: return NULL;
    }
}

int pt__json_put_string_ex(pt_strbuf *b, const char *s, size_t n, unsigned flags)
{
    PT_CHECK_NULL(b);
    PT_CHECK_ARG(s || n == 0, s, "is NULL with n = %zu", n);
    static const char hex[] = "0123456789abcdef";
    pt__strbuf_putc(b, '"');
    size_t run = 0; /* bytes copied as they are, flushed in one put */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = short_escape(c, flags);
        bool del = c == 0x7f && (flags & PT_JSON_ESCAPE_DEL);
        if (!esc && c >= 0x20 && !del) {
            run++;
            continue;
        }
        if (run)
            pt__strbuf_put(b, s + i - run, run);
        run = 0;
        if (esc) {
            pt__strbuf_puts(b, esc);
        } else {
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            pt__strbuf_put(b, u, sizeof u);
        }
    }
    if (run)
        pt__strbuf_put(b, s + n - run, run);
    return pt__strbuf_putc(b, '"');
}

int pt__json_put_string(pt_strbuf *b, const char *s, size_t n)
{
    return pt__json_put_string_ex(b, s, n, 0);
}

int pt__json_put_double(pt_strbuf *b, double v)
{
    PT_CHECK_NULL(b);
    char tmp[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v)
            break;
    }
    if (!strpbrk(tmp, ".eEn"))
        strcat(tmp, ".0");
    return pt__strbuf_puts(b, tmp);
}

static int put_indent(pt_strbuf *b, bool formatted, int depth)
{
    int st = PT_OK;
    for (int i = 0; formatted && i < depth && !st; i++)
        st = pt__strbuf_putc(b, '\t');
    return st;
}

static int print_item(pt_strbuf *b, const cJSON *it, bool formatted, int depth);

/* An object's members or an array's elements between open and close. */
static int print_children(pt_strbuf *b, const cJSON *it, bool object, bool formatted, int depth)
{
    int st = pt__strbuf_putc(b, object ? '{' : '[');
    const cJSON *c = it->child;
    if (!st && c && formatted)
        st = pt__strbuf_putc(b, '\n');
    for (; c && !st; c = c->next) {
        st = put_indent(b, formatted, depth + 1);
        if (!st && object) {
            const char *k = c->string ? c->string : "";
            st = pt__json_put_string(b, k, strlen(k));
            if (!st)
                st = pt__strbuf_puts(b, formatted ? ":\t" : ":");
        }
        if (!st)
            st = print_item(b, c, formatted, depth + 1);
        if (!st && c->next)
            st = pt__strbuf_putc(b, ',');
        if (!st && formatted)
            st = pt__strbuf_putc(b, '\n');
    }
    if (!st && it->child)
        st = put_indent(b, formatted, depth);
    return st ? st : pt__strbuf_putc(b, object ? '}' : ']');
}

static int print_item(pt_strbuf *b, const cJSON *it, bool formatted, int depth)
{
    if (cJSON_IsObject(it) || cJSON_IsArray(it))
        return print_children(b, it, cJSON_IsObject(it), formatted, depth);
    if (cJSON_IsString(it))
        return pt__json_put_string(b, it->valuestring, strlen(it->valuestring));
    if (cJSON_IsNumber(it)) {
        double v = it->valuedouble;
        if (!isfinite(v))
            return pt__strbuf_puts(b, "null"); /* as cJSON_Print */
        if (v == (double)(int64_t)v && fabs(v) < 1e15) /* integers as integers */
            return pt__strbuf_printf(b, "%lld", (long long)v);
        return pt__json_put_double(b, v);
    }
    if (cJSON_IsTrue(it))
        return pt__strbuf_puts(b, "true");
    if (cJSON_IsFalse(it))
        return pt__strbuf_puts(b, "false");
    if (cJSON_IsRaw(it) && it->valuestring)
        return pt__strbuf_puts(b, it->valuestring);
    return pt__strbuf_puts(b, "null");
}

char *pt__json_print(const cJSON *item, bool formatted)
{
    pt_strbuf b = { 0 };
    if (!item || print_item(&b, item, formatted, 0)) {
        pt__strbuf_free(&b);
        return NULL;
    }
    return pt__strbuf_detach(&b, NULL);
}
