/* JSONL data files, row by row (see jsonl.h). */
#include "io/jsonl.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define READ_CHUNK ((size_t)1 << 16)

struct pt_jsonl {
    char *name;
    int fd;                  /* the descriptor read, owned; -1 when reading memory */
    const char *mem;
    size_t mem_len;
    size_t max_line;
    /* read buffer (file mode) */
    char *rbuf;
    size_t rpos, rlen;
    bool eof;
    uint64_t pos;            /* bytes consumed so far */
    /* current line */
    char *line;
    size_t line_len, line_cap;
    size_t line_no;
    uint64_t line_offset;
    size_t rows;
    cJSON *row;
    int stopped;             /* a status that ended the stream (NUL byte, endless line) */
};

int pt__jsonl_err(const pt_jsonl *r, int status, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pt__err(status, "%s line %zu: %s", r->name, r->line_no, msg);
}

static int jsonl_new(pt_jsonl **out, const char *name, size_t max_line)
{
    pt_jsonl *r = pt__calloc(1, sizeof *r);
    if (!r)
        return PT_ENOMEM;
    r->name = pt__strdup(name);
    if (!r->name) {
        pt_free(r);
        return PT_ENOMEM;
    }
    r->fd = -1;
    r->max_line = max_line ? max_line : PT_JSONL_DEFAULT_MAX_LINE;
    *out = r;
    return PT_OK;
}

/* A reader over fd, which it owns from here on (closed on every failure). */
static int open_stream(pt_jsonl **out, int fd, const char *name, size_t max_line)
{
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        close(fd);
        return pt__err(PT_EIO, "%s: is a directory, not a JSONL file", name);
    }
    pt_jsonl *r;
    int st = jsonl_new(&r, name, max_line);
    if (st) {
        close(fd);
        return st;
    }
    r->fd = fd;
    r->rbuf = pt__malloc(READ_CHUNK);
    if (!r->rbuf) {
        pt__jsonl_close(r);
        return PT_ENOMEM;
    }
    *out = r;
    return PT_OK;
}

int pt__jsonl_open(pt_jsonl **out, const char *path, size_t max_line)
{
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(path);
    *out = NULL;
    /* O_NONBLOCK for the open only: a FIFO without a writer must not hang
     * it (it then reads as empty); a stream that has a writer (a pipe, a
     * shell's <(...)) is read as it comes, so blocking is restored */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    int flags = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return pt__err(e == ENOENT ? PT_ENOTFOUND : PT_EIO, "%s: cannot open: %s", path,
                      strerror(e));
    }
    return open_stream(out, fd, path, max_line);
}

int pt__jsonl_open_fd(pt_jsonl **out, int fd, const char *name, size_t max_line)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_ARG(fd >= 0, fd, "must be an open descriptor (got %d)", fd);
    char fallback[32];
    if (!name) {
        snprintf(fallback, sizeof fallback, "<fd %d>", fd);
        name = fallback;
    }
    /* a descriptor of our own: the caller keeps (and closes) theirs */
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) {
        int e = errno;
        return pt__err(e == EBADF ? PT_EINVAL : PT_EIO, "%s: cannot read descriptor %d: %s", name,
                      fd, strerror(e));
    }
    return open_stream(out, own, name, max_line);
}

int pt__jsonl_open_memory(pt_jsonl **out, const char *buf, size_t len, const char *name,
                         size_t max_line)
{
    PT_CHECK_NULL(out);
    PT_CHECK_ARG(buf || len == 0, buf, "is NULL with len = %zu", len);
    *out = NULL;
    pt_jsonl *r;
    int st = jsonl_new(&r, name ? name : "<memory>", max_line);
    if (st)
        return st;
    r->mem = buf;
    r->mem_len = len;
    *out = r;
    return PT_OK;
}

void pt__jsonl_close(pt_jsonl *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    cJSON_Delete(r->row);
    pt_free(r->rbuf);
    pt_free(r->line);
    pt_free(r->name);
    pt_free(r);
}

int pt__jsonl_rewind(pt_jsonl *r)
{
    PT_CHECK_NULL(r);
    if (r->fd >= 0 && lseek(r->fd, 0, SEEK_SET) != 0)
        return pt__err(PT_EIO, "%s: cannot seek: %s", r->name, strerror(errno));
    r->rpos = r->rlen = 0;
    r->eof = false;
    r->pos = 0;
    r->line_no = 0;
    r->line_offset = 0;
    r->rows = 0;
    r->stopped = 0;
    cJSON_Delete(r->row);
    r->row = NULL;
    return PT_OK;
}

PT_GETTER(size_t, pt__jsonl_line, pt_jsonl, line_no, 0)
PT_GETTER(uint64_t, pt__jsonl_offset, pt_jsonl, line_offset, 0)
PT_GETTER(size_t, pt__jsonl_rows, pt_jsonl, rows, 0)
PT_GETTER(const char *, pt__jsonl_name, pt_jsonl, name, "")
static int line_append(pt_jsonl *r, const char *p, size_t n)
{
    size_t need = r->line_len + n; /* <= max_line + READ_CHUNK: checked by the caller */
    if (need + 1 > r->line_cap) {
        size_t cap = r->line_cap ? r->line_cap : 4096;
        while (cap < need + 1)
            cap *= 2;
        char *nl = pt__realloc_array(r->line, cap, 1);
        if (!nl)
            return PT_ENOMEM;
        r->line = nl;
        r->line_cap = cap;
    }
    memcpy(r->line + r->line_len, p, n);
    r->line_len = need;
    r->line[need] = '\0';
    return PT_OK;
}

/* The next bytes of the descriptor into r->rbuf: what is there (a pipe's
 * line comes as soon as it is written), 0 at the end, -1 with errno.  A
 * caller's non-blocking descriptor is waited on, not reported as an error. */
static ssize_t read_some(pt_jsonl *r)
{
    for (;;) {
        ssize_t n = read(r->fd, r->rbuf, READ_CHUNK);
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            struct pollfd p = { .fd = r->fd, .events = POLLIN };
            if (poll(&p, 1, -1) >= 0 || errno == EINTR)
                continue;
        }
        return -1;
    }
}

/* Read the next raw line into r->line (without its '\n').  1: a line, 0: the
 * end.  A line over the cap is consumed whole and reported as PT_ERANGE, so
 * the caller may go on with the next one. */
static int read_line(pt_jsonl *r)
{
    r->line_len = 0;
    if (r->line)
        r->line[0] = '\0';
    r->line_offset = r->pos;
    bool any = false, too_long = false, nul = false;
    /* Bytes skipped after the cap: a line over the cap is skipped to its
     * newline, but only for up to another max_line bytes, so a stream without
     * newlines is never read to its (possibly absent) end. */
    size_t skipped = 0;
    for (;;) {
        const char *buf;
        size_t avail;
        if (r->fd >= 0) {
            if (r->rpos == r->rlen) {
                if (r->eof)
                    break;
                ssize_t got = read_some(r);
                if (got < 0)
                    return pt__err(PT_EIO, "%s: read error after line %zu: %s", r->name,
                                  r->line_no, strerror(errno));
                r->rpos = 0;
                r->rlen = (size_t)got;
                if (got == 0) {
                    r->eof = true;
                    break;
                }
            }
            buf = r->rbuf + r->rpos;
            avail = r->rlen - r->rpos;
        } else {
            if (r->pos >= r->mem_len)
                break;
            buf = r->mem + r->pos;
            avail = r->mem_len - (size_t)r->pos;
        }
        any = true;
        const char *nl = memchr(buf, '\n', avail);
        size_t take = nl ? (size_t)(nl - buf) : avail;
        /* A NUL byte: the data is not text (e.g. /dev/zero); stop here. */
        if (memchr(buf, '\0', take)) {
            nul = true;
            break;
        }
        if (!too_long && take > r->max_line - r->line_len)
            too_long = true;
        if (!too_long) {
            int st = line_append(r, buf, take);
            if (st != PT_OK)
                return st;
        } else {
            skipped += take;
        }
        size_t consumed = take + (nl ? 1 : 0);
        r->pos += consumed;
        if (r->fd >= 0)
            r->rpos += consumed;
        if (nl)
            break;
        if (too_long && skipped > r->max_line) {
            r->line_no++;
            r->stopped = PT_ERANGE;
            return pt__jsonl_err(r, PT_ERANGE, "the line is longer than %zu bytes and no newline follows "
                                "within another %zu bytes; reading stopped", r->max_line, r->max_line);
        }
    }
    if (!any)
        return 0;
    r->line_no++;
    if (nul) {
        r->stopped = PT_EFORMAT;
        return pt__jsonl_err(r, PT_EFORMAT, "the line contains a NUL byte (not a text file?); reading stopped");
    }
    if (too_long)
        return pt__jsonl_err(r, PT_ERANGE, "the line is longer than %zu bytes", r->max_line);
    return 1;
}

/* A \u0000 escape in a string of the line (cJSON would cut the string
 * there): PT_EFORMAT naming the key it belongs to. */
static int check_nul_escapes(const pt_jsonl *r, const char *p, size_t n)
{
    bool in_str = false;
    size_t str_start = 0, key_start = 0, key_len = 0;
    bool have_key = false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (!in_str) {
            if (c == '"') {
                in_str = true;
                str_start = i + 1;
            }
            continue;
        }
        if (c == '\\') {
            if (i + 5 < n && p[i + 1] == 'u' && !memcmp(p + i + 2, "0000", 4)) {
                /* is this string a key? it is when ':' follows it */
                size_t j = i + 6;
                while (j < n && !(p[j] == '"' && p[j - 1] != '\\'))
                    j++;
                size_t k = j + 1;
                while (k < n && (p[k] == ' ' || p[k] == '\t'))
                    k++;
                if (k < n && p[k] == ':')
                    return pt__jsonl_err(r, PT_EFORMAT, "a key (column %zu) contains \\u0000, which is not "
                                        "allowed", str_start);
                if (have_key)
                    return pt__jsonl_err(r, PT_EFORMAT, "\"%.*s\": the string contains \\u0000 (a NUL "
                                        "character), which is not allowed", (int)key_len, p + key_start);
                return pt__jsonl_err(r, PT_EFORMAT, "a string (column %zu) contains \\u0000 (a NUL "
                                    "character), which is not allowed", str_start);
            }
            i++; /* skip the escaped character */
            continue;
        }
        if (c == '"') {
            in_str = false;
            size_t k = i + 1;
            while (k < n && (p[k] == ' ' || p[k] == '\t'))
                k++;
            if (k < n && p[k] == ':') {
                have_key = true;
                key_start = str_start;
                key_len = i - str_start;
            }
        }
    }
    return PT_OK;
}

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A key that appears twice in one object (at any depth): PT_EFORMAT naming it. */
static int check_duplicate_keys(const pt_jsonl *r, const cJSON *o, int depth)
{
    if (depth > 64)
        return PT_OK; /* cJSON's own nesting limit is lower */
    size_t n = 0;
    for (const cJSON *c = o->child; c; c = c->next) {
        if (c->child) {
            int st = check_duplicate_keys(r, c, depth + 1);
            if (st)
                return st;
        }
        n++;
    }
    if (!cJSON_IsObject(o) || n < 2)
        return PT_OK;
    const char **keys = pt__malloc_array(n, sizeof *keys);
    if (!keys)
        return pt__jsonl_err(r, PT_ENOMEM, "out of memory checking the keys of a row");
    size_t i = 0;
    for (const cJSON *c = o->child; c; c = c->next)
        keys[i++] = c->string ? c->string : "";
    qsort(keys, n, sizeof *keys, cmp_str_ptr);
    int st = PT_OK;
    for (i = 1; i < n && !st; i++)
        if (!strcmp(keys[i - 1], keys[i]))
            st = pt__jsonl_err(r, PT_EFORMAT, "duplicate key \"%s\"", keys[i]);
    pt_free(keys);
    return st;
}

int pt__jsonl_next(pt_jsonl *r, const cJSON **row)
{
    PT_CHECK_NULL(r);
    PT_CHECK_NULL(row);
    *row = NULL;
    cJSON_Delete(r->row);
    r->row = NULL;
    if (r->stopped)
        return pt__jsonl_err(r, r->stopped, "reading stopped at this line after an earlier error");
    for (;;) {
        int st = read_line(r);
        if (st <= 0)
            return st;
        const char *p = r->line;
        size_t n = r->line_len;
        if (r->line_no == 1 && n >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) {
            p += 3; /* UTF-8 byte order mark */
            n -= 3;
        }
        while (n && (p[n - 1] == '\r' || p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        while (n && (*p == ' ' || *p == '\t'))
            p++, n--;
        if (n == 0)
            continue; /* blank line */
        const char *end = NULL;
        cJSON *j = cJSON_ParseWithLengthOpts(p, n, &end, false);
        if (!j) {
            const char *at = cJSON_GetErrorPtr();
            size_t col = (at && at >= p && at <= p + n) ? (size_t)(at - p) + 1 : 1;
            return pt__jsonl_err(r, PT_EFORMAT, "not valid JSON (near column %zu)", col);
        }
        if (end && end < p + n) {
            cJSON_Delete(j);
            return pt__jsonl_err(r, PT_EFORMAT,
                                "unexpected data after the JSON value (column %zu); one row per "
                                "line",
                                (size_t)(end - p) + 1);
        }
        if (!cJSON_IsObject(j)) {
            cJSON_Delete(j);
            return pt__jsonl_err(r, PT_EFORMAT, "a row must be a JSON object");
        }
        if ((st = check_nul_escapes(r, p, n)) || (st = check_duplicate_keys(r, j, 0))) {
            cJSON_Delete(j);
            return st;
        }
        r->row = j;
        r->rows++;
        *row = j;
        return 1;
    }
}

/* ---- row helpers ---------------------------------------------------------------- */

static const cJSON *member(const cJSON *row, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(row, key);
}

/* The row's member `key` into *it (NULL when absent); a missing member is
 * an error when required (fn: the caller, named by a NULL argument's error). */
static int row_member(const cJSON **it, const pt_jsonl *r, const cJSON *row, const char *key, bool required,
                      const char *fn)
{
    *it = NULL;
    if (!r || !row || !key)
        return pt__err(PT_EINVAL, "%s: %s is NULL", fn, !r ? "r" : !row ? "row" : "key");
    if (!(*it = member(row, key)) && required)
        return pt__jsonl_err(r, PT_ENOTFOUND, "the row has no \"%s\"", key);
    return PT_OK;
}

int pt__jsonl_row_kind(const pt_jsonl *r, const cJSON *row)
{
    PT_CHECK_NULL(r);
    PT_CHECK_NULL(row);
    bool text = member(row, "text") != NULL, ids = member(row, "input_ids") != NULL;
    if (text && ids)
        return pt__jsonl_err(r, PT_EFORMAT, "a row has both \"text\" and \"input_ids\"");
    return text ? PT_JSONL_TEXT : ids ? PT_JSONL_IDS : PT_JSONL_OTHER;
}

int pt__jsonl_row_string(const char **s, size_t *len, const pt_jsonl *r, const cJSON *row,
                        const char *key, int required)
{
    PT_CHECK_NULL(s);
    *s = NULL;
    if (len)
        *len = 0;
    const cJSON *it;
    int st = row_member(&it, r, row, key, required, __func__);
    if (st || !it)
        return st;
    if (!cJSON_IsString(it) || !it->valuestring)
        return pt__jsonl_err(r, PT_EFORMAT, "\"%s\" must be a string", key);
    size_t n = strlen(it->valuestring);
    if (!pt__utf8_valid(it->valuestring, n))
        return pt__jsonl_err(r, PT_EFORMAT, "\"%s\" is not valid UTF-8", key);
    *s = it->valuestring;
    if (len)
        *len = n;
    return PT_OK;
}

int pt__jsonl_int_array(int32_t **out, size_t *n, const pt_jsonl *r, const cJSON *row,
                       const char *key, int64_t lo, int64_t hi_exclusive)
{
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(n);
    *out = NULL;
    *n = 0;
    const cJSON *it;
    int st = row_member(&it, r, row, key, true, __func__);
    if (st)
        return st;
    if (!cJSON_IsArray(it))
        return pt__jsonl_err(r, PT_EFORMAT, "\"%s\" must be an array of integers", key);
    size_t count = 0;
    for (const cJSON *c = it->child; c; c = c->next)
        count++;
    if (count == 0)
        return PT_OK;
    int32_t *a = pt__malloc_array(count, sizeof *a);
    if (!a)
        return PT_ENOMEM;
    size_t i = 0;
    for (const cJSON *c = it->child; c; c = c->next, i++) {
        double v = c->valuedouble;
        if (!cJSON_IsNumber(c) || !isfinite(v) || v != floor(v)) {
            pt_free(a);
            return pt__jsonl_err(r, PT_EFORMAT, "\"%s\"[%zu] is not an integer", key, i);
        }
        if (v < (double)lo || v >= (double)hi_exclusive) {
            pt_free(a);
            return pt__jsonl_err(r, PT_ERANGE, "\"%s\"[%zu] = %.0f is out of range [%lld, %lld)", key,
                                i, v, (long long)lo, (long long)hi_exclusive);
        }
        a[i] = (int32_t)v;
    }
    *out = a;
    *n = count;
    return PT_OK;
}

int pt__jsonl_row_ids(int32_t **ids, uint8_t **mask, size_t *n, const pt_jsonl *r,
                     const cJSON *row, int32_t vocab_size)
{
    PT_CHECK_NULL(ids);
    PT_CHECK_NULL(n);
    PT_CHECK_NULL(r);
    PT_CHECK_NULL(row);
    *ids = NULL;
    *n = 0;
    if (mask)
        *mask = NULL;
    PT_CHECK_ARG(vocab_size > 0, vocab_size, "must be positive (got %d)", (int)vocab_size);
    int32_t *a;
    size_t count;
    int st = pt__jsonl_int_array(&a, &count, r, row, "input_ids", 0, vocab_size);
    if (st)
        return st;
    const cJSON *m = member(row, "loss_mask");
    if (m && !cJSON_IsNull(m)) {
        if (!cJSON_IsArray(m)) {
            pt_free(a);
            return pt__jsonl_err(r, PT_EFORMAT, "\"loss_mask\" must be an array of 0/1");
        }
        size_t mc = 0;
        for (const cJSON *c = m->child; c; c = c->next)
            mc++;
        if (mc != count) {
            pt_free(a);
            return pt__jsonl_err(r, PT_EFORMAT,
                                "\"loss_mask\" has %zu entries but \"input_ids\" has %zu", mc,
                                count);
        }
        uint8_t *mk = NULL;
        if (count) {
            mk = pt__malloc(count);
            if (!mk) {
                pt_free(a);
                return PT_ENOMEM;
            }
        }
        size_t i = 0;
        for (const cJSON *c = m->child; c; c = c->next, i++) {
            if (cJSON_IsBool(c)) {
                mk[i] = cJSON_IsTrue(c) ? 1 : 0;
            } else if (cJSON_IsNumber(c) && (c->valuedouble == 0 || c->valuedouble == 1)) {
                mk[i] = c->valuedouble == 1 ? 1 : 0;
            } else {
                pt_free(a);
                pt_free(mk);
                return pt__jsonl_err(r, PT_EFORMAT, "\"loss_mask\"[%zu] must be 0 or 1", i);
            }
        }
        if (mask)
            *mask = mk;
        else
            pt_free(mk);
    }
    *ids = a;
    *n = count;
    return PT_OK;
}
