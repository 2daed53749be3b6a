/* What the files of the GGUF container share.  Internal to io/:
 *   gguf_types.c   type tables (names, block sizes)
 *   gguf_arena.c   the handle's bump allocator
 *   gguf_parse.c   the validating parser over a bounded cursor
 *   gguf_read.c    opening (mmap or memory), accessors, getters, read_f32
 *   gguf_get.c     the typed getters, pt__gguf_read_f32
 *   gguf_write.c   the writer's metadata and tensor lists
 *   gguf_emit.c    serialising a writer into a file (buffered, atomic) */
#ifndef PT_IO_GGUF_INTERNAL_H
#define PT_IO_GGUF_INTERNAL_H

#include "io/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A bump allocator of chunks: every key, name and value copy of a handle. */
typedef struct gguf_chunk gguf_chunk;
typedef struct gguf_arena {
    gguf_chunk *head;
    size_t used, cap;      /* in the head chunk */
} gguf_arena;

/* n bytes aligned to 8 (NULL with PT_ENOMEM recorded); freed together. */
void *pt__gguf_arena_alloc(gguf_arena *a, size_t n);
void pt__gguf_arena_free(gguf_arena *a);

struct pt_gguf {
    const uint8_t *base;
    size_t len;
    bool mapped;
    char *path;                     /* NULL for memory */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_start;            /* file offset of the data section */
    pt_gguf_kv *kv;                 /* file order */
    size_t n_kv;
    const pt_gguf_kv **kv_by_key;   /* sorted by key */
    pt_gguf_tensor *tensors;        /* file order */
    size_t n_tensors;
    const pt_gguf_tensor **t_by_name; /* sorted by name */
    gguf_arena arena;               /* everything above but base and path */
};

/* Validate g->base[0..g->len) and fill every other field. */
int pt__gguf_parse(pt_gguf *g);

/* ---- the writer ---------------------------------------------------------------- */

typedef struct gguf_wkv {
    char *key;                  /* owned */
    pt_gguf_type type, elem_type;
    uint64_t n;
    void *data;                 /* owned: values, or pt_gguf_str[n] then the bytes */
} gguf_wkv;

typedef struct gguf_wtensor {
    char *name;                 /* owned */
    uint32_t ndim;
    uint64_t ne[PT_GGUF_MAX_DIMS];
    int type;
    uint64_t numel, nbytes;
    const float *f32;           /* borrowed: converted while writing, or */
    const void *raw;            /* borrowed: written as is */
} gguf_wtensor;

struct pt_gguf_writer {
    gguf_wkv *kv;
    size_t n_kv, cap_kv;
    gguf_wtensor *t;
    size_t n_t, cap_t;
    uint32_t alignment;         /* 32, or a general.alignment the caller set */
};

/* Little-endian loads (the file's byte order) from any alignment. */
static inline uint16_t pt__gguf_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}
static inline uint32_t pt__gguf_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t pt__gguf_le64(const uint8_t *p)
{
    return (uint64_t)pt__gguf_le32(p) | (uint64_t)pt__gguf_le32(p + 4) << 32;
}

#endif
