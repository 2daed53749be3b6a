/* The global view of a data-parallel GRPO step: every rank's samples, in
 * rank order, without their token arrays but with their segment rewards,
 * so that every rank computes the
 * advantages, the reward statistics and the loss normalisers of the whole
 * global batch exactly as one process would over the concatenated buffers.
 * Group ids are local to a rank (a group is never split across ranks): the
 * view numbers them 0, 1, ... in order of first appearance, rank by rank. */
#include "train/grpo_internal.h"

#include "core/core.h"
#include "dist/dist_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What each rank says about itself first. */
typedef struct view_head {
    double status;             /* 0 or this rank's PT_E* */
    double n;                  /* samples */
    double groups;             /* distinct group ids */
    double k;                  /* reward functions */
    double nseg;               /* segment rewards of its samples */
    double weights[PT_GRPO_MAX_REWARD_FUNCS];
} view_head;

void pt_grpo_view_free(pt_rollout_buffer *view)
{
    free(view->s);
    free(view->view_seg);
    memset(view, 0, sizeof *view);
}

/* Every rank's segment rewards (rank order, sample order) into
 * view->view_seg, each view sample's seg pointing at its own; heads[q].nseg
 * of them from rank q.  Collective. */
static int gather_segments(pt_rollout_buffer *view, pt_dist *d, const pt_rollout_buffer *buf, const view_head *heads,
                           int size, const char *what)
{
    size_t total = 0, mine = 0;
    for (int q = 0; q < size; q++)
        total += (size_t)heads[q].nseg;
    for (int i = 0; i < buf->n; i++)
        mine += (size_t)buf->s[i].n_seg;
    float *send = pt_malloc_array(mine + 1, sizeof *send);
    size_t *counts = pt_malloc_array((size_t)size * 2, sizeof *counts);
    view->view_seg = pt_malloc_array(total + 1, sizeof *view->view_seg);
    /* every rank allocates the same sizes but for send: a failure there is
     * this rank's, and its peers' deadline names it */
    int st = send && counts && view->view_seg ? PT_OK : PT_ENOMEM;
    if (!st) {
        size_t o = 0;
        for (int i = 0; i < buf->n; i++)
            if (buf->s[i].n_seg > 0) {
                memcpy(send + o, buf->s[i].seg, (size_t)buf->s[i].n_seg * sizeof *send);
                o += (size_t)buf->s[i].n_seg;
            }
        size_t off = 0;
        for (int q = 0; q < size; q++) {
            counts[q] = (size_t)heads[q].nseg * sizeof *send;
            counts[size + q] = off;
            off += counts[q];
        }
        st = pt_comm_allgatherv(d, send, mine * sizeof *send, view->view_seg, counts, counts + size, what);
    }
    free(send);
    free(counts);
    return st;
}

/* Renumber the group ids of s[0 .. n) densely by first appearance, from
 * `base`; returns the number of groups, or -1 out of memory. */
static int64_t renumber_groups(grpo_sample *s, int n, int64_t base)
{
    int64_t *ids = pt_malloc_array(n ? (size_t)n : 1, sizeof *ids);
    if (!ids)
        return -1;
    int64_t ng = 0;
    for (int i = 0; i < n; i++) {
        int64_t g = 0;
        while (g < ng && ids[g] != s[i].group)
            g++;
        if (g == ng)
            ids[ng++] = s[i].group;
        s[i].group = base + g;
    }
    free(ids);
    return ng;
}

int pt_grpo_view_gather(pt_rollout_buffer *view, int *offset, pt_dist *d, const pt_rollout_buffer *buf, int status)
{
    static const char what[] = "pt_grpo_step";
    memset(view, 0, sizeof *view);
    *offset = 0;
    const int size = pt_dist_size(d), rank = pt_dist_rank(d);
    /* this rank's samples with dense local groups; a failure to allocate
     * is this rank's status, agreed like any other */
    grpo_sample *mine = NULL;
    int64_t ng = 0;
    if (!status && buf->n > 0) {
        mine = pt_malloc_array((size_t)buf->n, sizeof *mine);
        if (!mine)
            status = PT_ENOMEM;
        else {
            memcpy(mine, buf->s, (size_t)buf->n * sizeof *mine);
            if ((ng = renumber_groups(mine, buf->n, 0)) < 0)
                status = PT_ENOMEM;
        }
    }
    double nseg = 0;
    for (int i = 0; !status && i < buf->n; i++)
        nseg += buf->s[i].n_seg;
    view_head head = { .status = status, .n = status ? 0 : buf->n, .groups = (double)ng, .k = buf->k, .nseg = nseg };
    for (int j = 0; j < buf->k; j++)
        head.weights[j] = buf->weights[j];
    view_head *heads = pt_malloc_array((size_t)size, sizeof *heads);
    size_t *counts = pt_malloc_array((size_t)size * 2, sizeof *counts);
    if (!heads || !counts) {
        /* cannot even take part: the peers' deadline names this rank */
        free(heads);
        free(counts);
        free(mine);
        return PT_ENOMEM;
    }
    int st = pt_comm_allgather(d, &head, sizeof head, heads, what);
    /* every rank's outcome, as pt_comm_agree reports it */
    int bad = -1;
    for (int q = 0; q < size && !st && bad < 0; q++)
        if (heads[q].status != 0)
            bad = q;
    if (!st && status)
        st = status; /* this rank's own message stays */
    else if (!st && bad >= 0)
        st = pt_err(PT_EPEER, "%s: rank %d failed (%s); its own message says why", what, bad,
                    pt_status_name((int)heads[bad].status));
    for (int q = 0; q < size && !st; q++)
        if (heads[q].k != buf->k || memcmp(heads[q].weights, head.weights, sizeof head.weights))
            st = pt_err(PT_EINVAL, "%s: rank %d's rollout buffer has other reward functions or weights than "
                        "rank %d's (every rank must create its buffer with the same options)", what, q, rank);
    size_t total = 0;
    int64_t group_base = 0;
    size_t *displs = counts + size;
    for (int q = 0; q < size && !st; q++) {
        counts[q] = (size_t)heads[q].n * sizeof *mine;
        displs[q] = total * sizeof *mine;
        if (q < rank) {
            *offset += (int)heads[q].n;
            group_base += (int64_t)heads[q].groups;
        }
        total += (size_t)heads[q].n;
    }
    if (!st && total > (size_t)INT32_MAX)
        st = pt_err(PT_ERANGE, "%s: %zu samples over all ranks is too many", what, total);
    if (!st) {
        for (int i = 0; i < buf->n; i++)
            mine[i].group += group_base;
        view->s = pt_malloc_array(total ? total : 1, sizeof *view->s);
        /* every rank allocates the same sizes, so every rank gets here */
        if (!view->s)
            st = PT_ENOMEM;
    }
    if (!st)
        st = pt_comm_allgatherv(d, mine, (size_t)buf->n * sizeof *mine, view->s, counts, displs, what);
    if (!st)
        st = gather_segments(view, d, buf, heads, size, what);
    free(heads);
    free(counts);
    free(mine);
    if (st) {
        pt_grpo_view_free(view);
        return st;
    }
    view->n = (int)total;
    view->cap = (int)total;
    view->k = buf->k;
    memcpy(view->weights, buf->weights, sizeof view->weights);
    /* the token arrays stay on their own rank; the segment rewards travel */
    size_t so = 0;
    for (size_t i = 0; i < total; i++) {
        grpo_sample *v = &view->s[i];
        v->ids = NULL;
        v->mask = NULL;
        v->old = v->ref = v->samp = v->tadv = NULL;
        v->seg = v->n_seg > 0 ? view->view_seg + so : NULL;
        so += (size_t)v->n_seg;
    }
    return PT_OK;
}
