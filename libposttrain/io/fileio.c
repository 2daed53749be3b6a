/* Paths, directories, durable file writing (temp + fsync + rename + directory
 * fsync) and SHA-256. */
#include "io/fileio.h"

#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int pt_io_errno(int err, const char *what, const char *path)
{
    char buf[256];
    const char *msg = strerror_r(err, buf, sizeof buf); /* GNU variant (_GNU_SOURCE) */
    int status = PT_EIO;
#ifdef EDQUOT
    if (err == EDQUOT)
        status = PT_ENOSPC;
#endif
    if (err == ENOSPC)
        status = PT_ENOSPC;
    return pt_err(status, "%s %s: %s", what, path ? path : "(null)", msg);
}

/* ---- paths and directories ---------------------------------------------------- */

char *pt_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name), n;
    if (!pt_add_size(a, b, &n) || !pt_add_size(n, 2, &n)) {
        pt_err(PT_ENOMEM, "path too long");
        return NULL;
    }
    char *p = pt_malloc(n);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/')
        p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

bool pt_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool pt_is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool pt_dir_has_file(const char *dir, const char *name)
{
    char *p = pt_path_join(dir, name);
    bool r = p && pt_is_file(p);
    pt_free(p);
    return r;
}

int pt_mkdir_p(const char *dir)
{
    char *p = pt_strdup(dir);
    if (!p)
        return PT_ENOMEM;
    size_t n = strlen(p);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            int st = pt_io_errno(errno, "mkdir", p);
            pt_free(p);
            return st;
        }
        p[i] = c;
    }
    pt_free(p);
    if (!pt_is_dir(dir))
        return pt_err(PT_EIO, "%s exists and is not a directory", dir);
    return PT_OK;
}

int pt_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return pt_io_errno(errno, "open directory", dir);
    if (fsync(fd) != 0) {
        int e = errno;
        /* Some file systems cannot fsync a directory; that is not a failure. */
        if (e != EINVAL && e != ENOTSUP) {
            close(fd);
            return pt_io_errno(e, "fsync directory", dir);
        }
    }
    close(fd);
    return PT_OK;
}

/* Split path into a freshly allocated directory part ("." if none). */
static char *parent_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return pt_strdup(".");
    if (slash == path)
        return pt_strdup("/");
    size_t n = (size_t)(slash - path);
    char *d = pt_malloc(n + 1);
    if (!d)
        return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

int pt_fsync_parent_dir(const char *path)
{
    char *dir = parent_dir(path);
    if (!dir)
        return PT_ENOMEM;
    int st = pt_fsync_dir(dir);
    free(dir);
    return st;
}

int pt_atomic_open(pt_atomic_file *af, const char *path)
{
    if (!af || !path || !*path)
        return pt_err(PT_EINVAL, "atomic write: path is NULL or empty");
    af->fd = -1;
    af->path = NULL;
    af->tmp_path = NULL;
    af->written = 0;
    size_t len = strlen(path);
    if (path[len - 1] == '/')
        return pt_err(PT_EINVAL, "atomic write: path '%s' names a directory", path);
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
    const char *base = path + dir_len;
    /* "<dir>/.<base>.tmp.XXXXXX" */
    size_t tmp_len = dir_len + 1 + strlen(base) + sizeof ".tmp.XXXXXX";
    af->path = pt_strdup(path);
    af->tmp_path = pt_malloc(tmp_len);
    if (!af->path || !af->tmp_path) {
        free(af->path);
        free(af->tmp_path);
        af->path = af->tmp_path = NULL;
        return PT_ENOMEM;
    }
    snprintf(af->tmp_path, tmp_len, "%.*s.%s.tmp.XXXXXX", (int)dir_len, path, base);
    int fd = mkostemp(af->tmp_path, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        int st = pt_io_errno(e, "create temporary file for", path);
        free(af->path);
        free(af->tmp_path);
        af->path = af->tmp_path = NULL;
        return st;
    }
    af->fd = fd;
    return PT_OK;
}

int pt_atomic_write(pt_atomic_file *af, const void *buf, size_t len)
{
    if (!af || af->fd < 0)
        return pt_err(PT_ESTATE, "atomic write: file is not open");
    const unsigned char *p = buf;
    while (len > 0) {
        size_t chunk = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
        ssize_t w = write(af->fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return pt_io_errno(errno, "write", af->tmp_path);
        }
        if (w == 0)
            return pt_io_errno(ENOSPC, "write", af->tmp_path);
        p += w;
        len -= (size_t)w;
        af->written += (uint64_t)w;
    }
    return PT_OK;
}

void pt_atomic_abort(pt_atomic_file *af)
{
    if (!af)
        return;
    if (af->fd >= 0) {
        close(af->fd);
        af->fd = -1;
    }
    if (af->tmp_path) {
        unlink(af->tmp_path);
        free(af->tmp_path);
        af->tmp_path = NULL;
    }
    free(af->path);
    af->path = NULL;
}

int pt_atomic_commit(pt_atomic_file *af)
{
    if (!af || af->fd < 0 || !af->tmp_path)
        return pt_err(PT_ESTATE, "atomic write: file is not open");
    int st = PT_OK;
    if (fsync(af->fd) != 0) {
        st = pt_io_errno(errno, "fsync", af->tmp_path);
        pt_atomic_abort(af);
        return st;
    }
    /* mkstemp makes 0600; a model file is meant to be shared like any other. */
    if (fchmod(af->fd, 0644) != 0) {
        st = pt_io_errno(errno, "chmod", af->tmp_path);
        pt_atomic_abort(af);
        return st;
    }
    int fd = af->fd;
    af->fd = -1;
    if (close(fd) != 0) {
        st = pt_io_errno(errno, "close", af->tmp_path);
        pt_atomic_abort(af);
        return st;
    }
    if (rename(af->tmp_path, af->path) != 0) {
        st = pt_io_errno(errno, "rename temporary file to", af->path);
        pt_atomic_abort(af);
        return st;
    }
    free(af->tmp_path);
    af->tmp_path = NULL;
    st = pt_fsync_parent_dir(af->path);
    free(af->path);
    af->path = NULL;
    return st;
}

int pt_write_file_atomic(const char *path, const void *buf, size_t len)
{
    if (!buf && len > 0)
        return pt_err(PT_EINVAL, "atomic write of %s: buffer is NULL", path ? path : "(null)");
    pt_atomic_file af;
    int st = pt_atomic_open(&af, path);
    if (st != PT_OK)
        return st;
    if (len > 0 && (st = pt_atomic_write(&af, buf, len)) != PT_OK) {
        pt_atomic_abort(&af);
        return st;
    }
    return pt_atomic_commit(&af);
}

/* ---- SHA-256 (FIPS 180-4) ------------------------------------------------ */

static const uint32_t sha256_k[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u,
    0xab1c5ed5u, 0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu,
    0x9bdc06a7u, 0xc19bf174u, 0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu,
    0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau, 0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u,
    0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u, 0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu,
    0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u, 0xa2bfe8a1u, 0xa81a664bu,
    0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u, 0x19a4c116u,
    0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u,
    0xc67178f2u,
};

static inline uint32_t rotr32(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

static void sha256_block(uint32_t h[8], const uint8_t *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr32(w[i - 15], 7) ^ rotr32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr32(w[i - 2], 17) ^ rotr32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t S1 = rotr32(e, 6) ^ rotr32(e, 11) ^ rotr32(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = hh + S1 + ch + sha256_k[i] + w[i];
        uint32_t S0 = rotr32(a, 2) ^ rotr32(a, 13) ^ rotr32(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = S0 + maj;
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
}

void pt_sha256_init(pt_sha256_ctx *c)
{
    static const uint32_t iv[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                   0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    memcpy(c->h, iv, sizeof iv);
    c->total = 0;
    c->buf_len = 0;
}

void pt_sha256_update(pt_sha256_ctx *c, const void *data, size_t len)
{
    const uint8_t *p = data;
    c->total += len;
    if (c->buf_len > 0) {
        size_t take = 64 - c->buf_len;
        if (take > len)
            take = len;
        memcpy(c->buf + c->buf_len, p, take);
        c->buf_len += take;
        p += take;
        len -= take;
        if (c->buf_len < 64)
            return;
        sha256_block(c->h, c->buf);
        c->buf_len = 0;
    }
    while (len >= 64) {
        sha256_block(c->h, p);
        p += 64;
        len -= 64;
    }
    if (len > 0) {
        memcpy(c->buf, p, len);
        c->buf_len = len;
    }
}

void pt_sha256_final(pt_sha256_ctx *c, uint8_t digest[32])
{
    uint64_t bits = c->total * 8;
    c->buf[c->buf_len++] = 0x80;
    if (c->buf_len > 56) {
        memset(c->buf + c->buf_len, 0, 64 - c->buf_len);
        sha256_block(c->h, c->buf);
        c->buf_len = 0;
    }
    memset(c->buf + c->buf_len, 0, 56 - c->buf_len);
    for (int i = 0; i < 8; i++)
        c->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_block(c->h, c->buf);
    for (int i = 0; i < 8; i++) {
        digest[4 * i] = (uint8_t)(c->h[i] >> 24);
        digest[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
        digest[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
        digest[4 * i + 3] = (uint8_t)c->h[i];
    }
    c->buf_len = 0;
}

void pt_sha256(const void *data, size_t len, uint8_t digest[32])
{
    pt_sha256_ctx c;
    pt_sha256_init(&c);
    pt_sha256_update(&c, data, len);
    pt_sha256_final(&c, digest);
}

int pt_sha256_file(const char *path, uint8_t digest[32])
{
    if (!path)
        return pt_err(PT_EINVAL, "sha256: path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT)
            return pt_err(PT_ENOTFOUND, "sha256: %s: no such file", path);
        return pt_io_errno(errno, "open", path);
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return pt_err(PT_EIO, "sha256: %s: not a regular file", path);
    }
    pt_sha256_ctx c;
    pt_sha256_init(&c);
    enum { CHUNK = 1 << 16 };
    uint8_t *buf = pt_malloc(CHUNK);
    if (!buf) {
        close(fd);
        return PT_ENOMEM;
    }
    for (;;) {
        ssize_t r = read(fd, buf, CHUNK);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int st = pt_io_errno(errno, "read", path);
            free(buf);
            close(fd);
            return st;
        }
        if (r == 0)
            break;
        pt_sha256_update(&c, buf, (size_t)r);
    }
    free(buf);
    close(fd);
    pt_sha256_final(&c, digest);
    return PT_OK;
}

void pt_sha256_hex(const uint8_t digest[32], char hex[65])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 15];
    }
    hex[64] = '\0';
}
