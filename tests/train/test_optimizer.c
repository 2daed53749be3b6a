/* Optimizers against torch.optim trajectories (tests/train/gen_optimizer.py),
 * schedules, clipping, non-finite skipping and option validation. */
#include "testutil.h"

#include "core/core.h"
#include "io/fileio.h"
#include "train/optimizer.h"
#include "train/optimizer_math.h"
#include "model/model.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

static cJSON *load_golden(void)
{
    char *text;
    size_t n;
    ck_assert_ok(pt__read_file(&text, &n, PT_TEST_SRCDIR "/train/data/optimizer_golden.json", 1 << 24));
    cJSON *doc = cJSON_ParseWithLength(text, n);
    free(text);
    ck_assert_ptr_nonnull(doc);
    return doc;
}

static void read_floats(const cJSON *arr, float *dst, int n)
{
    ck_assert_int_eq(cJSON_GetArraySize(arr), n);
    for (int i = 0; i < n; i++)
        dst[i] = (float)cJSON_GetArrayItem(arr, i)->valuedouble;
}

static double num(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    ck_assert_msg(cJSON_IsNumber(v), "golden lacks %s", key);
    return v->valuedouble;
}

static int schedule_of(const char *s)
{
    return !strcmp(s, "cosine") ? PT_SCHEDULE_COSINE : !strcmp(s, "linear") ? PT_SCHEDULE_LINEAR
                                                                             : PT_SCHEDULE_CONSTANT;
}

START_TEST(test_matches_torch)
{
    cJSON *doc = load_golden();
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(doc, "cases");
    int ncases = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        const char *name = cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring;
        const char *type = cJSON_GetObjectItemCaseSensitive(c, "type")->valuestring;
        pt_optimizer_options o;
        ck_assert_ok(pt_optimizer_options_init(&o));
        o.type = strcmp(type, "adamw") ? PT_OPTIMIZER_SGD : PT_OPTIMIZER_ADAMW;
        o.lr = num(c, "lr");
        o.weight_decay = num(c, "wd");
        if (o.type == PT_OPTIMIZER_ADAMW) {
            const cJSON *betas = cJSON_GetObjectItemCaseSensitive(c, "betas");
            o.beta1 = cJSON_GetArrayItem(betas, 0)->valuedouble;
            o.beta2 = cJSON_GetArrayItem(betas, 1)->valuedouble;
            o.eps = num(c, "eps");
        } else {
            o.momentum = num(c, "momentum");
        }
        o.schedule = schedule_of(cJSON_GetObjectItemCaseSensitive(c, "schedule")->valuestring);
        o.warmup_steps = (int64_t)num(c, "warmup");
        o.total_steps = (int64_t)num(c, "total");
        o.min_lr_ratio = num(c, "min_ratio");
        o.max_grad_norm = num(c, "max_norm");

        float w1[15], w2[4], g1[15], g2[4], e1[15], e2[4];
        const cJSON *init = cJSON_GetObjectItemCaseSensitive(c, "init");
        read_floats(cJSON_GetArrayItem(init, 0), w1, 15);
        read_floats(cJSON_GetArrayItem(init, 1), w2, 4);
        pt_opt_param params[2] = { { w1, g1, 15, true, "w1" }, { w2, g2, 4, false, "w2" } };
        pt_optimizer *opt;
        ck_assert_ok(pt__optimizer_create_params(&opt, params, 2, &o));
        const cJSON *step;
        int k = 0;
        cJSON_ArrayForEach(step, cJSON_GetObjectItemCaseSensitive(c, "steps"))
        {
            const cJSON *grad = cJSON_GetObjectItemCaseSensitive(step, "grad");
            read_floats(cJSON_GetArrayItem(grad, 0), g1, 15);
            read_floats(cJSON_GetArrayItem(grad, 1), g2, 4);
            double lr;
            lr = pt_optimizer_lr(opt);
            ck_assert_msg(fabs(lr - num(step, "lr")) <= 1e-12 * (1 + lr), "%s step %d: lr %.17g vs torch %.17g",
                          name, k, lr, num(step, "lr"));
            pt_step_stats stats;
            ck_assert_ok(pt_step_stats_init(&stats));
            ck_assert_ok(pt_optimizer_step(&stats, opt));
            ck_assert(!stats.skipped);
            ck_assert_int_eq(stats.step, k + 1);
            ck_assert_msg(fabs(stats.grad_norm - num(step, "grad_norm")) <= 1e-5 * stats.grad_norm,
                          "%s step %d: grad norm %g vs %g", name, k, stats.grad_norm, num(step, "grad_norm"));
            const cJSON *wts = cJSON_GetObjectItemCaseSensitive(step, "weights");
            read_floats(cJSON_GetArrayItem(wts, 0), e1, 15);
            read_floats(cJSON_GetArrayItem(wts, 1), e2, 4);
            for (int i = 0; i < 15; i++)
                ck_assert_msg(fabsf(w1[i] - e1[i]) <= 2e-6f * (1 + fabsf(e1[i])), "%s step %d w1[%d]: %.9g vs %.9g",
                              name, k, i, (double)w1[i], (double)e1[i]);
            for (int i = 0; i < 4; i++)
                ck_assert_msg(fabsf(w2[i] - e2[i]) <= 2e-6f * (1 + fabsf(e2[i])), "%s step %d w2[%d]: %.9g vs %.9g",
                              name, k, i, (double)w2[i], (double)e2[i]);
            /* The step zeroed the gradients. */
            for (int i = 0; i < 15; i++)
                ck_assert_float_eq(g1[i], 0.0f);
            k++;
        }
        ck_assert_int_eq(k, (int)num(c, "n_steps"));
        pt_optimizer_free(opt);
        ncases++;
    }
    ck_assert_int_eq(ncases, 4);
    cJSON_Delete(doc);
}
END_TEST

START_TEST(test_nonfinite_skips)
{
    pt_optimizer_options o;
    pt_optimizer_options_init(&o);
    o.lr = 0.1;
    float w[3] = { 1, 2, 3 }, g[3] = { 0.5f, NAN, 1 }, w0[3];
    memcpy(w0, w, sizeof w);
    pt_opt_param p = { w, g, 3, true, "w" };
    pt_optimizer *opt;
    ck_assert_ok(pt__optimizer_create_params(&opt, &p, 1, &o));
    pt_opt_state_view sv;
    pt__optimizer_state_view(&sv, opt);
    pt_step_stats st;
    pt_step_stats_init(&st);
    ck_assert_ok(pt_optimizer_step(&st, opt));
    ck_assert(st.skipped);
    ck_assert(isnan(st.grad_norm));
    ck_assert_int_eq(st.step, 0);
    ck_assert_int_eq(st.skipped_total, 1);
    ck_assert_int_eq(memcmp(w, w0, sizeof w), 0);
    for (int i = 0; i < 3; i++) {
        ck_assert_float_eq(sv.m[i], 0.0f);
        ck_assert_float_eq(sv.v[i], 0.0f);
        ck_assert_float_eq(g[i], 0.0f); /* the bad gradient is dropped */
    }
    g[0] = INFINITY;
    ck_assert_ok(pt_optimizer_step(&st, opt));
    ck_assert(st.skipped && isinf(st.grad_norm));
    ck_assert_int_eq(st.skip_reason, PT_SKIP_NONFINITE_GRAD);
    ck_assert_int_eq(st.skipped_total, 2);
    /* A finite step afterwards is step 1 with bias corrections of step 1:
     * AdamW's first step moves each weight by lr * sign(g) (eps aside). */
    g[0] = 0.5f; g[1] = -2.0f; g[2] = 0.0f;
    o.max_grad_norm = 0;
    ck_assert_ok(pt_optimizer_step(&st, opt));
    ck_assert(!st.skipped);
    ck_assert_int_eq(st.step, 1);
    ck_assert_float_eq_tol(w[0], 1.0f - 0.1f, 1e-6f);
    ck_assert_float_eq_tol(w[1], 2.0f + 0.1f, 1e-6f);
    ck_assert_float_eq_tol(w[2], 3.0f, 1e-6f);
    pt_optimizer_free(opt);
}
END_TEST

/* The counters a checkpoint restores go in through one function: the next
 * step counts on from them (step 41 -> 42, SGD's first-step rule no longer
 * applies), and a negative count is refused with nothing changed. */
START_TEST(test_restore_counters)
{
    pt_optimizer_options o;
    pt_optimizer_options_init(&o);
    o.type = PT_OPTIMIZER_SGD;
    o.lr = 0.5;
    o.momentum = 0.5;
    o.weight_decay = 0;
    o.max_grad_norm = 0;
    float w[1] = { 1 }, g[1] = { 2 };
    pt_opt_param p = { w, g, 1, true, "w" };
    pt_optimizer *opt;
    ck_assert_ok(pt__optimizer_create_params(&opt, &p, 1, &o));
    ck_assert_ok(pt__optimizer_restore_counters(opt, 41, 3));
    pt_opt_state_view sv;
    pt__optimizer_state_view(&sv, opt);
    ck_assert_int_eq(sv.step, 41);
    ck_assert_int_eq(sv.skipped, 3);
    sv.m[0] = 4.0f; /* a restored momentum buffer */
    ck_assert_status(pt__optimizer_restore_counters(opt, -1, 0), PT_ERANGE, "must not be negative");
    ck_assert_status(pt__optimizer_restore_counters(opt, 5, -2), PT_ERANGE, "must not be negative");
    int64_t step = 0;
    step = pt_optimizer_step_count(opt);
    ck_assert_int_eq(step, 41);
    pt_step_stats st;
    pt_step_stats_init(&st);
    ck_assert_ok(pt_optimizer_step(&st, opt));
    ck_assert_int_eq(st.step, 42);
    ck_assert_int_eq(st.skipped_total, 3);
    /* step 42 is not SGD's first (which would start the buffer at g = 2 and
     * give w = 1 - 0.5 * 2 = 0): buf = 0.5 * 4 + 2 = 4, w = 1 - 0.5 * 4 = -1 */
    ck_assert_float_eq_tol(w[0], -1.0f, 1e-6f);
    ck_assert_float_eq_tol(sv.m[0], 4.0f, 1e-6f);
    pt_optimizer_free(opt);
}
END_TEST

START_TEST(test_schedule_factor)
{
    double f;
    ck_assert_ok(pt_schedule_factor(&f, PT_SCHEDULE_CONSTANT, 0, 4, 0, 0));
    ck_assert_double_eq(f, 0.0);
    ck_assert_ok(pt_schedule_factor(&f, PT_SCHEDULE_CONSTANT, 2, 4, 0, 0));
    ck_assert_double_eq(f, 0.5);
    ck_assert_ok(pt_schedule_factor(&f, PT_SCHEDULE_CONSTANT, 9, 4, 0, 0));
    ck_assert_double_eq(f, 1.0);
    ck_assert_ok(pt_schedule_factor(&f, PT_SCHEDULE_LINEAR, 6, 2, 10, 0));
    ck_assert_double_eq(f, 0.5);
    ck_assert_ok(pt_schedule_factor(&f, PT_SCHEDULE_LINEAR, 12, 2, 10, 0));
    ck_assert_double_eq(f, 0.0);
    ck_assert_ok(pt_schedule_factor(&f, PT_SCHEDULE_COSINE, 6, 2, 10, 0));
    ck_assert_double_eq_tol(f, 0.5, 1e-12);
    ck_assert_ok(pt_schedule_factor(&f, PT_SCHEDULE_COSINE, 10, 2, 10, 0.1));
    ck_assert_double_eq_tol(f, 0.1, 1e-12);
    ck_assert_status(pt_schedule_factor(&f, 7, 1, 0, 10, 0), PT_EINVAL, "unknown schedule");
    ck_assert_status(pt_schedule_factor(&f, PT_SCHEDULE_LINEAR, 1, 0, 0, 0), PT_EINVAL, "total_steps");
    ck_assert_status(pt_schedule_factor(NULL, 0, 1, 0, 0, 0), PT_EINVAL, "NULL");
}
END_TEST

START_TEST(test_nonfinite_update_skips)
{
    /* SGD: finite gradients whose update overflows: skipped, nothing changed. */
    pt_optimizer_options o;
    pt_optimizer_options_init(&o);
    o.type = PT_OPTIMIZER_SGD;
    o.lr = 1e38;
    o.max_grad_norm = 0;
    float w[2] = { 1, 2 }, g[2] = { 1e10f, 1 }, w0[2];
    memcpy(w0, w, sizeof w);
    pt_opt_param p = { w, g, 2, true, "layer.w" };
    pt_optimizer *opt;
    ck_assert_ok(pt__optimizer_create_params(&opt, &p, 1, &o));
    pt_opt_state_view sv;
    pt__optimizer_state_view(&sv, opt);
    pt_step_stats st;
    pt_step_stats_init(&st);
    ck_assert_ok(pt_optimizer_step(&st, opt));
    ck_assert(st.skipped);
    ck_assert_int_eq(st.skip_reason, PT_SKIP_NONFINITE_UPDATE);
    ck_assert_str_eq(pt_skip_reason_name(st.skip_reason), "nonfinite_update");
    ck_assert(isfinite(st.grad_norm));
    ck_assert_int_eq(st.step, 0);
    ck_assert_int_eq(st.skipped_total, 1);
    ck_assert_int_eq(memcmp(w, w0, sizeof w), 0);
    ck_assert_float_eq(sv.m[0], 0.0f);
    ck_assert_float_eq(sv.m[1], 0.0f);
    ck_assert_float_eq(g[0], 0.0f);
    pt_optimizer_free(opt);

    /* AdamW: the first step moves w by lr / (1 - beta1) * (1 - beta1) = lr... past FLT_MAX. */
    pt_optimizer_options_init(&o);
    o.lr = 1e38;
    o.beta1 = 0.5;
    o.max_grad_norm = 0;
    w[0] = 3e38f; w[1] = 1; g[0] = -1; g[1] = 1;
    memcpy(w0, w, sizeof w);
    ck_assert_ok(pt__optimizer_create_params(&opt, &p, 1, &o));
    pt__optimizer_state_view(&sv, opt);
    ck_assert_ok(pt_optimizer_step(&st, opt));
    ck_assert(st.skipped);
    ck_assert_int_eq(st.skip_reason, PT_SKIP_NONFINITE_UPDATE);
    ck_assert_int_eq(st.step, 0);
    ck_assert_int_eq(memcmp(w, w0, sizeof w), 0);
    for (int i = 0; i < 2; i++) {
        ck_assert_float_eq(sv.m[i], 0.0f);
        ck_assert_float_eq(sv.v[i], 0.0f);
    }
    /* A harmless step afterwards is applied as step 1. */
    w[0] = 1; g[0] = -1; g[1] = 1;
    o.lr = 0.5;
    pt_optimizer_free(opt);
    ck_assert_ok(pt__optimizer_create_params(&opt, &p, 1, &o));
    ck_assert_ok(pt_optimizer_step(&st, opt));
    ck_assert(!st.skipped);
    ck_assert_int_eq(st.skip_reason, PT_SKIP_NONE);
    ck_assert_int_eq(st.step, 1);
    ck_assert_msg(fabsf(w[0] - 1.5f) < 1e-5f, "w[0] = %a", (double)w[0]);
    pt_optimizer_free(opt);
}
END_TEST

START_TEST(test_overflowing_options)
{
    pt_optimizer_options o;
    float w = 1, g = 1;
    pt_opt_param p = { &w, &g, 1, true, "w" };
    pt_optimizer *opt = (pt_optimizer *)&o;
    pt_optimizer_options_init(&o);
    o.lr = 1e308;
    ck_assert_status(pt__optimizer_create_params(&opt, &p, 1, &o), PT_ERANGE, "lr 1e+308 overflows a float");
    ck_assert_ptr_null(opt);
    pt_optimizer_options_init(&o);
    o.lr = 1e38;
    ck_assert_status(pt__optimizer_create_params(&opt, &p, 1, &o), PT_ERANGE,
                     "lr 1e+38 / (1 - beta1 0.9) (the first step size) overflows");
    pt_optimizer_options_init(&o);
    o.lr = 1e30;
    o.weight_decay = 1e10;
    ck_assert_status(pt__optimizer_create_params(&opt, &p, 1, &o), PT_ERANGE, "weight_decay 1e+10 overflows");
}
END_TEST

START_TEST(test_bad_options)
{
    pt_optimizer_options o;
    float w = 1, g = 1;
    pt_opt_param p = { &w, &g, 1, true, "w" };
    pt_optimizer *opt = (pt_optimizer *)&o;
    pt_optimizer_options_init(&o);
    o.lr = -1;
    ck_assert_status(pt__optimizer_create_params(&opt, &p, 1, &o), PT_EINVAL, "lr");
    ck_assert_ptr_null(opt);
    pt_optimizer_options_init(&o);
    o.beta2 = 1.0;
    ck_assert_status(pt__optimizer_create_params(&opt, &p, 1, &o), PT_EINVAL, "beta2");
    pt_optimizer_options_init(&o);
    o.schedule = PT_SCHEDULE_COSINE;
    ck_assert_status(pt__optimizer_create_params(&opt, &p, 1, &o), PT_EINVAL, "cosine schedule needs total_steps");
    o.total_steps = 5;
    o.warmup_steps = 6;
    ck_assert_status(pt__optimizer_create_params(&opt, &p, 1, &o), PT_EINVAL, "warmup_steps 6 exceeds");
    pt_optimizer_options_init(&o);
    o.size = sizeof o + 8; /* larger than this library knows (sizes from 8 up are older headers) */
    ck_assert_status(pt__optimizer_create_params(&opt, &p, 1, &o), PT_EINVAL, "pt_optimizer_options_init");
    pt_optimizer_options_init(&o);
    o.type = 9;
    ck_assert_status(pt__optimizer_create_params(&opt, &p, 1, &o), PT_EINVAL, "unknown type 9");
    o.type = PT_OPTIMIZER_SGD;
    o.momentum = 1.5;
    ck_assert_status(pt__optimizer_create_params(&opt, &p, 1, &o), PT_EINVAL, "momentum");
    o.momentum = 0.5;
    o.max_grad_norm = NAN;
    ck_assert_status(pt__optimizer_create_params(&opt, &p, 1, &o), PT_EINVAL, "max_grad_norm");
    ck_assert_status(pt_optimizer_create(&opt, NULL, &o), PT_EINVAL, "model is NULL");
    ck_assert_status(pt_optimizer_step(NULL, NULL), PT_EINVAL, "NULL");
    ck_assert_status(pt_optimizer_options_init(NULL), PT_EINVAL, "NULL");
    pt_optimizer_free(NULL);
    /* A grad-less parameter is a state error, not a crash. */
    pt_optimizer_options_init(&o);
    pt_opt_param nog = { &w, NULL, 1, true, "lonely" };
    ck_assert_ok(pt__optimizer_create_params(&opt, &nog, 1, &o));
    ck_assert_status(pt_optimizer_step(NULL, opt), PT_ESTATE, "lonely");
    pt_step_stats bad = { 0 };
    ck_assert_status(pt_optimizer_step(&bad, opt), PT_EINVAL, "pt_step_stats_init");
    pt_optimizer_free(opt);
}
END_TEST

/* NULL options are the defaults; an older, smaller options or stats struct
 * is read as far as its size goes, the rest defaults. */
START_TEST(test_null_and_older_structs)
{
    float w = 1, g = 0.5f;
    pt_opt_param p = { &w, &g, 1, true, "w" };
    pt_optimizer *opt;
    ck_assert_ok(pt__optimizer_create_params(&opt, &p, 1, NULL));
    const pt_optimizer_options *got = pt__optimizer_options_of(opt);
    ck_assert_int_eq(got->type, PT_OPTIMIZER_ADAMW);
    ck_assert_double_eq(got->lr, 1e-4);
    ck_assert_uint_eq(got->size, sizeof(pt_optimizer_options));
    pt_optimizer_free(opt);
    /* a header that ended after `type` */
    pt_optimizer_options o;
    pt_optimizer_options_init(&o);
    o.type = PT_OPTIMIZER_SGD;
    o.lr = 123.0; /* beyond the old size: not read */
    o.size = offsetof(pt_optimizer_options, lr);
    ck_assert_ok(pt__optimizer_create_params(&opt, &p, 1, &o));
    got = pt__optimizer_options_of(opt);
    ck_assert_int_eq(got->type, PT_OPTIMIZER_SGD);
    ck_assert_double_eq(got->lr, 1e-4);
    /* stats of an older size: only that much is written */
    pt_step_stats st;
    pt_step_stats_init(&st);
    st.size = offsetof(pt_step_stats, lr);
    st.lr = -7.0;
    ck_assert_ok(pt_optimizer_step(&st, opt));
    ck_assert_double_eq(st.grad_norm, 0.5);
    ck_assert_double_eq(st.lr, -7.0);
    ck_assert_uint_eq(st.size, offsetof(pt_step_stats, lr));
    pt_optimizer_free(opt);
}
END_TEST

START_TEST(test_deterministic_threads)
{
    /* A large parameter: the norm (and so clipping) is the same bit for bit
     * with 1 and 2 threads, because partial sums have a fixed order. */
    size_t n = 100003;
    float *w1 = malloc(n * 4), *w2 = malloc(n * 4), *g1 = malloc(n * 4), *g2 = malloc(n * 4);
    pt_rng r;
    pt__rng_seed(&r, 3);
    for (size_t i = 0; i < n; i++) {
        w1[i] = w2[i] = (float)pt__rng_normal(&r);
        g1[i] = g2[i] = (float)pt__rng_normal(&r);
    }
    pt_optimizer_options o;
    pt_optimizer_options_init(&o);
    o.weight_decay = 0.01;
    pt_optimizer *a, *b;
    pt_opt_param pa = { w1, g1, n, true, "a" }, pb = { w2, g2, n, true, "b" };
    ck_assert_ok(pt__optimizer_create_params(&a, &pa, 1, &o));
    ck_assert_ok(pt__optimizer_create_params(&b, &pb, 1, &o));
    pt_step_stats sa, sb;
    pt_step_stats_init(&sa);
    pt_step_stats_init(&sb);
    ck_assert_ok(pt_set_num_threads(1));
    ck_assert_ok(pt_optimizer_step(&sa, a));
    ck_assert_ok(pt_set_num_threads(2));
    ck_assert_ok(pt_optimizer_step(&sb, b));
    ck_assert(sa.grad_norm == sb.grad_norm);
    ck_assert_int_eq(memcmp(w1, w2, n * 4), 0);
    pt_optimizer_free(a);
    pt_optimizer_free(b);
    free(w1); free(w2); free(g1); free(g2);
}
END_TEST

/* Random gradients into every trainable tensor of m (seeded). */
static void fill_grads(pt_model *m, uint64_t seed, double scale)
{
    pt_rng r;
    pt__rng_seed(&r, seed);
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        for (size_t j = 0; j < t->numel; j++)
            t->grad[j] = (float)(scale * pt__rng_normal(&r));
    }
}

static double model_grad_norm(const pt_model *m)
{
    long double ss = 0;
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        for (size_t j = 0; j < t->numel; j++)
            ss += (long double)t->grad[j] * t->grad[j];
    }
    return (double)sqrtl(ss);
}

START_TEST(test_model_bound_and_state_view)
{
    /* After an update the optimizer knows the largest |w|, |m| and v it
     * wrote and skips the checking pass when a bound proves the next update
     * finite.  Results are those of the checked path bit for bit (b's
     * optimizer hands out a state view before each step, which forces the
     * check), and a moment written through a state view is seen: the
     * overflowing update is refused, nothing written. */
    pt_model *ma = pt_test_tiny_llama(32, 7), *mb = pt_test_tiny_llama(32, 7);
    pt_optimizer_options o;
    pt_optimizer_options_init(&o);
    o.lr = 1e-2;
    o.weight_decay = 0.1;
    o.max_grad_norm = 0;
    pt_optimizer *a, *b;
    ck_assert_ok(pt_optimizer_create(&a, ma, &o));
    ck_assert_ok(pt_optimizer_create(&b, mb, &o));
    pt_step_stats st;
    pt_step_stats_init(&st);
    pt_opt_state_view sv;
    for (int s = 0; s < 4; s++) {
        fill_grads(ma, 100 + (uint64_t)s, 1.0);
        fill_grads(mb, 100 + (uint64_t)s, 1.0);
        const double ref = model_grad_norm(ma);
        ck_assert_ok(pt_optimizer_step(&st, a));
        ck_assert(!st.skipped);
        ck_assert_msg(fabs(st.grad_norm - ref) <= 1e-12 * ref, "norm %.17g, reference %.17g",
                      st.grad_norm, ref);
        pt__optimizer_state_view(&sv, b);
        ck_assert_ok(pt_optimizer_step(&st, b));
        ck_assert(!st.skipped);
    }
    for (size_t i = 0; i < pt_model_tensor_count(ma); i++) {
        const pt_tensor_ref *ta = pt__model_tensor(ma, i), *tb = pt__model_tensor(mb, i);
        ck_assert_msg(memcmp(ta->data, tb->data, ta->numel * sizeof(float)) == 0, "%s differs",
                      ta->name);
        for (size_t j = 0; j < ta->numel; j++)
            ck_assert_float_eq(ta->grad[j], 0.0f); /* consumed */
    }
    pt__optimizer_state_view(&sv, a);
    sv.m[0] = 3e38f; /* with v 0 and a tiny gradient: 2.7e38 / eps overflows */
    sv.v[0] = 0.0f;
    size_t n0 = pt__model_tensor(ma, 0)->numel;
    float *before = malloc(n0 * sizeof *before);
    memcpy(before, pt__model_tensor(ma, 0)->data, n0 * sizeof *before);
    fill_grads(ma, 200, 1e-20);
    ck_assert_ok(pt_optimizer_step(&st, a));
    ck_assert(st.skipped);
    ck_assert_int_eq(st.skip_reason, PT_SKIP_NONFINITE_UPDATE);
    ck_assert_int_eq(st.step, 4);
    ck_assert_int_eq(memcmp(before, pt__model_tensor(ma, 0)->data, n0 * sizeof *before), 0);
    ck_assert_float_eq(sv.m[0], 3e38f);
    free(before);
    pt_optimizer_free(a);
    pt_optimizer_free(b);
    pt_model_free(ma);
    pt_model_free(mb);
}
END_TEST

/* The gradient's sum of squares and max |g| (the vectorised pass): against
 * a plain double loop over several blocks and a ragged tail, and with an
 * infinity and a NaN in it (max ignores NaN, the sum shows it). */
START_TEST(test_sum_squares_pass)
{
    const size_t n = 3 * 4096 + 37;
    float *g = malloc(n * sizeof *g);
    ck_assert_ptr_nonnull(g);
    uint64_t st = 99;
    double ref = 0;
    float mref = 0.0f;
    for (size_t i = 0; i < n; i++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        g[i] = (float)((double)(st >> 40) / (double)(1ULL << 24) - 0.5) * (i % 7 == 3 ? 40.0f : 1.0f);
        ref += (double)g[i] * (double)g[i];
        mref = fabsf(g[i]) > mref ? fabsf(g[i]) : mref;
    }
    for (int threads = 1; threads <= 2; threads++) {
        float mx = -1.0f;
        double ss = pt__opt_sum_squares(g, n, &mx, threads);
        ck_assert_msg(fabs(ss - ref) <= 1e-13 * ref, "sum %.17g vs %.17g", ss, ref);
        ck_assert_float_eq(mx, mref);
        mx = -1.0f; /* the tail alone */
        ss = pt__opt_sum_squares(g + 4096 * 3, 37, &mx, threads);
        ck_assert(ss > 0 && mx > 0);
    }
    g[5000] = -INFINITY;
    float mx = 0.0f;
    ck_assert(isinf(pt__opt_sum_squares(g, n, &mx, 2)) && isinf(mx));
    g[5000] = NAN;
    g[n - 1] = -1e30f; /* in the tail */
    ck_assert(isnan(pt__opt_sum_squares(g, n, &mx, 2)));
    ck_assert_float_eq(mx, 1e30f);
    free(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("optimizer");
    TCase *tc = tcase_create("optimizer");
    tcase_add_test(tc, test_matches_torch);
    tcase_add_test(tc, test_restore_counters);
    tcase_add_test(tc, test_nonfinite_skips);
    tcase_add_test(tc, test_nonfinite_update_skips);
    tcase_add_test(tc, test_overflowing_options);
    tcase_add_test(tc, test_schedule_factor);
    tcase_add_test(tc, test_bad_options);
    tcase_add_test(tc, test_null_and_older_structs);
    tcase_add_test(tc, test_deterministic_threads);
    tcase_add_test(tc, test_model_bound_and_state_view);
    tcase_add_test(tc, test_sum_squares_pass);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
