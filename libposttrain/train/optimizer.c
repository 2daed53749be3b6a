/* AdamW and SGD with momentum, learning-rate schedules, global-norm clipping
 * and non-finite step skipping.  Formulas follow torch.optim.AdamW/SGD and
 * torch.nn.utils.clip_grad_norm_, so results match PyTorch step for step. */
#include "train/optimizer.h"
#include "train/optimizer_math.h"

#include "core/core.h"
#include "core/busy.h"
#include "dist/dist_internal.h"
#include "train/dist_train.h"
#include "model/model.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct pt_optimizer {
    pt_busy busy;           /* the public function using it (core/busy.h), or NULL */
    pt_optimizer_options opts;
    pt_model *model;        /* NULL for explicit parameter arrays */
    uint64_t generation;    /* the model's structure generation it was created for */
    pt_opt_param *params;
    size_t *table_index;    /* model tensor index of each param (model-based) */
    size_t n_params;
    size_t numel_total;
    float *m;               /* AdamW first moment / SGD momentum buffer */
    float *v;               /* AdamW second moment */
    int64_t step;
    int64_t skipped;
    pt_dist *dist;          /* data-parallel job (pt_optimizer_set_dist), or NULL */
    pt_opt_maxima maxima;   /* of |w|, |m|, v after the last AdamW update ... */
    bool maxima_valid;      /* ... while no state view was handed out since */
    uint64_t w_version;     /* the model's weights_version that update left */
};

int pt_optimizer_options_init(pt_optimizer_options *opts)
{
    PT_STRUCT_INIT_ZERO(opts);
    opts->type = PT_OPTIMIZER_ADAMW;
    opts->lr = 1e-4;
    opts->beta1 = 0.9;
    opts->beta2 = 0.999;
    opts->eps = 1e-8;
    opts->momentum = 0.9;
    opts->weight_decay = 0.0;
    opts->schedule = PT_SCHEDULE_CONSTANT;
    opts->max_grad_norm = 1.0;
    return PT_OK;
}

PT_ZERO_INIT(pt_step_stats_init, pt_step_stats, stats)

/* The fields of full options (read with PT_STRUCT_READ). */
static int check_options(const pt_optimizer_options *o)
{
    if (o->type != PT_OPTIMIZER_ADAMW && o->type != PT_OPTIMIZER_SGD)
        return pt__err(PT_EINVAL, "optimizer options: unknown type %d", o->type);
    if (!(o->lr >= 0) || !isfinite(o->lr))
        return pt__err(PT_EINVAL, "optimizer options: lr %g must be finite and >= 0", o->lr);
    if (!(o->weight_decay >= 0) || !isfinite(o->weight_decay))
        return pt__err(PT_EINVAL, "optimizer options: weight_decay %g must be finite and >= 0", o->weight_decay);
    if (!(o->max_grad_norm >= 0) || !isfinite(o->max_grad_norm))
        return pt__err(PT_EINVAL, "optimizer options: max_grad_norm %g must be finite and >= 0 (0 = off)",
                      o->max_grad_norm);
    /* The update multiplies lr by other values in float: refuse an lr whose
     * products already overflow, before any step is taken. */
    if (!(o->lr <= (double)FLT_MAX))
        return pt__err(PT_ERANGE, "optimizer options: lr %g overflows a float (at most %g)", o->lr,
                      (double)FLT_MAX);
    if (!(o->lr * o->weight_decay <= (double)FLT_MAX))
        return pt__err(PT_ERANGE, "optimizer options: lr %g * weight_decay %g overflows a float", o->lr,
                      o->weight_decay);
    if (o->type == PT_OPTIMIZER_ADAMW && o->beta1 >= 0 && o->beta1 < 1 &&
        !(o->lr / (1.0 - o->beta1) <= (double)FLT_MAX))
        return pt__err(PT_ERANGE, "optimizer options: lr %g / (1 - beta1 %g) (the first step size) "
                      "overflows a float", o->lr, o->beta1);
    if (o->type == PT_OPTIMIZER_ADAMW) {
        if (!(o->beta1 >= 0 && o->beta1 < 1))
            return pt__err(PT_EINVAL, "optimizer options: beta1 %g is not in [0, 1)", o->beta1);
        if (!(o->beta2 >= 0 && o->beta2 < 1))
            return pt__err(PT_EINVAL, "optimizer options: beta2 %g is not in [0, 1)", o->beta2);
        if (!(o->eps > 0) || !isfinite(o->eps))
            return pt__err(PT_EINVAL, "optimizer options: eps %g must be finite and > 0", o->eps);
    } else if (!(o->momentum >= 0 && o->momentum < 1)) {
        return pt__err(PT_EINVAL, "optimizer options: momentum %g is not in [0, 1)", o->momentum);
    }
    if (o->schedule < PT_SCHEDULE_CONSTANT || o->schedule > PT_SCHEDULE_COSINE)
        return pt__err(PT_EINVAL, "optimizer options: unknown schedule %d", o->schedule);
    if (o->warmup_steps < 0)
        return pt__err(PT_EINVAL, "optimizer options: warmup_steps %lld is negative", (long long)o->warmup_steps);
    if (o->schedule != PT_SCHEDULE_CONSTANT && o->total_steps <= 0)
        return pt__err(PT_EINVAL, "optimizer options: the %s schedule needs total_steps > 0",
                      pt_schedule_type_name(o->schedule));
    if (o->schedule != PT_SCHEDULE_CONSTANT && o->warmup_steps > o->total_steps)
        return pt__err(PT_EINVAL, "optimizer options: warmup_steps %lld exceeds total_steps %lld",
                      (long long)o->warmup_steps, (long long)o->total_steps);
    if (!(o->min_lr_ratio >= 0 && o->min_lr_ratio <= 1))
        return pt__err(PT_EINVAL, "optimizer options: min_lr_ratio %g is not in [0, 1]", o->min_lr_ratio);
    return PT_OK;
}

int pt_schedule_factor(double *factor, int schedule, int64_t step, int64_t warmup_steps, int64_t total_steps,
                       double min_lr_ratio)
{
    PT_CHECK_NULL(factor);
    PT_CHECK_ARG(step >= 0, step, "%lld is negative", (long long)step);
    PT_CHECK_ARG(warmup_steps >= 0, warmup_steps, "%lld is negative", (long long)warmup_steps);
    const int64_t warmup = warmup_steps, total = total_steps;
    if (step < warmup) {
        *factor = (double)step / (double)(warmup > 1 ? warmup : 1);
        return PT_OK;
    }
    if (!pt_schedule_type_name(schedule))
        return pt__err(PT_EINVAL, "pt_schedule_factor: unknown schedule %d", schedule);
    if (schedule != PT_SCHEDULE_CONSTANT && total <= 0)
        return pt__err(PT_EINVAL, "pt_schedule_factor: %s schedule needs total_steps > 0",
                      pt_schedule_type_name(schedule));
    if (schedule == PT_SCHEDULE_CONSTANT) {
        *factor = 1.0;
    } else if (schedule == PT_SCHEDULE_LINEAR) {
        double f = (double)(total - step) / (double)(total - warmup > 1 ? total - warmup : 1);
        *factor = f > 0 ? f : 0;
    } else {
        double progress = (double)(step - warmup) / (double)(total - warmup > 1 ? total - warmup : 1);
        if (progress > 1)
            progress = 1;
        double c = 0.5 * (1.0 + cos(M_PI * progress));
        *factor = min_lr_ratio + (1.0 - min_lr_ratio) * c;
    }
    return PT_OK;
}

static int alloc_state(pt_optimizer *o)
{
    size_t total = 0;
    for (size_t i = 0; i < o->n_params; i++)
        if (!pt__add_size(total, o->params[i].numel, &total))
            return pt__err(PT_ENOMEM, "optimizer: parameter count overflows");
    o->numel_total = total;
    o->m = pt__calloc(total ? total : 1, sizeof(float));
    if (!o->m)
        return PT_ENOMEM;
    if (o->opts.type == PT_OPTIMIZER_ADAMW) {
        o->v = pt__calloc(total ? total : 1, sizeof(float));
        if (!o->v)
            return PT_ENOMEM;
    }
    return PT_OK;
}

int pt__optimizer_create_params(pt_optimizer **out, const pt_opt_param *params, size_t n,
                               const pt_optimizer_options *opts)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    pt_optimizer_options local;
    int st = PT_STRUCT_READ(local, opts, pt_optimizer_options_init);
    if (st || (st = check_options(&local)))
        return st;
    PT_CHECK_ARG(params || !n, params, "is NULL (n is %zu)", n);
    pt_optimizer *o = pt__calloc(1, sizeof *o);
    if (!o)
        return PT_ENOMEM;
    o->opts = local;
    o->params = pt__malloc_array(n ? n : 1, sizeof *o->params);
    if (!o->params) {
        pt_optimizer_free(o);
        return PT_ENOMEM;
    }
    if (n)
        memcpy(o->params, params, n * sizeof *params);
    o->n_params = n;
    if ((st = alloc_state(o))) {
        pt_optimizer_free(o);
        return st;
    }
    *out = o;
    return PT_OK;
}

int pt_optimizer_create(pt_optimizer **out, pt_model *model, const pt_optimizer_options *opts)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(model);
    pt_optimizer_options local;
    int st = PT_STRUCT_READ(local, opts, pt_optimizer_options_init);
    if (st || (st = check_options(&local)))
        return st;
    size_t count = pt_model_tensor_count(model), n = 0;
    pt_opt_param *params = pt__malloc_array(count ? count : 1, sizeof *params);
    size_t *index = pt__malloc_array(count ? count : 1, sizeof *index);
    if (!params || !index) {
        free(params);
        free(index);
        return PT_ENOMEM;
    }
    for (size_t i = 0; i < count; i++) {
        const pt_tensor_ref *t = pt__model_tensor(model, i);
        if (!t->trainable)
            continue;
        params[n] = (pt_opt_param){ t->data, t->grad, t->numel,
                                    local.decay_norms_and_biases || !t->no_decay, t->name };
        index[n++] = i;
    }
    if (n == 0) {
        free(params);
        free(index);
        if (pt__model_is_quantized(model))
            return pt__model_check_not_quantized(model, "pt_optimizer_create", PT_QUANT_FULL_FT_ADVICE);
        return pt__err(PT_EINVAL, "pt_optimizer_create: the model has no trainable parameters");
    }
    st = pt__optimizer_create_params(out, params, n, &local);
    free(params);
    if (st) {
        free(index);
        return st;
    }
    (*out)->model = pt__model_retain(model);
    (*out)->generation = pt__model_generation(model);
    (*out)->table_index = index;
    return PT_OK;
}

void pt_optimizer_free(pt_optimizer *o)
{
    if (!o)
        return;
    free(o->params);
    free(o->table_index);
    free(o->m);
    free(o->v);
    pt__model_release(o->model);
    free(o);
}

static double current_lr(const pt_optimizer *o)
{
    double f = 1.0;
    if (pt_schedule_factor(&f, o->opts.schedule, o->step, o->opts.warmup_steps, o->opts.total_steps,
                           o->opts.min_lr_ratio))
        f = 0.0;
    return o->opts.lr * f;
}

double pt_optimizer_lr(const pt_optimizer *opt)
{
    return opt ? current_lr(opt) : 0.0;
}

int64_t pt_optimizer_step_count(const pt_optimizer *opt)
{
    return opt ? opt->step : 0;
}

PT_DEPRECATED_GETTER(double, pt_optimizer_get_lr, lr, pt_optimizer, opt, pt_optimizer_lr)

PT_DEPRECATED_GETTER(int64_t, pt_optimizer_get_step, step, pt_optimizer, opt, pt_optimizer_step_count)

int pt__optimizer_check_current(const pt_optimizer *o, const char *who)
{
    if (!o->model)
        return PT_OK;
    return pt__model_check_generation(o->model, o->generation, who, "optimizer");
}

int pt__optimizer_check_model(const pt_optimizer *o, const pt_model *model, const char *who)
{
    if (o->model && o->model != model)
        return pt__err(PT_EINVAL, "%s: opt was created for another model than the one given "
                      "(model %p, opt's model %p): pass the optimizer of this model", who,
                      (const void *)model, (const void *)o->model);
    return pt__optimizer_check_current(o, who);
}

int pt__optimizer_check_context(const pt_optimizer *o, const pt_context *ctx, const char *who)
{
    const pt_model *cm = pt__context_model(ctx);
    if (!o->model)
        return pt__err(PT_EINVAL, "%s: opt was created over explicit arrays, not for ctx's model", who);
    if (cm != o->model)
        return pt__err(PT_EINVAL, "%s: ctx and opt belong to different models (ctx's model %p, "
                      "opt's model %p): create the context and the optimizer for the same model",
                      who, (const void *)cm, (const void *)o->model);
    return pt__optimizer_check_current(o, who);
}

/* Point the parameters at the model's current gradients (the model's
 * structure is the one the optimizer was created for: checked by the
 * callers). */
static void refresh_grads(pt_optimizer *o)
{
    if (!o->model || pt__model_generation(o->model) != o->generation)
        return;
    for (size_t i = 0; i < o->n_params; i++)
        o->params[i].grad = pt__model_tensor(o->model, o->table_index[i])->grad;
}

const pt_opt_param *pt__optimizer_params(pt_optimizer *o, size_t *n)
{
    refresh_grads(o);
    *n = o->n_params;
    return o->params;
}

pt_dist *pt__optimizer_dist(const pt_optimizer *o)
{
    return o ? o->dist : NULL;
}

int pt_optimizer_set_dist(pt_optimizer *opt, pt_dist *d)
{
    PT_CHECK_NULL(opt);
    int st = pt__optimizer_take(opt, __func__);
    if (st)
        return st;
    opt->dist = d;
    pt__optimizer_give(opt);
    return PT_OK;
}

int pt__optimizer_take(pt_optimizer *opt, const char *fn)
{
    return pt__busy_enter(&opt->busy, fn, "optimizer", opt);
}

void pt__optimizer_give(pt_optimizer *opt)
{
    pt__busy_leave(&opt->busy);
}

int pt__train_take(pt_optimizer *opt, pt_context *ctx, const char *fn)
{
    int st = pt__optimizer_take(opt, fn);
    if (!st && ctx && (st = pt__context_take(ctx, fn)))
        pt__optimizer_give(opt);
    return st;
}

void pt__train_give(pt_optimizer *opt, pt_context *ctx)
{
    if (ctx)
        pt__context_give(ctx);
    pt__optimizer_give(opt);
}

static void zero_grads(pt_optimizer *o)
{
    for (size_t i = 0; i < o->n_params; i++)
        if (o->params[i].grad)
            memset(o->params[i].grad, 0, o->params[i].numel * sizeof(float));
}

/* The global L2 norm of the gradients (the parameters' sums of squares
 * added in order) and, in *gmax, their largest magnitude. */
static double grad_norm(const pt_optimizer *o, float *gmax)
{
    double ss = 0;
    float mx = 0.0f;
    for (size_t i = 0; i < o->n_params; i++) {
        float pm;
        ss += pt__opt_sum_squares(o->params[i].grad, o->params[i].numel, &pm, pt_get_num_threads());
        mx = pt__maxf(mx, pm);
    }
    *gmax = mx;
    return sqrt(ss);
}

/* The constants of AdamW step o->step (already counting the step). */
static pt_adamw_consts adamw_constants(const pt_optimizer *o, double lr)
{
    const pt_optimizer_options *p = &o->opts;
    const double bc1 = 1.0 - pow(p->beta1, (double)o->step);
    const double bc2 = 1.0 - pow(p->beta2, (double)o->step);
    return (pt_adamw_consts){ (float)p->beta1, (float)p->beta2, (float)p->eps, (float)(lr / bc1),
                              (float)sqrt(bc2) };
}

static float decay_of(const pt_optimizer *o, const pt_opt_param *q, double lr)
{
    return q->decay ? (float)(1.0 - lr * o->opts.weight_decay) : 1.0f;
}

/* Whether the bound on the values (pt__adamw_bounded) proves the AdamW update
 * finite, so the checking pass can be left out: the maxima are the ones
 * the optimizer's last update wrote, still valid when nothing else wrote
 * the moments (no state view handed out since) or the weights (the model's
 * weights_version is the one that update left). */
static bool adamw_proven_finite(const pt_optimizer *o, double lr, float clip, float gmax)
{
    if (!o->model || !o->maxima_valid || pt__model_weights_version(o->model) != o->w_version)
        return false;
    float dmax = 1.0f;
    for (size_t i = 0; i < o->n_params; i++)
        dmax = pt__maxf(dmax, fabsf(decay_of(o, &o->params[i], lr)));
    const pt_adamw_consts c = adamw_constants(o, lr);
    return pt__adamw_bounded(&o->maxima, gmax, clip, dmax, &c);
}

/* The first parameter whose AdamW update would write a non-finite weight or
 * moment (n_params when every value stays finite); nothing is written. */
static size_t adamw_finite(const pt_optimizer *o, double lr, float clip)
{
    const int nt = pt_get_num_threads();
    const pt_adamw_consts c = adamw_constants(o, lr);
    size_t off = 0;
    for (size_t i = 0; i < o->n_params; i++) {
        const pt_opt_param *q = &o->params[i];
        if (pt__adamw_span_bad(q->data, q->grad, o->m + off, o->v + off, q->numel, clip,
                              decay_of(o, q, lr), &c, nt))
            return i;
        off += q->numel;
    }
    return o->n_params;
}

/* One AdamW update of every parameter (o->step already counts it); the
 * gradients are zeroed as they are consumed, and with follow16 the model's
 * BF16 copies of the updated matrices are written in the same pass. */
static void adamw_update(pt_optimizer *o, double lr, float clip, bool follow16)
{
    const int nt = pt_get_num_threads();
    const pt_adamw_consts c = adamw_constants(o, lr);
    pt_opt_maxima mx = { 0.0f, 0.0f, 0.0f };
    size_t off = 0;
    for (size_t i = 0; i < o->n_params; i++) {
        pt_opt_param *q = &o->params[i];
        pt_bf16 *w16 = follow16 ? pt__model_bf16_copy(o->model, o->table_index[i]) : NULL;
        pt__adamw_span_update(q->data, q->grad, o->m + off, o->v + off, w16, q->numel, clip,
                             decay_of(o, q, lr), &c, &mx, nt);
        off += q->numel;
    }
    o->maxima = mx;
    o->maxima_valid = true;
}

/* As adamw_finite, for SGD. */
static size_t sgd_finite(const pt_optimizer *o, double lr, float clip)
{
    const int nt = pt_get_num_threads();
    const float mom = (float)o->opts.momentum, flr = (float)lr;
    const bool first = o->step == 1;
    size_t off = 0;
    for (size_t i = 0; i < o->n_params; i++) {
        const pt_opt_param *q = &o->params[i];
        const float wd = q->decay ? (float)o->opts.weight_decay : 0.0f;
        if (pt__sgd_span_bad(q->data, q->grad, o->m + off, q->numel, clip, wd, mom, first, flr, nt))
            return i;
        off += q->numel;
    }
    return o->n_params;
}

/* One SGD (momentum) update of every parameter (o->step already counts it). */
static void sgd_update(pt_optimizer *o, double lr, float clip)
{
    const int nt = pt_get_num_threads();
    const float mom = (float)o->opts.momentum, flr = (float)lr;
    const bool first = o->step == 1;
    size_t off = 0;
    for (size_t i = 0; i < o->n_params; i++) {
        pt_opt_param *q = &o->params[i];
        const float wd = q->decay ? (float)o->opts.weight_decay : 0.0f;
        pt__sgd_span_update(q->data, q->grad, o->m + off, q->numel, clip, wd, mom, first, flr, nt);
        off += q->numel;
    }
}

static int optimizer_step(pt_step_stats *stats, pt_optimizer *opt);

int pt_optimizer_step(pt_step_stats *stats, pt_optimizer *opt)
{
    PT_CHECK_NULL(opt);
    int st = pt__optimizer_take(opt, __func__);
    if (st)
        return st;
    st = optimizer_step(stats, opt);
    pt__optimizer_give(opt);
    return st;
}

static int optimizer_step(pt_step_stats *stats, pt_optimizer *opt)
{
    pt_dist *d = opt->dist;
    if (d && pt_dist_size(d) > 1) {
        /* a data-parallel job: every rank's outcome, then the gradients
         * summed over the ranks, as pt_sft_step and pt_grpo_step do */
        int st = pt__struct_check_out(stats, sizeof(pt_step_stats), "pt_optimizer_step", "pt_step_stats_init");
        if (!st)
            st = pt__optimizer_check_current(opt, "pt_optimizer_step");
        int64_t step = opt->step;
        pt__dist_set_step(d, step + 1);
        if ((st = pt__comm_agree(NULL, d, st, "pt_optimizer_step")) || (st = pt__dist_allreduce_grads(d, opt)))
            return st;
    }
    return pt__optimizer_apply(stats, opt);
}

int pt__optimizer_apply(pt_step_stats *stats, pt_optimizer *opt)
{
    int st = pt__struct_check_out(stats, sizeof(pt_step_stats), "pt_optimizer_step", "pt_step_stats_init");
    if (st || (st = pt__optimizer_check_current(opt, "pt_optimizer_step")))
        return st;
    refresh_grads(opt);
    for (size_t i = 0; i < opt->n_params; i++)
        if (!opt->params[i].grad)
            return pt__err(PT_ESTATE, "pt_optimizer_step: no gradient for '%s' (run a backward pass first)",
                          opt->params[i].name ? opt->params[i].name : "?");
    pt_step_stats local;
    pt_step_stats_init(&local);
    float gmax;
    double norm = grad_norm(opt, &gmax);
    double lr = current_lr(opt);
    local.grad_norm = norm;
    local.lr = lr;
    if (!isfinite(norm)) {
        opt->skipped++;
        pt__log(PT_LOG_WARN, "optimizer step %lld skipped: gradient norm is %s (weights and moments unchanged)",
               (long long)opt->step + 1, isnan(norm) ? "NaN" : "infinite");
        zero_grads(opt);
        local.skipped = true;
        local.skip_reason = PT_SKIP_NONFINITE_GRAD;
    } else {
        float clip = 1.0f;
        if (opt->opts.max_grad_norm > 0) {
            double c = opt->opts.max_grad_norm / (norm + 1e-6);
            if (c < 1.0)
                clip = (float)c;
        }
        /* Check the values the update would write before writing any:
         * a step that would leave a non-finite weight or moment is skipped
         * with the weights, moments and step count as they were. */
        opt->step++;
        const bool adamw = opt->opts.type == PT_OPTIMIZER_ADAMW;
        size_t bad = opt->n_params;
        if (!adamw)
            bad = sgd_finite(opt, lr, clip);
        else if (!adamw_proven_finite(opt, lr, clip, gmax))
            bad = adamw_finite(opt, lr, clip);
        if (bad < opt->n_params) {
            opt->step--;
            opt->skipped++;
            const char *name = opt->params[bad].name ? opt->params[bad].name : "?";
            pt__log(PT_LOG_WARN, "optimizer step %lld skipped: the update would make '%s' non-finite "
                   "(lr %g; weights and moments unchanged)", (long long)opt->step + 1, name, lr);
            local.skipped = true;
            local.skip_reason = PT_SKIP_NONFINITE_UPDATE;
            zero_grads(opt);
        } else if (adamw) {
            /* the BF16 copies of mixed precision are refreshed in the same
             * pass when they were current (else before the next forward) */
            const bool follow16 = opt->model && pt__model_bf16_following(opt->model);
            adamw_update(opt, lr, clip, follow16);
            pt_model_weights_changed(opt->model);
            if (follow16)
                pt__model_bf16_followed(opt->model);
            opt->w_version = opt->model ? pt__model_weights_version(opt->model) : 0;
        } else {
            sgd_update(opt, lr, clip);
            pt_model_weights_changed(opt->model); /* BF16 copies follow */
            zero_grads(opt);
        }
    }
    local.step = opt->step;
    local.skipped_total = opt->skipped;
    pt__struct_write(stats, &local);
    return PT_OK;
}

void pt__optimizer_state_view(pt_opt_state_view *out, pt_optimizer *o)
{
    o->maxima_valid = false; /* the holder may write the moments */
    out->m = o->m;
    out->v = o->v;
    out->numel_total = o->numel_total;
    out->step = o->step;
    out->skipped = o->skipped;
}

int pt__optimizer_restore_counters(pt_optimizer *o, int64_t step, int64_t skipped)
{
    if (step < 0 || skipped < 0)
        return pt__err(PT_ERANGE, "optimizer counters: step %lld and skipped steps %lld must not be negative",
                      (long long)step, (long long)skipped);
    o->step = step;
    o->skipped = skipped;
    return PT_OK;
}

void pt__optimizer_zero_grads(pt_optimizer *o)
{
    if (o->model && pt__model_generation(o->model) != o->generation)
        return; /* its gradient views are gone with the old tensor table */
    refresh_grads(o);
    zero_grads(o);
}

void pt__optimizer_record_skip(pt_optimizer *o, const char *reason)
{
    o->skipped++;
    pt__log(PT_LOG_WARN, "optimizer step %lld skipped: %s (weights and moments unchanged)",
           (long long)o->step + 1, reason);
    pt__optimizer_zero_grads(o);
}

pt_model *pt__optimizer_model(const pt_optimizer *o)
{
    return o->model;
}

const pt_optimizer_options *pt__optimizer_options_of(const pt_optimizer *o)
{
    return &o->opts;
}

int pt__optimizer_set_schedule(pt_optimizer *o, double lr, int schedule, int64_t warmup_steps,
                              int64_t total_steps, double min_lr_ratio)
{
    pt_optimizer_options n = o->opts;
    n.lr = lr;
    n.schedule = schedule;
    n.warmup_steps = warmup_steps;
    n.total_steps = total_steps;
    n.min_lr_ratio = min_lr_ratio;
    int st = check_options(&n);
    if (st)
        return st;
    o->opts = n;
    return PT_OK;
}

static const pt_enum_entry k_optimizer_type_names[] = {
    { PT_OPTIMIZER_ADAMW, "adamw" },
    { PT_OPTIMIZER_SGD, "sgd" },
};
PT_ENUM_NAME_FUNCS(pt_optimizer_type, k_optimizer_type_names, "optimizer type")

static const pt_enum_entry k_schedule_type_names[] = {
    { PT_SCHEDULE_CONSTANT, "constant" },
    { PT_SCHEDULE_LINEAR, "linear" },
    { PT_SCHEDULE_COSINE, "cosine" },
};
PT_ENUM_NAME_FUNCS(pt_schedule_type, k_schedule_type_names, "schedule")

static const pt_enum_entry k_skip_reason_names[] = {
    { PT_SKIP_NONE, "none" },
    { PT_SKIP_NO_TOKENS, "no_tokens" },
    { PT_SKIP_NONFINITE_LOSS, "nonfinite_loss" },
    { PT_SKIP_NONFINITE_GRAD, "nonfinite_grad" },
    { PT_SKIP_NONFINITE_UPDATE, "nonfinite_update" },
    { PT_SKIP_NO_REWARDS, "no_rewards" },
};
PT_ENUM_NAME_FUNCS(pt_skip_reason, k_skip_reason_names, "skip reason")
