/* Kernels: each backward against central finite differences of a random
 * projection loss L = sum(r * y) (computed in double), forward results against
 * plain double-precision formulas, and the tiled attention against a naive
 * full-softmax attention for many tile sizes, GQA ratios, segments and
 * windows. */
#include "testutil.h"

#include "core/core.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "kernels/vexp.h"

#include <math.h>

static void fill(float *x, size_t n, pt_rng *r, double sd, double mean)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(mean + sd * pt__rng_normal(r));
}

static double dot_d(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

/* A loss as a function of the current contents of some float buffer. */
typedef double (*loss_fn)(void *env);

/* Compare grad[i] with the central difference of f in x[i], for every i
 * (or every stride-th); returns the number of checked entries. */
static int fd_check(const char *what, float *x, const float *grad, size_t n, size_t stride,
                    loss_fn f, void *env, float eps, double atol, double rtol)
{
    int checked = 0;
    for (size_t i = 0; i < n; i += stride) {
        float save = x[i];
        x[i] = save + eps;
        double lp = f(env);
        x[i] = save - eps;
        double lm = f(env);
        x[i] = save;
        double fd = (lp - lm) / (2.0 * (double)eps);
        ck_assert_msg(fabs(fd - grad[i]) <= atol + rtol * fabs(fd),
                      "%s[%zu]: analytic %.7g vs finite difference %.7g", what, i,
                      (double)grad[i], fd);
        checked++;
    }
    return checked;
}

/* ---- RMSNorm -------------------------------------------------------------------- */

typedef struct rms_env {
    float *x, *w, *y, *r;
    size_t rows, d;
} rms_env;

static double rms_loss(void *e)
{
    rms_env *v = e;
    pt__rmsnorm_forward(v->y, NULL, v->x, v->w, v->rows, v->d, 1e-5f);
    return dot_d(v->y, v->r, v->rows * v->d);
}

START_TEST(test_rmsnorm)
{
    pt_rng rng;
    pt__rng_seed(&rng, 1);
    enum { R = 5, D = 37 };
    float x[R * D], w[D], y[R * D], r[R * D], rstd[R], dx[R * D], dw[D];
    fill(x, R * D, &rng, 1.0, 0.3);
    fill(w, D, &rng, 0.3, 1.0);
    fill(r, R * D, &rng, 1.0, 0.0);
    pt__rmsnorm_forward(y, rstd, x, w, R, D, 1e-5f);
    /* forward against the formula in double */
    for (int i = 0; i < R; i++) {
        double ss = 0;
        for (int j = 0; j < D; j++)
            ss += (double)x[i * D + j] * x[i * D + j];
        double rs = 1.0 / sqrt(ss / D + 1e-5);
        ck_assert(fabs(rstd[i] - rs) < 1e-5 * rs);
        for (int j = 0; j < D; j++)
            ck_assert(fabs(y[i * D + j] - x[i * D + j] * rs * w[j]) < 1e-5);
    }
    for (int j = 0; j < D; j++)
        dw[j] = 0.5f; /* accumulates */
    pt__rmsnorm_backward(dx, dw, r, x, w, rstd, R, D, false);
    for (int j = 0; j < D; j++)
        dw[j] -= 0.5f;
    rms_env env = { x, w, y, r, R, D };
    fd_check("rmsnorm dx", x, dx, R * D, 1, rms_loss, &env, 1e-2f, 2e-4, 1e-2);
    fd_check("rmsnorm dw", w, dw, D, 1, rms_loss, &env, 1e-2f, 2e-4, 1e-2);
    /* accumulate_dx adds, and dx may alias dy */
    float dx2[R * D];
    memcpy(dx2, r, sizeof dx2);
    pt__rmsnorm_backward(dx2, NULL, dx2, x, w, rstd, R, D, false);
    for (int i = 0; i < R * D; i++)
        ck_assert_float_eq(dx2[i], dx[i]);
    for (int i = 0; i < R * D; i++)
        dx2[i] = 1.0f;
    pt__rmsnorm_backward(dx2, NULL, r, x, w, rstd, R, D, true);
    for (int i = 0; i < R * D; i++)
        ck_assert(fabsf(dx2[i] - (1.0f + dx[i])) < 1e-5f);
}
END_TEST

/* ---- RoPE ------------------------------------------------------------------------- */

typedef struct rope_env {
    float *x, *y, *r, *c, *s;
    size_t n, ld;
    int nh, hd;
} rope_env;

static double rope_loss(void *e)
{
    rope_env *v = e;
    memcpy(v->y, v->x, v->n * v->ld * sizeof(float));
    pt__rope_apply(v->y, v->ld, v->n, v->nh, v->hd, v->c, v->s, false);
    return dot_d(v->y, v->r, v->n * v->ld);
}

START_TEST(test_rope)
{
    enum { N = 6, NH = 3, HD = 8, LD = NH * HD };
    pt_rng rng;
    pt__rng_seed(&rng, 2);
    float inv[HD / 2], c[N * HD / 2], s[N * HD / 2], x[N * LD], y[N * LD], r[N * LD], g[N * LD];
    int32_t pos[N] = { 0, 1, 2, 7, 100, 3 };
    pt__rope_inv_freq(inv, HD, 10000.0, 0, 0, 0, 0, 0);
    for (int j = 0; j < HD / 2; j++)
        ck_assert(fabs(inv[j] - pow(10000.0, -2.0 * j / HD)) < 1e-6 * inv[j]);
    pt__rope_table(c, s, pos, N, inv, HD);
    fill(x, N * LD, &rng, 1.0, 0.0);
    fill(r, N * LD, &rng, 1.0, 0.0);
    memcpy(y, x, sizeof y);
    pt__rope_apply(y, LD, N, NH, HD, c, s, false);
    /* rotate_half convention: pairs (j, j + hd/2) */
    for (int t = 0; t < N; t++)
        for (int h = 0; h < NH; h++)
            for (int j = 0; j < HD / 2; j++) {
                double a = pos[t] * pow(10000.0, -2.0 * j / HD);
                double x1 = x[t * LD + h * HD + j], x2 = x[t * LD + h * HD + j + HD / 2];
                ck_assert(fabs(y[t * LD + h * HD + j] - (x1 * cos(a) - x2 * sin(a))) < 1e-4);
                ck_assert(fabs(y[t * LD + h * HD + j + HD / 2] - (x2 * cos(a) + x1 * sin(a))) < 1e-4);
            }
    /* the inverse undoes the rotation */
    pt__rope_apply(y, LD, N, NH, HD, c, s, true);
    for (int i = 0; i < N * LD; i++)
        ck_assert(fabsf(y[i] - x[i]) < 1e-5f);
    /* backward = inverse rotation of the upstream gradient */
    memcpy(g, r, sizeof g);
    pt__rope_apply(g, LD, N, NH, HD, c, s, true);
    rope_env env = { x, y, r, c, s, N, LD, NH, HD };
    fd_check("rope dx", x, g, N * LD, 1, rope_loss, &env, 1e-2f, 1e-4, 1e-3);
}
END_TEST

START_TEST(test_rope_scaling)
{
    /* Llama-3.1 style: factor 8, low 1, high 4, original 8192, theta 500000. */
    enum { HD = 64 };
    float inv[HD / 2], lin[HD / 2];
    pt__rope_inv_freq(inv, HD, 500000.0, 1, 8.0, 1.0, 4.0, 8192);
    int scaled = 0, kept = 0, smooth = 0;
    for (int j = 0; j < HD / 2; j++) {
        double f = 1.0 / pow(500000.0, (double)(float)(2.0 * j / HD));
        double wl = 2 * M_PI / f;
        double want;
        if (wl < 8192.0 / 4.0) {
            want = f;
            kept++;
        } else if (wl > 8192.0) {
            want = f / 8.0;
            scaled++;
        } else {
            double sm = (8192.0 / wl - 1.0) / (4.0 - 1.0);
            want = (1 - sm) * f / 8.0 + sm * f;
            smooth++;
        }
        ck_assert_msg(fabs(inv[j] - want) <= 1e-6 * want, "j=%d %g vs %g", j, (double)inv[j], want);
    }
    ck_assert(scaled > 0 && kept > 0 && smooth > 0); /* all three regimes exercised */
    pt__rope_inv_freq(lin, HD, 10000.0, 2, 4.0, 0, 0, 0);
    for (int j = 0; j < HD / 2; j++)
        ck_assert(fabs(lin[j] - pow(10000.0, -(double)(float)(2.0 * j / HD)) / 4.0) < 1e-6 * lin[j]);
}
END_TEST

/* ---- SwiGLU ---------------------------------------------------------------------------- */

typedef struct sw_env {
    float *gu, *h, *r;
    size_t rows, n;
} sw_env;

static double sw_loss(void *e)
{
    sw_env *v = e;
    pt__swiglu_forward(v->h, v->gu, v->gu + v->n, v->rows, v->n, 2 * v->n);
    return dot_d(v->h, v->r, v->rows * v->n);
}

START_TEST(test_swiglu)
{
    /* gate|up as the two halves of each row of a [R, 2C] buffer */
    enum { R = 5, C = 11 };
    pt_rng rng;
    pt__rng_seed(&rng, 3);
    float gu[R * 2 * C], h[R * C], r[R * C], dgu[R * 2 * C];
    fill(gu, R * 2 * C, &rng, 2.0, 0.0);
    fill(r, R * C, &rng, 1.0, 0.0);
    pt__swiglu_forward(h, gu, gu + C, R, C, 2 * C);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            double g = gu[i * 2 * C + j], u = gu[i * 2 * C + C + j];
            ck_assert(fabs(h[i * C + j] - g / (1 + exp(-g)) * u) < 1e-5);
        }
    pt__swiglu_backward(dgu, dgu + C, r, gu, gu + C, R, C, 2 * C);
    sw_env env = { gu, h, r, R, C };
    fd_check("swiglu dgate|dup", gu, dgu, R * 2 * C, 1, sw_loss, &env, 1e-2f, 2e-4, 1e-2);
}
END_TEST

/* ---- per-head RMSNorm (qk-norm), strided ---------------------------------------------- */

typedef struct hn_env {
    float *x, *w, *y, *r, *rstd;
    size_t n;
    int nh, hd;
} hn_env;

static double hn_loss(void *e)
{
    hn_env *v = e;
    /* x has row stride nh*hd + 3, y row stride nh*hd + 5 */
    pt__headnorm_forward(v->y, (size_t)v->nh * v->hd + 5, v->rstd, v->x, (size_t)v->nh * v->hd + 3,
                        v->w, v->n, v->nh, v->hd, 1e-6f);
    return dot_d(v->y, v->r, v->n * ((size_t)v->nh * v->hd + 5));
}

START_TEST(test_headnorm)
{
    enum { N = 4, NH = 3, HD = 6, LX = NH * HD + 3, LY = NH * HD + 5 };
    pt_rng rng;
    pt__rng_seed(&rng, 9);
    float x[N * LX], w[HD], y[N * LY], r[N * LY], rstd[N * NH], dx[N * LY], dw[HD] = { 0 };
    fill(x, N * LX, &rng, 1.0, 0.2);
    fill(w, HD, &rng, 0.3, 1.0);
    fill(r, N * LY, &rng, 1.0, 0.0);
    for (int t = 0; t < N; t++)
        for (int j = NH * HD; j < LY; j++)
            r[t * LY + j] = 0.0f; /* padding columns are not outputs */
    hn_env env = { x, w, y, r, rstd, N, NH, HD };
    hn_loss(&env);
    /* forward: the same as a plain RMSNorm of each head vector */
    float ref[HD], rr;
    pt__rmsnorm_forward(ref, &rr, x + 2 * LX + 1 * HD, w, 1, HD, 1e-6f);
    for (int j = 0; j < HD; j++)
        ck_assert(fabsf(y[2 * LY + HD + j] - ref[j]) < 1e-6f);
    ck_assert(fabsf(rstd[2 * NH + 1] - rr) < 1e-6f);
    /* backward in place (dx aliases dy, stride LY); x stride LX */
    memcpy(dx, r, sizeof dx);
    pt__headnorm_backward(dx, LY, dw, dx, LY, x, LX, w, rstd, N, NH, HD);
    float gx[N * LX];
    memset(gx, 0, sizeof gx);
    for (int t = 0; t < N; t++)
        memcpy(gx + t * LX, dx + t * LY, NH * HD * sizeof(float));
    fd_check("headnorm dx", x, gx, N * LX, 1, hn_loss, &env, 1e-2f, 2e-4, 1e-2);
    fd_check("headnorm dw", w, dw, HD, 1, hn_loss, &env, 1e-2f, 2e-4, 1e-2);
}
END_TEST

/* ---- log-softmax / cross-entropy ---------------------------------------------------------- */

typedef struct ls_env {
    float *x, *lse, *lp, *r;
    int32_t *t;
    size_t rows, v;
} ls_env;

static double ls_loss(void *e)
{
    ls_env *v = e;
    pt__logsoftmax_rows(v->lse, v->lp, v->x, v->t, v->rows, v->v);
    return dot_d(v->lp, v->r, v->rows);
}

START_TEST(test_logsoftmax)
{
    enum { R = 6, V = 29 };
    pt_rng rng;
    pt__rng_seed(&rng, 4);
    float x[R * V], lse[R], lp[R], r[R], g[R * V];
    int32_t t[R] = { 3, -1, 0, 28, 7, 7 };
    fill(x, R * V, &rng, 3.0, 50.0); /* large offset: needs the max shift */
    fill(r, R, &rng, 1.0, 0.0);
    pt__logsoftmax_rows(lse, lp, x, t, R, V);
    for (int i = 0; i < R; i++) {
        double m = -1e300, s = 0;
        for (int j = 0; j < V; j++)
            m = fmax(m, x[i * V + j]);
        for (int j = 0; j < V; j++)
            s += exp(x[i * V + j] - m);
        double l = m + log(s);
        ck_assert(fabs(lse[i] - l) < 1e-4);
        ck_assert(fabs(lp[i] - (t[i] >= 0 ? x[i * V + t[i]] - l : 0.0)) < 1e-4);
    }
    memcpy(g, x, sizeof g);
    pt__logsoftmax_backward_rows(g, lse, r, t, R, V);
    for (int j = 0; j < V; j++)
        ck_assert_float_eq(g[1 * V + j], 0.0f); /* no target: no gradient */
    ls_env env = { x, lse, lp, r, t, R, V };
    fd_check("logsoftmax dlogits", x, g, R * V, 1, ls_loss, &env, 2e-2f, 5e-4, 1e-2);
}
END_TEST

START_TEST(test_embedding_colsum)
{
    enum { N = 7, D = 70, VOC = 5 };
    pt_rng rng;
    pt__rng_seed(&rng, 5);
    float tab[VOC * D], out[N * D], dt[VOC * D], want[VOC * D], db[D];
    int32_t ids[N] = { 4, 0, 4, 2, 2, 2, 1 };
    fill(tab, VOC * D, &rng, 1.0, 0.0);
    pt__embedding_forward(out, tab, ids, N, D);
    for (int t = 0; t < N; t++)
        ck_assert_mem_eq(out + t * D, tab + ids[t] * D, D * sizeof(float));
    for (int i = 0; i < VOC * D; i++)
        dt[i] = want[i] = 1.0f;
    for (int t = 0; t < N; t++)
        for (int j = 0; j < D; j++)
            want[ids[t] * D + j] += out[t * D + j];
    pt__embedding_backward(dt, out, ids, N, D);
    for (int i = 0; i < VOC * D; i++)
        ck_assert(fabsf(dt[i] - want[i]) < 1e-5f);
    for (int j = 0; j < D; j++)
        db[j] = 2.0f;
    pt__colsum_add(db, out, N, D - 3, D);
    for (int j = 0; j < D - 3; j++) {
        double s = 2.0;
        for (int t = 0; t < N; t++)
            s += out[t * D + j];
        ck_assert(fabs(db[j] - s) < 1e-4);
    }
    ck_assert_float_eq(db[D - 1], 2.0f);
}
END_TEST

/* ---- attention ------------------------------------------------------------------------------ */

/* Naive attention in double: full score rows, softmax, weighted sum. */
static void naive_attention(double *out, double *lse, const float *q, const float *k,
                            const float *v, const pt_attn_shape *s)
{
    int B = s->batch, T = s->seq, nh = s->nh, nkv = s->nkv, hd = s->hd, grp = nh / nkv;
    size_t ldq = (size_t)nh * hd, ldk = (size_t)nkv * hd;
    double *sc = malloc(sizeof(double) * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < T; i++) {
                double m = -INFINITY;
                for (int j = 0; j < T; j++) {
                    bool ok = j <= i && (!s->seg || s->seg[b * T + i] == s->seg[b * T + j]) &&
                              (s->window == 0 || i - j < s->window);
                    double d = 0;
                    for (int x = 0; x < hd; x++)
                        d += (double)q[(b * T + i) * ldq + h * hd + x] *
                             k[(b * T + j) * ldk + (h / grp) * hd + x];
                    sc[j] = ok ? d * s->scale : -INFINITY;
                    m = fmax(m, sc[j]);
                }
                double z = 0;
                for (int j = 0; j < T; j++)
                    z += sc[j] == -INFINITY ? 0 : exp(sc[j] - m);
                lse[(b * nh + h) * T + i] = m + log(z);
                for (int x = 0; x < hd; x++) {
                    double o = 0;
                    for (int j = 0; j < T; j++)
                        if (sc[j] != -INFINITY)
                            o += exp(sc[j] - m) / z * v[(b * T + j) * ldk + (h / grp) * hd + x];
                    out[(b * T + i) * ldq + h * hd + x] = o;
                }
            }
    free(sc);
}

typedef struct att_env {
    float *q, *k, *v, *out, *lse, *r, *scratch;
    pt_attn_shape s;
} att_env;

static double att_loss(void *e)
{
    att_env *a = e;
    pt__attention_forward(a->out, a->lse, a->q, a->k, a->v, &a->s, a->scratch);
    return dot_d(a->out, a->r, (size_t)a->s.batch * a->s.seq * a->s.nh * a->s.hd);
}

static void attention_case(int B, int T, int nh, int nkv, int hd, bool segs, int window,
                           const int tiles[][2], int ntiles, bool check_grad)
{
    pt_rng rng;
    pt__rng_seed(&rng, (uint64_t)(B * 1000 + T * 10 + nh + nkv + window));
    size_t nq = (size_t)B * T * nh * hd, nk = (size_t)B * T * nkv * hd;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *out = malloc(nq * 4);
    float *r = malloc(nq * 4), *dq = malloc(nq * 4), *dk = malloc(nk * 4), *dv = malloc(nk * 4);
    float *lse = malloc((size_t)B * nh * T * 4);
    double *ref = malloc(nq * 8), *rlse = malloc((size_t)B * nh * T * 8);
    int32_t *seg = malloc((size_t)B * T * 4);
    fill(q, nq, &rng, 1.0, 0.0);
    fill(k, nk, &rng, 1.0, 0.0);
    fill(v, nk, &rng, 1.0, 0.0);
    fill(r, nq, &rng, 1.0, 0.0);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            seg[b * T + t] = (t * 3) / T + b; /* three segments per row */
    pt_attn_shape s = { .batch = B, .seq = T, .nh = nh, .nkv = nkv, .hd = hd,
                        .scale = (float)(1.0 / sqrt(hd)), .seg = segs ? seg : NULL,
                        .window = window };
    naive_attention(ref, rlse, q, k, v, &s);
    for (int ti = 0; ti < ntiles; ti++) {
        s.tile_q = tiles[ti][0];
        s.tile_k = tiles[ti][1];
        float *scratch = malloc(pt__attention_scratch_floats(&s, pt_get_num_threads()) * 4);
        pt__attention_forward(out, lse, q, k, v, &s, scratch);
        for (size_t i = 0; i < nq; i++)
            ck_assert_msg(fabs(out[i] - ref[i]) < 2e-5, "tiles %dx%d out[%zu] %g vs %g", s.tile_q,
                          s.tile_k, i, (double)out[i], ref[i]);
        for (size_t i = 0; i < (size_t)B * nh * T; i++)
            ck_assert(fabs(lse[i] - rlse[i]) < 2e-5);
        if (check_grad) {
            pt__attention_backward(dq, dk, dv, r, q, k, v, out, lse, &s, scratch);
            att_env env = { q, k, v, out, lse, r, scratch, s };
            fd_check("attention dq", q, dq, nq, 1, att_loss, &env, 1e-2f, 3e-4, 1e-2);
            fd_check("attention dk", k, dk, nk, 1, att_loss, &env, 1e-2f, 3e-4, 1e-2);
            fd_check("attention dv", v, dv, nk, 1, att_loss, &env, 1e-2f, 3e-4, 1e-2);
        }
        free(scratch);
    }
    free(q), free(k), free(v), free(out), free(r), free(dq), free(dk), free(dv), free(lse);
    free(ref), free(rlse), free(seg);
}

START_TEST(test_attention_tiles_match_naive)
{
    static const int tiles[][2] = { { 0, 0 }, { 1, 1 }, { 2, 3 }, { 5, 2 }, { 4, 4 }, { 7, 16 } };
    attention_case(2, 13, 4, 2, 8, false, 0, tiles, 6, false);
    attention_case(1, 17, 6, 2, 4, true, 0, tiles, 6, false);
    attention_case(2, 11, 2, 2, 6, false, 4, tiles, 6, false);
    attention_case(2, 40, 4, 2, 8, true, 6, tiles, 6, false); /* window inside segments */
    attention_case(1, 150, 2, 1, 16, false, 37, tiles, 1, false); /* window across tiles */
    attention_case(1, 150, 2, 1, 16, true, 0, tiles, 1, false); /* several default tiles */
    attention_case(1, 200, 2, 1, 8, false, 0, tiles, 1, false);
}
END_TEST

/* Large enough to be threaded: one thread and two give the same bits
 * (each task owns its outputs), forward and backward; and the forward
 * matches the naive reference. */
START_TEST(test_attention_threads)
{
    static const int tiles[][2] = { { 0, 0 } };
    attention_case(2, 160, 4, 2, 32, true, 0, tiles, 1, false);
    enum { B = 2, T = 160, NH = 4, NKV = 2, HD = 32 };
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    pt_rng rng;
    pt__rng_seed(&rng, 77);
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *d = malloc(nq * 4);
    float *o[2], *l[2], *dq[2], *dk[2], *dv[2];
    fill(q, nq, &rng, 1.0, 0.0);
    fill(k, nk, &rng, 1.0, 0.0);
    fill(v, nk, &rng, 1.0, 0.0);
    fill(d, nq, &rng, 1.0, 0.0);
    pt_attn_shape s = { .batch = B, .seq = T, .nh = NH, .nkv = NKV, .hd = HD,
                        .scale = (float)(1.0 / sqrt(HD)) };
    float *scratch = malloc(pt__attention_scratch_floats(&s, 2) * 4);
    int nt0 = pt_get_num_threads();
    for (int r = 0; r < 2; r++) {
        o[r] = malloc(nq * 4), l[r] = malloc((size_t)B * NH * T * 4);
        dq[r] = malloc(nq * 4), dk[r] = malloc(nk * 4), dv[r] = malloc(nk * 4);
        ck_assert_ok(pt_set_num_threads(r + 1));
        pt__attention_forward(o[r], l[r], q, k, v, &s, scratch);
        pt__attention_backward(dq[r], dk[r], dv[r], d, q, k, v, o[r], l[r], &s, scratch);
    }
    pt_set_num_threads(nt0);
    ck_assert_mem_eq(o[0], o[1], nq * 4);
    ck_assert_mem_eq(l[0], l[1], (size_t)B * NH * T * 4);
    ck_assert_mem_eq(dq[0], dq[1], nq * 4);
    ck_assert_mem_eq(dk[0], dk[1], nk * 4);
    ck_assert_mem_eq(dv[0], dv[1], nk * 4);
    for (int r = 0; r < 2; r++)
        free(o[r]), free(l[r]), free(dq[r]), free(dk[r]), free(dv[r]);
    free(q), free(k), free(v), free(d), free(scratch);
}
END_TEST

START_TEST(test_attention_backward_fd)
{
    static const int tiles[][2] = { { 0, 0 }, { 3, 2 } };
    attention_case(2, 6, 4, 2, 4, false, 0, tiles, 2, true);  /* GQA 2:1 */
    attention_case(1, 9, 3, 1, 4, true, 0, tiles, 2, true);   /* MQA + segments */
    attention_case(1, 7, 2, 2, 4, false, 3, tiles, 2, true);  /* window */
    attention_case(1, 12, 4, 2, 4, true, 3, tiles, 2, true);  /* window + segments + GQA */
}
END_TEST

/* Keys outside every query of a tile's window are skipped, not masked: with
 * key 0's k and v NaN, a masked product would still give 0 * NaN = NaN in
 * every row, but the rows whose tiles start at or after the window (i0 >=
 * W) never read key 0, in the forward and the backward. */
static void window_skip_case(int T, int W, int tq, int tk)
{
    enum { HD = 4 };
    size_t n = (size_t)T * HD;
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *o = malloc(n * 4);
    float *d = malloc(n * 4), *dq = malloc(n * 4), *dk = malloc(n * 4), *dv = malloc(n * 4);
    float *lse = malloc((size_t)T * 4);
    pt_rng rng;
    pt__rng_seed(&rng, 5);
    fill(q, n, &rng, 1.0, 0.0);
    fill(k, n, &rng, 1.0, 0.0);
    fill(v, n, &rng, 1.0, 0.0);
    fill(d, n, &rng, 1.0, 0.0);
    for (int x = 0; x < HD; x++)
        k[x] = v[x] = NAN;
    pt_attn_shape s = { .batch = 1, .seq = T, .nh = 1, .nkv = 1, .hd = HD,
                        .scale = 0.5f, .window = W, .tile_q = tq, .tile_k = tk };
    float *scratch = malloc(pt__attention_scratch_floats(&s, pt_get_num_threads()) * 4);
    pt__attention_forward(o, lse, q, k, v, &s, scratch);
    pt__attention_backward(dq, dk, dv, d, q, k, v, o, lse, &s, scratch);
    int q0 = tq > 0 ? tq : 64; /* the first row whose tile starts at or after W */
    while (q0 < W)
        q0 += tq > 0 ? tq : 64;
    ck_assert_msg(isnan(o[0]), "row 0 sees key 0");
    for (size_t i = (size_t)q0 * HD; i < n; i++)
        ck_assert_msg(isfinite(o[i]) && isfinite(dq[i]) && isfinite(dk[i]) && isfinite(dv[i]),
                      "T %d W %d tiles %dx%d: element %zu (row %zu) read key 0", T, W, tq, tk, i,
                      i / HD);
    free(q), free(k), free(v), free(o), free(d), free(dq), free(dk), free(dv), free(lse);
    free(scratch);
}

START_TEST(test_attention_window_skips_blocks)
{
    window_skip_case(64, 8, 8, 8);
    window_skip_case(50, 5, 4, 3);
    window_skip_case(300, 8, 0, 0); /* default 64 x 128 tiles */
}
END_TEST

/* q|k|v as column blocks of one buffer, the output with its own stride: the
 * same numbers as the packed layout. */
START_TEST(test_attention_fused_layout)
{
    enum { B = 2, T = 9, NH = 4, NKV = 2, HD = 4, Q = NH * HD, KV = NKV * HD, L = Q + 2 * KV };
    pt_rng rng;
    pt__rng_seed(&rng, 12);
    static float qkv[B * T * L], q[B * T * Q], k[B * T * KV], v[B * T * KV], o1[B * T * Q],
        o2[B * T * (Q + 1)], l1[B * NH * T], l2[B * NH * T], d1[B * T * Q], d2[B * T * (Q + 1)];
    static float dq1[B * T * Q], dk1[B * T * KV], dv1[B * T * KV], dqkv[B * T * L];
    fill(qkv, B * T * L, &rng, 1.0, 0.0);
    fill(d1, B * T * Q, &rng, 1.0, 0.0);
    for (int t = 0; t < B * T; t++) {
        memcpy(q + t * Q, qkv + t * L, Q * 4);
        memcpy(k + t * KV, qkv + t * L + Q, KV * 4);
        memcpy(v + t * KV, qkv + t * L + Q + KV, KV * 4);
        memcpy(d2 + t * (Q + 1), d1 + t * Q, Q * 4);
    }
    pt_attn_shape s = { .batch = B, .seq = T, .nh = NH, .nkv = NKV, .hd = HD, .scale = 0.5f,
                        .tile_q = 4, .tile_k = 3 };
    float *scratch = malloc(pt__attention_scratch_floats(&s, pt_get_num_threads()) * 4);
    pt__attention_forward(o1, l1, q, k, v, &s, scratch);
    pt__attention_backward(dq1, dk1, dv1, d1, q, k, v, o1, l1, &s, scratch);
    pt_attn_shape f = s;
    f.ldq = f.ldkv = L;
    f.ldo = Q + 1;
    pt__attention_forward(o2, l2, qkv, qkv + Q, qkv + Q + KV, &f, scratch);
    pt__attention_backward(dqkv, dqkv + Q, dqkv + Q + KV, d2, qkv, qkv + Q, qkv + Q + KV, o2, l2,
                          &f, scratch);
    ck_assert_mem_eq(l1, l2, sizeof l1);
    for (int t = 0; t < B * T; t++) {
        ck_assert_mem_eq(o1 + t * Q, o2 + t * (Q + 1), Q * 4);
        ck_assert_mem_eq(dq1 + t * Q, dqkv + t * L, Q * 4);
        ck_assert_mem_eq(dk1 + t * KV, dqkv + t * L + Q, KV * 4);
        ck_assert_mem_eq(dv1 + t * KV, dqkv + t * L + Q + KV, KV * 4);
    }
    free(scratch);
}
END_TEST

START_TEST(test_vexp)
{
    double worst = 0;
    static float xs[200000], ys[200000];
    for (int i = 0; i < 200000; i++)
        xs[i] = -87.0f + 175.0f * (float)i / 200000.0f;
#pragma omp simd
    for (int i = 0; i < 200000; i++)
        ys[i] = pt__vexpf(xs[i]);
    for (int i = 0; i < 200000; i++) {
        double e = exp((double)xs[i]);
        worst = fmax(worst, fabs(ys[i] - e) / e);
    }
    ck_assert_msg(worst < 3e-7, "pt__vexpf worst relative error %g", worst);
    ck_assert_float_eq(pt__vexpf(0.0f), 1.0f);
    ck_assert_float_eq(pt__vexpf(-INFINITY), 0.0f);
    ck_assert_float_eq(pt__vexpf(-1000.0f), 0.0f);
    ck_assert(isfinite(pt__vexpf(1000.0f)) && pt__vexpf(1000.0f) > 1e38f);
    ck_assert(isnan(pt__vexpf(NAN)));
}
END_TEST

/* Decoding attention (pt__attn_decode): the group's heads against a double
 * softmax(K q / sqrt(hd)) V, and the vector path bit-identical to the plain
 * C code it documents, over head sizes with and without a multiple of 8
 * (the plain code's own case), 1 to 5 heads a group and 1 to 77 keys (the
 * last block of 8 keys partial). */
START_TEST(test_attn_decode)
{
    static const size_t hds[] = { 8, 12, 64, 80, 128 }, lens[] = { 1, 7, 8, 9, 77 };
    pt_rng r;
    pt__rng_seed(&r, 31);
    int checked = 0;
    /* every path the CPU runs (avx512 and above: the values of up to 4
     * heads at once when hd is a multiple of 64) */
    for (int l = 0; l < PT_CPU_LEVELS; l++) {
        if (l > (int)pt__cpu_detected()) {
            printf("test_attn_decode: path %s skipped (not on this CPU)\n",
                   pt__cpu_level_str((pt_cpu_level)l));
            continue;
        }
        ck_assert_ok(pt_set_cpu_path(pt__cpu_level_str((pt_cpu_level)l)));
        printf("test_attn_decode: path %s\n", pt_cpu_path());
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
            for (int group = 1; group <= 5; group++)
                for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                    const size_t hd = hds[hi], len = lens[li], G = (size_t)group;
                    float *q = malloc(G * hd * sizeof(float)), *K = malloc(len * hd * sizeof(float));
                    float *V = malloc(len * hd * sizeof(float)), *S = malloc(G * len * sizeof(float));
                    float *o = malloc(G * hd * sizeof(float)), *o2 = malloc(G * hd * sizeof(float));
                    fill(q, G * hd, &r, 1.0, 0.0);
                    fill(K, len * hd, &r, 1.0, 0.0);
                    fill(V, len * hd, &r, 1.0, 0.5);
                    const float scale = 1.0f / sqrtf((float)hd);
                    pt__attn_decode(o, q, group, hd, K, V, len, scale, S);
                    pt__attn_decode_ref(o2, q, group, hd, K, V, len, scale, S);
                    ck_assert_msg(memcmp(o, o2, G * hd * sizeof(float)) == 0,
                                  "pt__attn_decode hd=%zu group=%d len=%zu differs from its plain C code",
                                  hd, group, len);
                    /* a BF16 cache: the FP32 kernel's bits on the widened values */
                    uint16_t *K16 = malloc(len * hd * 2), *V16 = malloc(len * hd * 2);
                    float *Kw = malloc(len * hd * sizeof(float)), *Vw = malloc(len * hd * sizeof(float));
                    float *o3 = malloc(G * hd * sizeof(float));
                    for (size_t i = 0; i < len * hd; i++) {
                        K16[i] = pt__f32_to_bf16(K[i]);
                        V16[i] = pt__f32_to_bf16(V[i]);
                        Kw[i] = pt__bf16_to_f32(K16[i]);
                        Vw[i] = pt__bf16_to_f32(V16[i]);
                    }
                    pt__attn_decode(o3, q, group, hd, Kw, Vw, len, scale, S);
                    pt__attn_decode_bf16(o2, q, group, hd, K16, V16, len, scale, S);
                    ck_assert_msg(memcmp(o2, o3, G * hd * sizeof(float)) == 0,
                                  "pt__attn_decode_bf16 hd=%zu group=%d len=%zu: not the FP32 kernel on "
                                  "the widened cache", hd, group, len);
                    pt__attn_decode_bf16_ref(o2, q, group, hd, K16, V16, len, scale, S);
                    ck_assert_msg(memcmp(o2, o3, G * hd * sizeof(float)) == 0,
                                  "pt__attn_decode_bf16_ref hd=%zu group=%d len=%zu differs", hd, group,
                                  len);
                    free(K16); free(V16); free(Kw); free(Vw); free(o3);
                    for (size_t h = 0; h < G; h++) {
                        double sc[77], mx = -INFINITY, sum = 0.0;
                        for (size_t j = 0; j < len; j++) {
                            sc[j] = dot_d(K + j * hd, q + h * hd, hd) / sqrt((double)hd);
                            mx = fmax(mx, sc[j]);
                        }
                        for (size_t j = 0; j < len; j++)
                            sum += (sc[j] = exp(sc[j] - mx));
                        for (size_t d = 0; d < hd; d++) {
                            double want = 0.0;
                            for (size_t j = 0; j < len; j++)
                                want += sc[j] / sum * (double)V[j * hd + d];
                            ck_assert_msg(fabs(o[h * hd + d] - want) <= 2e-6 + 2e-6 * fabs(want),
                                          "pt__attn_decode hd=%zu group=%d len=%zu head %zu [%zu]: %.8g vs %.8g",
                                          hd, group, len, h, d, (double)o[h * hd + d], want);
                            checked++;
                        }
                    }
                    free(q); free(K); free(V); free(S); free(o); free(o2);
                }
    }
    ck_assert_ok(pt_set_cpu_path(NULL));
    ck_assert_int_gt(checked, 0);
}
END_TEST

static Suite *ops_suite(void)
{
    Suite *s = suite_create("kernels_ops");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_rmsnorm);
    tcase_add_test(tc, test_rope);
    tcase_add_test(tc, test_rope_scaling);
    tcase_add_test(tc, test_swiglu);
    tcase_add_test(tc, test_headnorm);
    tcase_add_test(tc, test_vexp);
    tcase_add_test(tc, test_attention_fused_layout);
    tcase_add_test(tc, test_logsoftmax);
    tcase_add_test(tc, test_embedding_colsum);
    tcase_add_test(tc, test_attention_tiles_match_naive);
    tcase_add_test(tc, test_attention_backward_fd);
    tcase_add_test(tc, test_attention_window_skips_blocks);
    tcase_add_test(tc, test_attention_threads);
    tcase_add_test(tc, test_attn_decode);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return pt_test_run(ops_suite());
}
