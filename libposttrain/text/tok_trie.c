/* The byte trie of added-token contents: insertion at load, and the
 * leftmost-longest search of encode. */
#include "text/tok_internal.h"

#include <stdlib.h>
#include <string.h>

int tk_trie_add(tk_trie *tr, const char *s, size_t n, int32_t token)
{
    if (tr->n == 0) {
        tr->cap = 64;
        tr->nodes = pt__calloc(tr->cap, sizeof *tr->nodes);
        if (!tr->nodes)
            return PT_ENOMEM;
        tr->n = 1;
        tr->nodes[0].token = -1;
    }
    uint32_t cur = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        uint32_t child = cur == 0 ? tr->root[c] : 0;
        if (cur != 0) {
            for (uint32_t k = tr->nodes[cur].first; k; k = tr->nodes[k].next)
                if (tr->nodes[k].byte == c) {
                    child = k;
                    break;
                }
        }
        if (!child) {
            if (tr->n == tr->cap) {
                tk_trie_node *v = pt__realloc_array(tr->nodes, tr->cap * 2, sizeof *v);
                if (!v)
                    return PT_ENOMEM;
                tr->nodes = v;
                tr->cap *= 2;
            }
            child = (uint32_t)tr->n++;
            tr->nodes[child].token = -1;
            tr->nodes[child].byte = c;
            tr->nodes[child].first = 0;
            if (cur == 0) {
                tr->nodes[child].next = 0;
                tr->root[c] = child;
            } else {
                tr->nodes[child].next = tr->nodes[cur].first;
                tr->nodes[cur].first = child;
            }
        }
        cur = child;
    }
    if (tr->nodes[cur].token < 0)
        tr->nodes[cur].token = token;
    tr->count++;
    return 0;
}

int32_t tk_trie_find(const tk_trie *tr, const char *s, size_t n, size_t pos, size_t *start, size_t *len)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = pos; i < n; i++) {
        uint32_t node = tr->root[u[i]];
        if (!node)
            continue;
        int32_t tok = -1;
        size_t j = i + 1;
        for (;;) {
            if (tr->nodes[node].token >= 0) {
                tok = tr->nodes[node].token;
                *len = j - i;
            }
            if (j >= n)
                break;
            uint32_t nx = 0;
            for (uint32_t k = tr->nodes[node].first; k; k = tr->nodes[k].next)
                if (tr->nodes[k].byte == u[j]) {
                    nx = k;
                    break;
                }
            if (!nx)
                break;
            node = nx;
            j++;
        }
        if (tok >= 0) {
            *start = i;
            return tok;
        }
    }
    return -1;
}

void tk_trie_free(tk_trie *tr)
{
    free(tr->nodes);
    memset(tr, 0, sizeof *tr);
}
