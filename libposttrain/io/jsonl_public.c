/* The public JSONL reader (include/posttrain/jsonl.h) over io/jsonl. */
#include "io/json.h"
#include "io/jsonl.h"
#include "posttrain/jsonl.h"

#include <stdint.h>
#include <stdlib.h>

struct pt_jsonl_reader {
    pt_jsonl *r;
    const cJSON *row;   /* the current row (owned by r) */
    char *json;         /* its compact text, made on request */
};

int pt_jsonl_reader_open(pt_jsonl_reader **out, const char *path, size_t max_line)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(path);
    pt_jsonl_reader *h = pt__calloc(1, sizeof *h);
    if (!h)
        return pt__err(PT_ENOMEM, "pt_jsonl_reader_open: out of memory");
    int st = pt__jsonl_open(&h->r, path, max_line);
    if (st) {
        pt_free(h);
        return st;
    }
    *out = h;
    return PT_OK;
}

int pt_jsonl_reader_open_fd(pt_jsonl_reader **out, int fd, const char *name, size_t max_line)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_ARG(fd >= 0, fd, "must be an open descriptor (got %d)", fd);
    pt_jsonl_reader *h = pt__calloc(1, sizeof *h);
    if (!h)
        return pt__err(PT_ENOMEM, "pt_jsonl_reader_open_fd: out of memory");
    int st = pt__jsonl_open_fd(&h->r, fd, name, max_line);
    if (st) {
        pt_free(h);
        return st;
    }
    *out = h;
    return PT_OK;
}

void pt_jsonl_reader_free(pt_jsonl_reader *h)
{
    if (!h)
        return;
    pt__jsonl_close(h->r);
    free(h->json);
    pt_free(h);
}

int pt_jsonl_reader_next(pt_jsonl_reader *h)
{
    PT_CHECK_NULL(h);
    free(h->json);
    h->json = NULL;
    h->row = NULL;
    return pt__jsonl_next(h->r, &h->row);
}

size_t pt_jsonl_reader_line_number(const pt_jsonl_reader *h)
{
    return h ? pt__jsonl_line(h->r) : 0;
}

PT_DEPRECATED_GETTER(size_t, pt_jsonl_reader_line, line, pt_jsonl_reader, h, pt_jsonl_reader_line_number)

int pt_jsonl_reader_string(const char **s, size_t *len, const pt_jsonl_reader *h, const char *key,
                           bool required)
{
    PT_CHECK_NULL(s);
    *s = NULL;
    PT_CHECK_NULL(h);
    PT_CHECK_NULL(key);
    if (!h->row)
        return pt__err(PT_ESTATE, "pt_jsonl_reader_string: no current row (call pt_jsonl_reader_next "
                      "and check it returned 1)");
    return pt__jsonl_row_string(s, len, h->r, h->row, key, required);
}

int pt_jsonl_reader_json(const char **json, pt_jsonl_reader *h)
{
    PT_CHECK_NULL(json);
    *json = NULL;
    PT_CHECK_NULL(h);
    if (!h->row)
        return pt__err(PT_ESTATE, "pt_jsonl_reader_json: no current row (call pt_jsonl_reader_next "
                      "and check it returned 1)");
    if (!h->json && !(h->json = cJSON_PrintUnformatted(h->row)))
        return pt__err(PT_ENOMEM, "pt_jsonl_reader_json: out of memory");
    *json = h->json;
    return PT_OK;
}

int pt_jsonl_reader_int_array(int32_t **ids, size_t *n, const pt_jsonl_reader *h, const char *key,
                              bool required)
{
    PT_CHECK_NULL(ids);
    *ids = NULL;
    PT_CHECK_NULL(n);
    *n = 0;
    PT_CHECK_NULL(h);
    PT_CHECK_NULL(key);
    if (!h->row)
        return pt__err(PT_ESTATE, "pt_jsonl_reader_int_array: no current row (call "
                      "pt_jsonl_reader_next and check it returned 1)");
    if (!required && !cJSON_GetObjectItemCaseSensitive(h->row, key))
        return PT_OK;
    return pt__jsonl_int_array(ids, n, h->r, h->row, key, INT32_MIN, (int64_t)INT32_MAX + 1);
}

int pt_json_quote(char **out, size_t *len, const char *s, size_t n, unsigned flags)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    if (len)
        *len = 0;
    PT_CHECK_ARG(s || n == 0, s, "is NULL with n = %zu", n);
    PT_CHECK_ARG(!(flags & ~(unsigned)(PT_JSON_SHORT_ESCAPES | PT_JSON_ESCAPE_DEL)), flags,
                 "has unknown bits 0x%x", flags);
    pt_strbuf b = PT_STRBUF_INIT;
    int st = pt__json_put_string_ex(&b, s, n, flags); /* the error recorded, if any */
    *out = pt__strbuf_detach(&b, len);
    return st;
}
