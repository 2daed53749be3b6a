/* llama3 rope scaling from a GGUF file's rope_freqs.weight (gguf_import.h).
 *
 * The converter stores, per frequency j, the factor r_j the llama3 formula
 * divides the default inverse frequency by: 1 above the high-frequency
 * boundary, `factor` below the low-frequency one, and between them
 * 1 / r_j = (1 - s_j) / factor + s_j with s_j affine in x_j = 1 / wavelength_j.
 * The factors depend on low_freq_factor, high_freq_factor and the original
 * context only through low / original and high / original, so the original
 * context is taken from rope.scaling.original_context_length or the
 * converter's default 8192, and the two boundaries from the line through
 * the points in between (or, with fewer than two of them, any boundaries
 * that classify the points alike).  The result is checked by recomputing the
 * factors with the library's llama3 formula. */
#include "core/core.h"
#include "kernels/ops.h"
#include "modelio/gguf_import.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RTOL 1e-5

typedef struct fit {
    double f, L, H;   /* factor, boundaries in x = 1 / wavelength */
} fit;

/* The boundaries from the factors r (n = head_dim / 2) and x. */
static bool fit_line(fit *o, const float *r, const double *x, int n)
{
    int a = 0, b = n;
    while (a < n && r[a] == 1.0f)
        a++;
    o->f = r[n - 1];
    while (b > a && r[b - 1] == r[n - 1])
        b--;
    /* ones [0, a), in between [a, b), plateau [b, n) */
    if (b - a >= 2) {
        double y0 = 1.0 / r[a], y1 = 1.0 / r[b - 1];
        double alpha = (y0 - y1) / (x[a] - x[b - 1]), beta = y0 - alpha * x[a];
        if (!(alpha != 0.0))
            return false;
        o->H = (1.0 - beta) / alpha;
        o->L = (1.0 / o->f - beta) / alpha;
    } else if (b - a == 1) {
        double H = a > 0 ? (x[a] + x[a - 1]) / 2 : 2 * x[a];
        double alpha = (1.0 - 1.0 / r[a]) / (H - x[a]);
        o->H = H;
        o->L = H - (1.0 - 1.0 / o->f) / alpha;
    } else if (a > 0) {
        o->L = x[a] + (x[a - 1] - x[a]) / 3;
        o->H = x[a] + 2 * (x[a - 1] - x[a]) / 3;
    } else {
        o->L = 2 * x[0];
        o->H = 4 * x[0];
    }
    return isfinite(o->L) && isfinite(o->H) && o->L > 0 && o->H > o->L;
}

/* Whether cfg's llama3 formula gives the factors r. */
static bool same_factors(const pt_model_config *c, const float *r, const float *f0, float *g, int n)
{
    pt__rope_inv_freq(g, c->head_dim, c->rope_theta, PT_ROPE_LLAMA3, c->rope_factor,
                     c->rope_low_freq_factor, c->rope_high_freq_factor,
                     c->rope_original_max_position_embeddings);
    for (int j = 0; j < n; j++) {
        double k = (double)f0[j] / (double)g[j];
        if (!(fabs(k - r[j]) <= RTOL * fabs((double)r[j])))
            return false;
    }
    return true;
}

static double round6(double v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.6g", v);
    return strtod(buf, NULL);
}

/* The config for fit o (rounded to 6 digits when that still fits). */
static bool apply_fit(pt_model_config *c, const fit *o, int old, const float *r, const float *f0,
                      float *g, int n)
{
    for (int pass = 0; pass < 2; pass++) {
        c->rope_type = PT_ROPE_LLAMA3;
        c->rope_original_max_position_embeddings = old;
        c->rope_factor = pass ? o->f : round6(o->f);
        c->rope_low_freq_factor = pass ? o->L * old : round6(o->L * old);
        c->rope_high_freq_factor = pass ? o->H * old : round6(o->H * old);
        if (c->rope_high_freq_factor > c->rope_low_freq_factor && same_factors(c, r, f0, g, n))
            return true;
    }
    return false;
}

static int original_context(const pt_gguf *g, const char *path, int *old)
{
    *old = 8192; /* convert_hf_to_gguf.py's default */
    for (size_t i = 0; i < pt__gguf_kv_count(g); i++) {
        const char *k = pt__gguf_kv_at(g, i)->key, *dot = strchr(k, '.');
        if (!dot || strcmp(dot, ".rope.scaling.original_context_length") != 0)
            continue;
        uint32_t v;
        int st = pt__gguf_get_u32(g, k, &v);
        if (st)
            return pt__err_prefix(st, "%s", path);
        if (v == 0 || v > (1u << 30))
            return pt__err(PT_EFORMAT, "%s: %s = %u is out of range", path, k, v);
        *old = (int)v;
    }
    return PT_OK;
}

static int fit_factors(pt_model_config *c, const float *r, float *f0, float *g, double *x, int n,
                       int old, const char *path)
{
    pt__rope_inv_freq(f0, c->head_dim, c->rope_theta, PT_ROPE_DEFAULT, 1.0, 0, 0, 0);
    bool ones = true;
    for (int j = 0; j < n; j++) {
        if (!(isfinite(r[j]) && r[j] > 0))
            return pt__err(PT_EFORMAT, "%s: rope_freqs.weight[%d] = %g is not a positive factor",
                          path, j, (double)r[j]);
        ones = ones && r[j] == 1.0f;
        x[j] = (double)f0[j] / (2.0 * M_PI);
    }
    if (ones)
        return PT_OK; /* no scaling */
    fit o;
    if (fit_line(&o, r, x, n) && apply_fit(c, &o, old, r, f0, g, n))
        return PT_OK;
    return pt__err(PT_EUNSUPPORTED, "%s: rope_freqs.weight: the %d per-frequency factors (%g .. %g) "
                  "are not those of llama3 rope scaling for this head size and rope.freq_base; "
                  "other per-frequency scalings cannot be loaded", path, n, (double)r[0],
                  (double)r[n - 1]);
}

int pt__gguf_rope_from_freqs(pt_model_config *cfg, const pt_gguf *g, const pt_gguf_tensor *t,
                            const char *path)
{
    int n = cfg->head_dim / 2, old;
    if (t->ndim != 1 || t->ne[0] != (uint64_t)n)
        return pt__err(PT_ESHAPE, "%s: tensor 'rope_freqs.weight' has %u dimensions and %llu "
                      "elements, the head size %d needs [%d]", path, t->ndim,
                      (unsigned long long)t->numel, cfg->head_dim, n);
    int st = original_context(g, path, &old);
    if (st)
        return st;
    float *r = pt__malloc_array((size_t)n * 3, sizeof(float));
    double *x = pt__malloc_array((size_t)n, sizeof(double));
    if (!r || !x)
        st = PT_ENOMEM;
    else if ((st = pt__gguf_read_f32(t, r, (size_t)n)))
        st = pt__err_prefix(st, "%s", path);
    else if ((st = pt__err_nonfinite(r, (size_t)n)))
        st = pt__err_prefix(st, "%s: tensor 'rope_freqs.weight'", path);
    else
        st = fit_factors(cfg, r, r + n, r + 2 * n, x, n, old, path);
    pt_free(r);
    pt_free(x);
    return st;
}
