/* Training over a pt_dist job: the gradient all-reduce of an optimizer's
 * parameters in buckets, and the replica check against silent data
 * corruption (a hash of every rank's parameters and optimizer state). */
#include "train/dist_train.h"

#include "core/core.h"
#include "model/model.h"
#include "train/optimizer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pt__dist_allreduce_grads(pt_dist *d, pt_optimizer *opt)
{
    static const char what[] = "gradient all-reduce";
    if (!d || pt_dist_size(d) == 1)
        return PT_OK;
    size_t n;
    const pt_opt_param *p = pt__optimizer_params(opt, &n);
    pt_model *model = pt__optimizer_model(opt);
    for (size_t i = 0; i < n; i++)
        if (!p[i].grad) {
            /* no backward ran on this rank yet: its part is zero */
            int st = model ? pt_model_alloc_grads(model) : PT_OK;
            if (st)
                return st;
            p = pt__optimizer_params(opt, &n);
            break;
        }
    for (size_t i = 0; i < n; i++)
        if (!p[i].grad)
            return pt__err(PT_EINTERNAL, "%s: parameter %zu has no gradient", what, i);
    const size_t per_bucket = d->opts.bucket_bytes / sizeof(float);
    float *stage = NULL;
    int st = PT_OK;
    size_t i = 0;
    while (i < n && !st) {
        if (p[i].numel >= per_bucket / 2) {
            st = pt__comm_allreduce_f32(d, p[i].grad, p[i].numel, what);
            i++;
            continue;
        }
        /* small tensors travel together through one staging bucket */
        if (!stage && !(stage = pt__malloc_array(per_bucket, sizeof *stage)))
            return PT_ENOMEM;
        size_t j = i, fill = 0;
        for (; j < n && p[j].numel < per_bucket / 2 && fill + p[j].numel <= per_bucket; j++) {
            memcpy(stage + fill, p[j].grad, p[j].numel * sizeof *stage);
            fill += p[j].numel;
        }
        if ((st = pt__comm_allreduce_f32(d, stage, fill, what)))
            break;
        fill = 0;
        for (; i < j; i++) {
            memcpy(p[i].grad, stage + fill, p[i].numel * sizeof *stage);
            fill += p[i].numel;
        }
    }
    free(stage);
    return st;
}

/* ---- replica check ----------------------------------------------------------- */

#define HASH_CHUNK ((size_t)1 << 16) /* bytes per independently hashed chunk */
#define FNV_PRIME 0x100000001b3ull
#define FNV_BASIS 0xcbf29ce484222325ull

/* FNV-1a over 64-bit words (then the tail bytes): a change of any one word
 * changes the result, since every step is a bijection of the state. */
static uint64_t hash_bytes(uint64_t h, const unsigned char *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * FNV_PRIME;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * FNV_PRIME;
    return h;
}

/* One array: chunk hashes computed in parallel, folded in order, so the
 * result does not depend on the thread count. */
static uint64_t hash_array(uint64_t h, const void *data, size_t bytes)
{
    const unsigned char *p = data;
    size_t nc = (bytes + HASH_CHUNK - 1) / HASH_CHUNK;
    uint64_t *part = nc > 1 ? malloc(nc * sizeof *part) : NULL;
    if (!part)
        return hash_bytes(h, p, bytes) ^ (uint64_t)bytes;
#pragma omp parallel for num_threads(pt_get_num_threads()) schedule(static)
    for (size_t c = 0; c < nc; c++) {
        size_t lo = c * HASH_CHUNK, len = bytes - lo < HASH_CHUNK ? bytes - lo : HASH_CHUNK;
        part[c] = hash_bytes(FNV_BASIS, p + lo, len);
    }
    for (size_t c = 0; c < nc; c++)
        h = (h ^ part[c]) * FNV_PRIME;
    free(part);
    return h ^ (uint64_t)bytes;
}

uint64_t pt__optimizer_state_hash(pt_optimizer *opt)
{
    size_t n;
    const pt_opt_param *p = pt__optimizer_params(opt, &n);
    uint64_t h = FNV_BASIS;
    for (size_t i = 0; i < n; i++)
        h = hash_array(h, p[i].data, p[i].numel * sizeof(float));
    pt_opt_state_view sv;
    pt__optimizer_state_view(&sv, opt);
    h = hash_array(h, sv.m, sv.numel_total * sizeof(float));
    if (sv.v)
        h = hash_array(h, sv.v, sv.numel_total * sizeof(float));
    h = hash_array(h, &sv.step, sizeof sv.step);
    return hash_array(h, &sv.skipped, sizeof sv.skipped);
}

int pt_dist_check_replicas(int *bad_rank, uint64_t *hash, pt_dist *d, const pt_optimizer *opt)
{
    if (bad_rank)
        *bad_rank = -1;
    PT_CHECK_NULL(d);
    PT_CHECK_NULL(opt);
    pt_optimizer *o = (pt_optimizer *)opt; /* the hash only reads (gradient pointers refreshed) */
    int64_t step = 0;
    step = pt_optimizer_step_count(o);
    pt__dist_set_step(d, step);
    uint64_t mine = pt__optimizer_state_hash(o);
    if (hash)
        *hash = mine;
    const int size = pt_dist_size(d);
    uint64_t stack[64], *all = size <= 64 ? stack : pt__malloc_array((size_t)size, sizeof *all);
    if (!all)
        return PT_ENOMEM;
    int st = pt__comm_allgather(d, &mine, sizeof mine, all, "replica check");
    if (st) {
        if (all != stack)
            free(all);
        return st;
    }
    /* the majority hash: the one most ranks hold, if more than half do */
    int best = -1, best_votes = 0;
    for (int q = 0; q < size; q++) {
        int votes = 0;
        for (int r = 0; r < size; r++)
            votes += all[r] == all[q];
        if (votes > best_votes) {
            best_votes = votes;
            best = q;
        }
    }
    const bool majority = 2 * best_votes > size;
    char list[512];
    size_t len = 0;
    int first = -1, count = 0;
    list[0] = '\0';
    for (int q = 0; q < size; q++) {
        if (majority && all[q] == all[best])
            continue;
        if (first < 0)
            first = q;
        count++;
        int k = snprintf(list + len, sizeof list - len, "%s%d (%016" PRIx64 ")", len ? ", " : "", q, all[q]);
        if (k > 0 && (size_t)k < sizeof list - len)
            len += (size_t)k;
    }
    uint64_t ref = all[best];
    if (all != stack)
        free(all);
    if (count == 0)
        return PT_OK;
    if (bad_rank) /* with no majority, no rank can be named the wrong one */
        *bad_rank = majority ? first : -1;
    if (majority)
        return pt__err(PT_ECHECKSUM, "pt_dist_check_replicas: at step %lld the parameters and optimizer state of "
                      "rank(s) %s differ from the %d of %d ranks that agree (%016" PRIx64 "): silent data "
                      "corruption", (long long)step, list, best_votes, size, ref);
    return pt__err(PT_ECHECKSUM, "pt_dist_check_replicas: at step %lld the parameters and optimizer state differ "
                  "between ranks and no majority agrees: ranks %s: silent data corruption", (long long)step,
                  list);
}
