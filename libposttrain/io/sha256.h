/* SHA-256 (FIPS 180-4) of buffers and files.  Internal to libposttrain. */
#ifndef PT_IO_SHA256_H
#define PT_IO_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct pt_sha256_ctx {
    uint32_t h[8];
    uint64_t total;         /* bytes hashed so far */
    uint8_t buf[64];
    size_t buf_len;
} pt_sha256_ctx;

void pt__sha256_init(pt_sha256_ctx *c);
void pt__sha256_update(pt_sha256_ctx *c, const void *data, size_t len);
void pt__sha256_final(pt_sha256_ctx *c, uint8_t digest[32]);
void pt__sha256(const void *data, size_t len, uint8_t digest[32]);
/* Hash a file by streaming it: PT_ENOTFOUND if absent, PT_EIO on read errors. */
int pt__sha256_file(const char *path, uint8_t digest[32]);
/* Lower-case hex of a digest into hex[65] (NUL-terminated). */
void pt__sha256_hex(const uint8_t digest[32], char hex[65]);

#endif
