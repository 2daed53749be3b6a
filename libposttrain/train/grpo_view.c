/* The global view of a data-parallel GRPO step: every rank's samples, in
 * rank order, as explicit wire records (view_wire: the fields the step
 * reads, no pointers) followed by their segment rewards,
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

void pt__grpo_view_free(pt_rollout_buffer *view)
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
    float *send = pt__malloc_array(mine + 1, sizeof *send);
    size_t *counts = pt__malloc_array((size_t)size * 2, sizeof *counts);
    view->view_seg = pt__malloc_array(total + 1, sizeof *view->view_seg);
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
        st = pt__comm_allgatherv(d, send, mine * sizeof *send, view->view_seg, counts, counts + size, what);
    }
    free(send);
    free(counts);
    return st;
}

/* What crosses ranks of each sample: exactly the fields the step reads
 * from the global view (grpo_step.c, grpo_step_adv.c, grpo_reward.c,
 * grpo_check.c), in fixed-width types with no hidden padding, so no
 * pointer and no uninitialised byte is sent.  Its segment rewards follow
 * separately (gather_segments). */
typedef struct view_wire {
    int64_t group;             /* renumbered: dense, global */
    int32_t n_comp;            /* completion tokens */
    int32_t n_mask;            /* loss tokens */
    int32_t n_seg;             /* segment rewards */
    uint8_t kind;              /* GRPO_KIND_* */
    uint8_t truncated;
    uint8_t pad[2];            /* 0 */
    float rewards[PT_GRPO_MAX_REWARD_FUNCS]; /* k of them; NaN beyond */
} view_wire;

_Static_assert(sizeof(view_wire) == 24 + 4 * PT_GRPO_MAX_REWARD_FUNCS, "view_wire has hidden padding");
_Static_assert(GRPO_KIND_ADVANTAGES <= UINT8_MAX, "a kind fits a byte");

/* Sample s as its record (its group given). */
static void wire_pack(view_wire *w, const grpo_sample *s, int k, int64_t group)
{
    memset(w, 0, sizeof *w);
    w->group = group;
    w->n_comp = s->n_comp;
    w->n_mask = s->n_mask;
    w->n_seg = s->n_seg;
    w->kind = (uint8_t)s->kind;
    w->truncated = s->truncated;
    for (int j = 0; j < PT_GRPO_MAX_REWARD_FUNCS; j++)
        w->rewards[j] = j < k ? s->rewards[j] : NAN;
}

/* A view sample from its record: the fields the record carries, every
 * other one 0 (no token arrays: they stay on their own rank). */
static void wire_unpack(grpo_sample *s, const view_wire *w)
{
    memset(s, 0, sizeof *s);
    s->group = w->group;
    s->n_comp = w->n_comp;
    s->n_mask = w->n_mask;
    s->n_seg = w->n_seg;
    s->kind = w->kind;
    s->truncated = w->truncated != 0;
    memcpy(s->rewards, w->rewards, sizeof s->rewards);
}

/* The records of buf's samples into *out, their group ids renumbered
 * densely by first appearance from 0 (*ng: how many); PT_ENOMEM. */
static int pack_local(view_wire **out, int64_t *ng, const pt_rollout_buffer *buf)
{
    *ng = 0;
    *out = NULL;
    if (buf->n == 0)
        return PT_OK;
    view_wire *w = pt__malloc_array((size_t)buf->n, sizeof *w);
    int64_t *ids = pt__malloc_array((size_t)buf->n, sizeof *ids);
    if (!w || !ids) {
        free(w);
        free(ids);
        return PT_ENOMEM;
    }
    int64_t n = 0;
    for (int i = 0; i < buf->n; i++) {
        int64_t g = 0;
        while (g < n && ids[g] != buf->s[i].group)
            g++;
        if (g == n)
            ids[n++] = buf->s[i].group;
        wire_pack(&w[i], &buf->s[i], buf->k, g);
    }
    free(ids);
    *out = w;
    *ng = n;
    return PT_OK;
}

/* Every rank's records (heads[q].n from rank q, in rank order) into
 * view->s; this rank's groups moved up by group_base first.  Collective. */
static int gather_samples(pt_rollout_buffer *view, pt_dist *d, view_wire *mine, int n_mine, int64_t group_base,
                          const view_head *heads, int size, size_t total, const char *what)
{
    size_t *counts = pt__malloc_array((size_t)size * 2, sizeof *counts);
    view_wire *all = pt__malloc_array(total ? total : 1, sizeof *all);
    view->s = pt__malloc_array(total ? total : 1, sizeof *view->s);
    /* every rank allocates the same sizes, so every rank gets here */
    int st = counts && all && view->s ? PT_OK : PT_ENOMEM;
    if (!st) {
        for (int i = 0; i < n_mine; i++)
            mine[i].group += group_base;
        size_t off = 0;
        for (int q = 0; q < size; q++) {
            counts[q] = (size_t)heads[q].n * sizeof *all;
            counts[size + q] = off;
            off += counts[q];
        }
        st = pt__comm_allgatherv(d, mine, (size_t)n_mine * sizeof *mine, all, counts, counts + size, what);
    }
    for (size_t i = 0; !st && i < total; i++)
        wire_unpack(&view->s[i], &all[i]);
    free(counts);
    free(all);
    return st;
}

/* Every rank's head: PT_OK when every rank's status is and their reward
 * functions agree, else this rank's status (its own message) or
 * PT_EPEER / PT_EINVAL naming the rank. */
static int check_heads(const view_head *heads, const view_head *head, int size, int rank, int status,
                       const char *what)
{
    int bad = -1;
    for (int q = 0; q < size && bad < 0; q++)
        if (heads[q].status != 0)
            bad = q;
    if (status)
        return status; /* this rank's own message stays */
    if (bad >= 0)
        return pt__err(PT_EPEER, "%s: rank %d failed (%s); its own message says why", what, bad,
                      pt_status_name((int)heads[bad].status));
    for (int q = 0; q < size; q++)
        if (heads[q].k != head->k || memcmp(heads[q].weights, head->weights, sizeof head->weights))
            return pt__err(PT_EINVAL, "%s: rank %d's rollout buffer has other reward functions or weights than "
                          "rank %d's (every rank must create its buffer with the same options)", what, q, rank);
    return PT_OK;
}

int pt__grpo_view_gather(pt_rollout_buffer *view, int *offset, pt_dist *d, const pt_rollout_buffer *buf, int status)
{
    static const char what[] = "pt_grpo_step";
    memset(view, 0, sizeof *view);
    *offset = 0;
    const int size = pt_dist_size(d), rank = pt_dist_rank(d);
    /* this rank's records with dense local groups; a failure to allocate
     * is this rank's status, agreed like any other */
    view_wire *mine = NULL;
    int64_t ng = 0;
    if (!status && pack_local(&mine, &ng, buf))
        status = PT_ENOMEM;
    double nseg = 0;
    for (int i = 0; !status && i < buf->n; i++)
        nseg += buf->s[i].n_seg;
    view_head head = { .status = status, .n = status ? 0 : buf->n, .groups = (double)ng, .k = buf->k, .nseg = nseg };
    for (int j = 0; j < buf->k; j++)
        head.weights[j] = buf->weights[j];
    view_head *heads = pt__malloc_array((size_t)size, sizeof *heads);
    if (!heads) {
        /* cannot even take part: the peers' deadline names this rank */
        free(mine);
        return PT_ENOMEM;
    }
    int st = pt__comm_allgather(d, &head, sizeof head, heads, what);
    if (!st)
        st = check_heads(heads, &head, size, rank, status, what);
    size_t total = 0;
    int64_t group_base = 0;
    for (int q = 0; q < size && !st; q++) {
        if (q < rank) {
            *offset += (int)heads[q].n;
            group_base += (int64_t)heads[q].groups;
        }
        total += (size_t)heads[q].n;
    }
    if (!st && total > (size_t)INT32_MAX)
        st = pt__err(PT_ERANGE, "%s: %zu samples over all ranks is too many", what, total);
    if (!st)
        st = gather_samples(view, d, mine, status ? 0 : buf->n, group_base, heads, size, total, what);
    if (!st)
        st = gather_segments(view, d, buf, heads, size, what);
    free(heads);
    free(mine);
    if (st) {
        pt__grpo_view_free(view);
        return st;
    }
    view->n = (int)total;
    view->cap = (int)total;
    view->k = buf->k;
    memcpy(view->weights, buf->weights, sizeof view->weights);
    /* the segment rewards travel: each view sample's seg points at its own */
    size_t so = 0;
    for (size_t i = 0; i < total; i++) {
        grpo_sample *v = &view->s[i];
        v->seg = v->n_seg > 0 ? view->view_seg + so : NULL;
        so += (size_t)v->n_seg;
    }
    return PT_OK;
}
