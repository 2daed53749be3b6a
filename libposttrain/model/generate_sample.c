/* The sampler of pt_generate: temperature, top-k, top-p, min-p, the draw and
 * the log-probability of the drawn token under the distribution drawn from.
 * Everything a draw reads is the row's logits and its own RNG stream, so the
 * result does not depend on other rows or on threads. */
#include "model/generate_internal.h"

#include "kernels/vexp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Ids in a block of the draw (a multiple of DRAW_LANES). */
#define DRAW_BLOCK 256
#define DRAW_LANES 8

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

size_t pt__sample_scratch_bytes(int v)
{
    size_t n = (size_t)v;
    return 2 * round64(n * sizeof(float)) + round64(n * sizeof(int32_t)) + round64(n) +
           round64((n + DRAW_BLOCK - 1) / DRAW_BLOCK * sizeof(double));
}

void pt__sample_scratch_init(pt_sample_scratch *s, void *mem, int v)
{
    size_t n = (size_t)v;
    char *p = mem;
    s->zbuf = (float *)p;
    s->z = s->zbuf;
    p += round64(n * sizeof(float));
    s->e = (float *)p;
    p += round64(n * sizeof(float));
    s->idx = (int32_t *)p;
    p += round64(n * sizeof(int32_t));
    s->keep = (uint8_t *)p;
    p += round64(n);
    s->bs = (double *)(void *)p;
}

void pt__sample_rng(pt_rng *r, uint64_t seed, uint64_t stream)
{
    /* Two rounds of mixing so that (seed, stream) and (seed', stream') with
     * seed + stream == seed' + stream' still give unrelated streams. */
    uint64_t x = seed ^ 0x6A09E667F3BCC909ull;
    x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ull;
    x ^= stream * 0x9E3779B97F4A7C15ull + 0x3C6EF372FE94F82Bull;
    x = (x ^ (x >> 29)) * 0x94D049BB133111EBull;
    pt__rng_seed(r, x ^ (x >> 32));
}

/* Order of preference: larger z first, then the lower id. */
static inline int better(const float *z, int32_t a, int32_t b)
{
    return z[a] > z[b] || (z[a] == z[b] && a < b);
}

static void swap_ids(int32_t *a, int32_t *b)
{
    int32_t t = *a;
    *a = *b;
    *b = t;
}

/* Rearrange idx[0..n) so that its k best (by `better`) come first, in any
 * order (quickselect with a median-of-three pivot). */
static void select_best(int32_t *idx, int n, int k, const float *z)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (better(z, idx[mid], idx[lo]))
            swap_ids(&idx[mid], &idx[lo]);
        if (better(z, idx[hi], idx[lo]))
            swap_ids(&idx[hi], &idx[lo]);
        if (better(z, idx[hi], idx[mid]))
            swap_ids(&idx[hi], &idx[mid]);
        int32_t pivot = idx[mid];
        int i = lo, j = hi;
        while (i <= j) {
            while (better(z, idx[i], pivot))
                i++;
            while (better(z, pivot, idx[j]))
                j--;
            if (i <= j) {
                swap_ids(&idx[i], &idx[j]);
                i++;
                j--;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            return;
    }
}

/* Insertion/heap-free sort of a short candidate list by `better` (shell sort:
 * no recursion, no allocation, deterministic). */
static void sort_best_first(int32_t *idx, int n, const float *z)
{
    static const int gaps[] = { 1750, 701, 301, 132, 57, 23, 10, 4, 1 };
    for (size_t g = 0; g < sizeof gaps / sizeof gaps[0]; g++) {
        int gap = gaps[g];
        for (int i = gap; i < n; i++) {
            int32_t t = idx[i];
            int j = i;
            for (; j >= gap && better(z, t, idx[j - gap]); j -= gap)
                idx[j] = idx[j - gap];
            idx[j] = t;
        }
    }
}

/* z = logits / T (at T = 1 the logits themselves: x / 1 is x), e =
 * exp(z - max); sc->zmax and sc->sum. */
static void scale_exp(pt_sample_scratch *sc, const float *logits, int v, float t)
{
    float *e = sc->e;
    if (t == 1.0f) {
        sc->z = logits;
    } else {
        float *z = sc->zbuf;
#pragma omp simd
        for (int i = 0; i < v; i++)
            z[i] = logits[i] / t;
        sc->z = z;
    }
    const float zmax = pt__vmax(sc->z, (size_t)v);
    sc->zmax = zmax;
    sc->sum = pt__vexp_sum(e, sc->z, (size_t)v, zmax);
}

int pt__sample_filter(uint8_t *keep, const float *logits, int v, const pt_sampler *s,
                     pt_sample_scratch *sc)
{
    if (v < 1)
        return 0;
    scale_exp(sc, logits, v, s->temperature);
    const float *z = sc->z, *e = sc->e, sum = sc->sum;
    int32_t *idx = sc->idx;
    bool use_k = s->top_k > 0 && s->top_k < v, use_p = s->top_p < 1.0f;
    if (!use_k && !use_p) {
        for (int i = 0; i < v; i++)
            keep[i] = 1;
    } else {
        int n = 0;
        if (use_k) {
            for (int i = 0; i < v; i++)
                idx[i] = i;
            select_best(idx, v, s->top_k, z);
            n = s->top_k;
        } else {
            /* A token whose probability p is below (1 - top_p) / v is never
             * in the nucleus: the tokens ranked at or below it hold at most
             * v * p < 1 - top_p, so those above it already reach top_p.
             * Half that bound leaves room for rounding. */
            float cut = 0.5f * (1.0f - s->top_p) / (float)v * sum;
            for (int i = 0; i < v; i++)
                if (e[i] >= cut)
                    idx[n++] = i;
        }
        for (int i = 0; i < v; i++)
            keep[i] = 0;
        if (!use_p) {
            for (int r = 0; r < n; r++)
                keep[idx[r]] = 1;
        } else {
            sort_best_first(idx, n, z);
            double total = 0.0;
            if (use_k)
                for (int r = 0; r < n; r++)
                    total += (double)e[idx[r]];
            else
                total = (double)sum;
            double cum = 0.0;
            for (int r = 0; r < n; r++) {
                keep[idx[r]] = 1;
                cum += (double)e[idx[r]] / total;
                if (cum >= (double)s->top_p)
                    break;
            }
        }
    }
    /* min_p: p >= min_p * p_max, i.e. e >= min_p * e_max (the most likely
     * id, kept by every filter above, has the largest e). */
    float emax = 0.0f;
    for (int i = 0; i < v; i++)
        emax = e[i] > emax ? e[i] : emax;
    float floor_e = s->min_p * emax;
    int kept = 0;
    for (int i = 0; i < v; i++) {
        if (keep[i] && s->min_p > 0.0f && e[i] < floor_e)
            keep[i] = 0;
        kept += keep[i];
    }
    return kept;
}

/* The sum in double of e[i0 .. i1): lane l adding the ids = l mod
 * DRAW_LANES in order (independent lanes, so the compiler may vectorize
 * without reordering any sum), then the lanes as a fixed tree. */
static double block_sum(const float *e, int i0, int i1)
{
    double a[DRAW_LANES] = { 0 };
    int i = i0;
    for (; i + DRAW_LANES <= i1; i += DRAW_LANES)
        for (int l = 0; l < DRAW_LANES; l++)
            a[l] += (double)e[i + l];
    for (int l = 0; i < i1; i++, l++)
        a[l] += (double)e[i];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* One past the last id of block b of the draw. */
static int block_end(int b, int v)
{
    return (b + 1) * DRAW_BLOCK < v ? (b + 1) * DRAW_BLOCK : v;
}

/* The id drawn with weights e[0 .. v) (>= 0) by u in [0, 1): the total is
 * the sum of the blocks' sums in order (*total), the target u * total is
 * found block by block (their sums, then the ids of the block it falls in
 * one by one), so the draw reads each weight about once and the long
 * dependent chain of a sum in order is V / DRAW_BLOCK additions instead
 * of V.  `last`: the id when rounding leaves the target past every
 * block (the last one of positive weight). */
int32_t pt__sample_draw(const float *e, int v, double u, int32_t last, double *bs, double *total)
{
    const int nb = (v + DRAW_BLOCK - 1) / DRAW_BLOCK;
    double t = 0.0;
    for (int b = 0; b < nb; b++) {
        bs[b] = block_sum(e, b * DRAW_BLOCK, block_end(b, v));
        t += bs[b];
    }
    *total = t;
    const double target = u * t;
    double acc = 0.0;
    for (int b = 0; b < nb; b++) {
        if (!(target < acc + bs[b])) {
            acc += bs[b];
            continue;
        }
        for (int i = b * DRAW_BLOCK; i < block_end(b, v); i++) {
            acc += (double)e[i];
            if (target < acc && e[i] > 0.0f)
                return i;
        }
        /* rounding put the target past this block's ids: the next block */
    }
    return last;
}

int32_t pt__sample_token(float *logprob, const float *logits, int v, const pt_sampler *s,
                        pt_rng *rng, pt_sample_scratch *sc)
{
    if (s->temperature == 0.0f) {
        int32_t best = 0;
        for (int i = 1; i < v; i++)
            if (logits[i] > logits[best])
                best = i;
        if (logprob) {
            float m = logits[best], sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int i = 0; i < v; i++)
                sum += pt__vexpf(logits[i] - m);
            *logprob = -logf(sum);
        }
        return best;
    }
    bool filtered = (s->top_k > 0 && s->top_k < v) || s->top_p < 1.0f || s->min_p > 0.0f;
    if (filtered)
        pt__sample_filter(sc->keep, logits, v, s, sc);
    else
        scale_exp(sc, logits, v, s->temperature);
    float *e = sc->e;
    int32_t last = v - 1;
    if (filtered) { /* the dropped ids weigh nothing (e is this draw's scratch) */
        for (int i = 0; i < v; i++)
            e[i] = sc->keep[i] ? e[i] : 0.0f;
        while (last > 0 && !sc->keep[last])
            last--;
    }
    double total;
    const int32_t tok = pt__sample_draw(e, v, pt__rng_uniform_double(rng), last, sc->bs, &total);
    /* The log-probability under the distribution drawn from: softmax(z)
     * over the kept ids, renormalised (vLLM's processed logprobs, TRL's
     * sampling logprobs); unfiltered, the whole log_softmax(z). */
    if (logprob)
        *logprob = filtered ? (float)((double)(sc->z[tok] - sc->zmax) - log(total))
                            : sc->z[tok] - sc->zmax - logf(sc->sum);
    return tok;
}
