/* The GGUF handle's bump allocator: keys, names, value copies and the
 * tables live in 64 KiB chunks (a large request gets a chunk of its own)
 * and are freed together by pt__gguf_close. */
#include "io/gguf_internal.h"

#include "core/core.h"

#include <stdlib.h>

struct gguf_chunk {
    gguf_chunk *next;
    size_t cap;
    uint64_t data[];
};

#define ARENA_CHUNK ((size_t)64 << 10)

void *pt__gguf_arena_alloc(gguf_arena *a, size_t n)
{
    if (n > SIZE_MAX - sizeof(gguf_chunk) - 8) {
        pt__err(PT_ENOMEM, "gguf: allocation of %zu bytes overflows", n);
        return NULL;
    }
    size_t need = n == 0 ? 8 : (n + 7) & ~(size_t)7;
    if (a->head && a->cap - a->used >= need) {
        void *p = (unsigned char *)a->head->data + a->used;
        a->used += need;
        return p;
    }
    bool own = need > ARENA_CHUNK / 4;
    size_t cap = own ? need : ARENA_CHUNK;
    gguf_chunk *c = pt__malloc(sizeof(gguf_chunk) + cap);
    if (!c)
        return NULL;
    c->cap = cap;
    if (own && a->head) { /* keep filling the current chunk */
        c->next = a->head->next;
        a->head->next = c;
        return c->data;
    }
    c->next = a->head;
    a->head = c;
    a->cap = cap;
    a->used = need;
    return c->data;
}

void pt__gguf_arena_free(gguf_arena *a)
{
    gguf_chunk *c = a->head;
    while (c) {
        gguf_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used = a->cap = 0;
}
