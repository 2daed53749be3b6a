/* The SFT step and checkpoints on a tiny model built from a config. */
#include "testutil.h"
#include "testfs.h"

#include "core/core.h"
#include "io/fileio.h"
#include "model/model.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#define B 4
#define T 9
#define V 37

static pt_model *tiny_model(uint64_t seed)
{
    return pt_test_tiny_llama(V, seed);
}

static int32_t ids[B * T], tgt[B * T];
static float wts[B * T];

static void make_data(void)
{
    pt_rng r;
    pt__rng_seed(&r, 11);
    for (int i = 0; i < B * T; i++)
        ids[i] = (int32_t)pt__rng_below(&r, V);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int i = b * T + t;
            tgt[i] = t + 1 < T ? ids[i + 1] : -1;
            wts[i] = (t >= 3) ? 1.0f : 0.0f; /* completion-only: the prompt is 3 tokens */
        }
}

static pt_batch rows(int first, int count)
{
    pt_batch b;
    pt_batch_init(&b);
    b.batch = count;
    b.seq = T;
    b.input_ids = ids + first * T;
    b.targets = tgt + first * T;
    return b;
}

static void snapshot(const pt_model *m, float **out, size_t *n)
{
    size_t total = 0;
    for (size_t i = 0; i < pt_model_tensor_count(m); i++)
        total += pt__model_tensor(m, i)->numel;
    float *s = malloc(total * sizeof *s);
    size_t off = 0;
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        memcpy(s + off, t->data, t->numel * sizeof *s);
        off += t->numel;
    }
    *out = s;
    *n = total;
}

static pt_optimizer *sgd(pt_model *m)
{
    pt_optimizer_options o;
    pt_optimizer_options_init(&o);
    o.type = PT_OPTIMIZER_SGD;
    o.lr = 1.0;
    o.momentum = 0.0;
    o.max_grad_norm = 0.0;
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &o));
    return opt;
}

START_TEST(test_plain_gradient_step)
{
    /* SGD, lr 1, no momentum, no clipping: new weights = old - d(mean loss)/dw. */
    make_data();
    pt_model *m = tiny_model(1);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    pt_batch b = rows(0, B);
    float loss;
    ck_assert_ok(pt_model_zero_grad(m));
    ck_assert_ok(pt_model_loss(ctx, &b, wts, true, &loss));
    float *before, *grad;
    size_t n;
    snapshot(m, &before, &n);
    grad = malloc(n * sizeof *grad);
    size_t off = 0;
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        memcpy(grad + off, t->grad, t->numel * sizeof *grad);
        off += t->numel;
    }
    ck_assert_ok(pt_model_zero_grad(m));
    pt_optimizer *opt = sgd(m);
    pt_sft_stats st;
    pt_sft_stats_init(&st);
    const float *w[1] = { wts };
    ck_assert_ok(pt_sft_step(&st, opt, ctx, &b, w, 1));
    ck_assert(!st.skipped);
    ck_assert_double_eq_tol(st.loss, loss, 1e-6);
    ck_assert_double_eq(st.tokens, (double)(B * (T - 1 - 3) ));
    float *after;
    snapshot(m, &after, &n);
    double gn = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(fabsf(after[i] - (before[i] - grad[i])) <= 1e-6f * (1 + fabsf(before[i])),
                      "param %zu: %g vs %g", i, (double)after[i], (double)(before[i] - grad[i]));
        gn += (double)grad[i] * grad[i];
    }
    ck_assert_double_eq_tol(st.grad_norm, sqrt(gn), 1e-5 * sqrt(gn));
    ck_assert(gn > 0);
    free(before); free(after); free(grad);
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

START_TEST(test_accumulation_equals_big_batch)
{
    make_data();
    pt_model *m1 = tiny_model(2), *m2 = tiny_model(2);
    pt_context *c1, *c2;
    ck_assert_ok(pt_context_create(&c1, m1, B, T));
    ck_assert_ok(pt_context_create(&c2, m2, 2, T));
    pt_optimizer *o1 = sgd(m1), *o2 = sgd(m2);
    /* Unequal token counts per micro-batch: mask row 0 entirely. */
    float w2[B * T];
    memcpy(w2, wts, sizeof w2);
    for (int t = 0; t < T; t++)
        w2[t] = 0;
    pt_batch big = rows(0, B), micro[3] = { rows(0, 1), rows(1, 2), rows(3, 1) };
    const float *wb[1] = { w2 }, *wm[3] = { w2, w2 + T, w2 + 3 * T };
    pt_sft_stats s1, s2;
    pt_sft_stats_init(&s1);
    pt_sft_stats_init(&s2);
    ck_assert_ok(pt_sft_step(&s1, o1, c1, &big, wb, 1));
    ck_assert_ok(pt_sft_step(&s2, o2, c2, micro, wm, 3));
    ck_assert_double_eq_tol(s1.loss, s2.loss, 1e-6);
    ck_assert_double_eq(s1.tokens, s2.tokens);
    float *a, *b;
    size_t n;
    snapshot(m1, &a, &n);
    snapshot(m2, &b, &n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabsf(a[i] - b[i]) <= 2e-6f * (1 + fabsf(a[i])), "param %zu: %g vs %g", i, (double)a[i],
                      (double)b[i]);
    free(a); free(b);
    pt_optimizer_free(o1); pt_optimizer_free(o2);
    pt_context_free(c1); pt_context_free(c2);
    pt_model_free(m1); pt_model_free(m2);
}
END_TEST

START_TEST(test_nonfinite_loss_skips)
{
    make_data();
    pt_model *m = tiny_model(3);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    pt_optimizer_options o;
    pt_optimizer_options_init(&o);
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &o));
    const pt_tensor_ref *emb = pt__model_find_tensor(m, "model.embed_tokens.weight");
    ck_assert_ptr_nonnull(emb);
    emb->data[(size_t)ids[0] * 16] = INFINITY; /* poisons row 0's first token */
    float *before, *after;
    size_t n;
    snapshot(m, &before, &n);
    pt_batch b = rows(0, B);
    pt_sft_stats st;
    pt_sft_stats_init(&st);
    ck_assert_ok(pt_sft_step(&st, opt, ctx, &b, NULL, 1));
    ck_assert(st.skipped);
    ck_assert_int_eq(st.skipped_total, 1);
    ck_assert_int_eq(st.step, 0);
    snapshot(m, &after, &n);
    ck_assert_int_eq(memcmp(before, after, n * sizeof *before), 0);
    pt_opt_state_view sv;
    pt__optimizer_state_view(&sv, opt);
    for (size_t i = 0; i < sv.numel_total; i++)
        ck_assert(sv.m[i] == 0.0f && sv.v[i] == 0.0f);
    /* An all-masked batch is skipped too, without touching anything. */
    float zero[B * T] = { 0 };
    const float *wz[1] = { zero };
    emb->data[(size_t)ids[0] * 16] = 0.0f;
    ck_assert_ok(pt_sft_step(&st, opt, ctx, &b, wz, 1));
    ck_assert(st.skipped);
    ck_assert_int_eq(st.skipped_total, 2);
    /* Bad arguments. */
    ck_assert_status(pt_sft_step(&st, opt, ctx, &b, NULL, 0), PT_EINVAL, "n_micro");
    zero[5] = -1.0f;
    ck_assert_status(pt_sft_step(&st, opt, ctx, &b, wz, 1), PT_EINVAL, "weight 5");
    ck_assert_status(pt_sft_step(&st, NULL, ctx, &b, NULL, 1), PT_EINVAL, "NULL");
    free(before); free(after);
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

static int stop_now(void *p)
{
    (void)p;
    return 1;
}

START_TEST(test_cancel_between_microbatches)
{
    make_data();
    pt_model *m = tiny_model(4);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 2, T));
    pt_optimizer *opt = sgd(m);
    float *before, *after;
    size_t n;
    snapshot(m, &before, &n);
    pt_batch micro[2] = { rows(0, 2), rows(2, 2) };
    pt_set_abort_callback(stop_now, NULL);
    pt_sft_stats st;
    pt_sft_stats_init(&st);
    ck_assert_status(pt_sft_step(&st, opt, ctx, micro, NULL, 2), PT_ECANCELLED, "abort callback");
    pt_set_abort_callback(NULL, NULL);
    snapshot(m, &after, &n);
    ck_assert_int_eq(memcmp(before, after, n * sizeof *before), 0);
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        for (size_t j = 0; j < t->numel; j++)
            ck_assert_float_eq(t->grad[j], 0.0f);
    }
    free(before); free(after);
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

static void train_steps(pt_model *m, pt_optimizer *opt, pt_context *ctx, int from, int to, double *losses)
{
    for (int s = from; s < to; s++) {
        pt_batch b = rows(s % 2 * 2, 2);
        const float *w[1] = { wts + s % 2 * 2 * T };
        pt_sft_stats st;
        pt_sft_stats_init(&st);
        ck_assert_ok(pt_sft_step(&st, opt, ctx, &b, w, 1));
        losses[s] = st.loss;
    }
}

static pt_optimizer *adamw(pt_model *m)
{
    pt_optimizer_options o;
    pt_optimizer_options_init(&o);
    o.lr = 0.01;
    o.weight_decay = 0.1;
    o.schedule = PT_SCHEDULE_COSINE;
    o.warmup_steps = 2;
    o.total_steps = 8;
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &o));
    return opt;
}

/* Resume with every schedule: the checkpoint's schedule and lr replace the
 * resuming optimizer's (created here with other values on purpose), and the
 * weights after the remaining steps are bit-identical to an uninterrupted run. */
START_TEST(test_resume_every_schedule)
{
    make_data();
    struct { int type, schedule; int64_t warmup, total; double min_lr; } cases[] = {
        { PT_OPTIMIZER_ADAMW, PT_SCHEDULE_CONSTANT, 0, 0, 0 },
        { PT_OPTIMIZER_ADAMW, PT_SCHEDULE_CONSTANT, 4, 0, 0 },
        { PT_OPTIMIZER_ADAMW, PT_SCHEDULE_LINEAR, 0, 7, 0 },
        { PT_OPTIMIZER_SGD, PT_SCHEDULE_LINEAR, 2, 7, 0 },
        { PT_OPTIMIZER_ADAMW, PT_SCHEDULE_COSINE, 0, 7, 0.1 },
        { PT_OPTIMIZER_ADAMW, PT_SCHEDULE_COSINE, 2, 7, 0.2 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char root[] = "/tmp/pt_sched_XXXXXX";
        ck_assert_ptr_nonnull(mkdtemp(root));
        char dir[256];
        snprintf(dir, sizeof dir, "%s/ck", root);
        pt_optimizer_options o;
        pt_optimizer_options_init(&o);
        o.type = cases[c].type;
        o.lr = 0.02;
        o.schedule = cases[c].schedule;
        o.warmup_steps = cases[c].warmup;
        o.total_steps = cases[c].total;
        o.min_lr_ratio = cases[c].min_lr;
        double la[8], lb[8];
        pt_model *ma = tiny_model(5);
        pt_context *ca;
        ck_assert_ok(pt_context_create(&ca, ma, 2, T));
        pt_optimizer *oa;
        ck_assert_ok(pt_optimizer_create(&oa, ma, &o));
        train_steps(ma, oa, ca, 0, 3, la);
        ck_assert_ok(pt_checkpoint_save(ma, oa, NULL, dir));
        train_steps(ma, oa, ca, 3, 8, la);
        pt_optimizer_options other = o;
        other.lr = 0.5;
        other.schedule = PT_SCHEDULE_LINEAR;
        other.warmup_steps = 1;
        other.total_steps = 100;
        other.min_lr_ratio = 0;
        pt_model *mb = tiny_model(99);
        pt_context *cb;
        ck_assert_ok(pt_context_create(&cb, mb, 2, T));
        pt_optimizer *ob;
        ck_assert_ok(pt_optimizer_create(&ob, mb, &other));
        ck_assert_ok(pt_checkpoint_load(NULL, mb, ob, dir));
        double lr_b;
        lr_b = pt_optimizer_lr(ob);
        double want;
        ck_assert_ok(pt_schedule_factor(&want, o.schedule, 3, o.warmup_steps, o.total_steps, o.min_lr_ratio));
        ck_assert_msg(lr_b == o.lr * want, "case %zu: lr after resume %.17g, want %.17g", c, lr_b, o.lr * want);
        train_steps(mb, ob, cb, 3, 8, lb);
        for (int s = 3; s < 8; s++)
            ck_assert_msg(la[s] == lb[s], "case %zu step %d: loss %.9g vs resumed %.9g", c, s, la[s], lb[s]);
        float *a, *b;
        size_t n;
        snapshot(ma, &a, &n);
        snapshot(mb, &b, &n);
        ck_assert_msg(memcmp(a, b, n * sizeof *a) == 0, "case %zu: weights differ after resume", c);
        free(a);
        free(b);
        pt_optimizer_free(oa);
        pt_optimizer_free(ob);
        pt_context_free(ca);
        pt_context_free(cb);
        pt_model_free(ma);
        pt_model_free(mb);
        ck_assert_int_eq(pt_test_rm_rf(root), 0);
    }
}
END_TEST

/* A NaN in the weights or the moments is never saved: the checkpoint writer
 * and pt_model_save_dir refuse with PT_ENONFINITE naming the tensor, and what
 * was saved before is intact. */
START_TEST(test_nonfinite_never_saved)
{
    char root[] = "/tmp/pt_nonfin_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(root));
    char ck[256], md[256], path[512];
    snprintf(ck, sizeof ck, "%s/ck", root);
    snprintf(md, sizeof md, "%s/model", root);
    pt_model *m = tiny_model(5);
    pt_optimizer *opt = adamw(m);
    ck_assert_ok(pt_model_save_dir(m, md, NULL));
    snprintf(path, sizeof path, "%s/model.safetensors", md);
    char *before;
    size_t nbefore;
    ck_assert_ok(pt__read_file(&before, &nbefore, path, 1 << 26));
    size_t idx = 0;
    for (; idx < pt_model_tensor_count(m); idx++)
        if (pt__model_tensor(m, idx)->trainable && pt__model_tensor(m, idx)->ndim == 2)
            break;
    const pt_tensor_ref *r = pt__model_tensor(m, idx);
    float keep = r->data[3];
    r->data[3] = NAN;
    char want[512];
    snprintf(want, sizeof want, "tensor '%s' holds a non-finite value at element 3", r->name);
    ck_assert_status(pt_checkpoint_save(m, opt, NULL, ck), PT_ENONFINITE, want);
    struct stat sb;
    ck_assert_int_ne(stat(ck, &sb), 0);
    snprintf(want, sizeof want, "tensor '%s' holds NaN at element 3", r->name);
    ck_assert_status(pt_model_save_dir(m, md, NULL), PT_ENONFINITE, want);
    char *after;
    size_t nafter;
    ck_assert_ok(pt__read_file(&after, &nafter, path, 1 << 26));
    ck_assert(nafter == nbefore && memcmp(before, after, nafter) == 0);
    free(after);
    r->data[3] = INFINITY;
    snprintf(want, sizeof want, "tensor '%s' holds an infinity at element 3", r->name);
    ck_assert_status(pt_model_save_dir(m, md, NULL), PT_ENONFINITE, want);
    r->data[3] = keep;
    /* A non-finite moment. */
    pt_opt_state_view sv;
    pt__optimizer_state_view(&sv, opt);
    sv.v[0] = NAN;
    ck_assert_status(pt_checkpoint_save(m, opt, NULL, ck), PT_ENONFINITE, "the second moment of tensor");
    ck_assert_int_ne(stat(ck, &sb), 0);
    sv.v[0] = 0;
    ck_assert_ok(pt_checkpoint_save(m, opt, NULL, ck));
    /* A LoRA scale alpha / rank that overflows a float is refused up front. */
    pt_lora_options lo;
    pt_lora_options_init(&lo);
    lo.rank = 4;
    lo.alpha = 1e308;
    ck_assert_status(pt_model_add_lora(m, &lo), PT_ERANGE, "alpha 1e+308 / rank 4 = 2.5e+307 overflows");
    ck_assert(!pt_model_has_lora(m));
    free(before);
    pt_optimizer_free(opt);
    pt_model_free(m);
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
}
END_TEST

START_TEST(test_checkpoint_exact_resume)
{
    make_data();
    char root[] = "/tmp/pt_ckpt_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(root));
    char dir[256];
    snprintf(dir, sizeof dir, "%s/checkpoint-3", root);
    double la[8], lb[8];
    /* Run A: 8 steps straight, saving after step 3. */
    pt_model *ma = tiny_model(5);
    pt_context *ca;
    ck_assert_ok(pt_context_create(&ca, ma, 2, T));
    pt_optimizer *oa = adamw(ma);
    train_steps(ma, oa, ca, 0, 3, la);
    ck_assert_ok(pt_checkpoint_save(ma, oa, "{\"data_cursor\": 3}", dir));
    ck_assert_status(pt_checkpoint_save(ma, oa, NULL, dir), PT_ESTATE, "already exists");
    train_steps(ma, oa, ca, 3, 8, la);
    /* Run B: a fresh model with another seed, resumed from the checkpoint. */
    pt_model *mb = tiny_model(99);
    pt_context *cb;
    ck_assert_ok(pt_context_create(&cb, mb, 2, T));
    pt_optimizer *ob = adamw(mb);
    char *host;
    ck_assert_ok(pt_checkpoint_load(&host, mb, ob, dir));
    ck_assert_str_eq(host, "{\"data_cursor\":3}");
    pt_free(host);
    int64_t step;
    step = pt_optimizer_step_count(ob);
    ck_assert_int_eq(step, 3);
    train_steps(mb, ob, cb, 3, 8, lb);
    for (int s = 3; s < 8; s++)
        ck_assert_msg(la[s] == lb[s], "step %d: loss %.9g vs resumed %.9g", s, la[s], lb[s]);
    float *a, *b;
    size_t n;
    snapshot(ma, &a, &n);
    snapshot(mb, &b, &n);
    ck_assert_int_eq(memcmp(a, b, n * sizeof *a), 0);
    pt_opt_state_view va, vb;
    pt__optimizer_state_view(&va, oa);
    pt__optimizer_state_view(&vb, ob);
    ck_assert_int_eq(memcmp(va.m, vb.m, va.numel_total * 4), 0);
    ck_assert_int_eq(memcmp(va.v, vb.v, va.numel_total * 4), 0);
    free(a); free(b);

    /* Damage: a flipped byte, a truncated file, a missing manifest. */
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, PT_CKPT_OPTIMIZER);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, -3, SEEK_END);
    int c = fgetc(f);
    fseek(f, -3, SEEK_END);
    fputc(c ^ 0x10, f);
    fclose(f);
    float *keep;
    snapshot(mb, &keep, &n);
    ck_assert_status(pt_checkpoint_load(NULL, mb, ob, dir), PT_ECHECKSUM, "optimizer.safetensors has SHA-256");
    float *now;
    snapshot(mb, &now, &n);
    ck_assert_int_eq(memcmp(keep, now, n * 4), 0); /* verified before touching the model */
    free(keep); free(now);
    snapshot(mb, &keep, &n);
    ck_assert_int_eq(truncate(path, 100), 0);
    ck_assert_status(pt__checkpoint_verify(dir), PT_ECHECKSUM, "100 bytes");
    unlink(path);
    ck_assert_status(pt__checkpoint_verify(dir), PT_ECHECKSUM, "missing");
    snprintf(path, sizeof path, "%s/%s", dir, PT_CKPT_MANIFEST);
    unlink(path);
    ck_assert_status(pt_checkpoint_load(NULL, mb, ob, dir), PT_EFORMAT, "no MANIFEST.json");
    free(keep);
    /* Nothing but the final directory was left behind by the save. */
    DIR *d = opendir(root);
    struct dirent *e;
    int entries = 0;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            entries++;
    closedir(d);
    ck_assert_int_eq(entries, 1);
    /* An unwritable destination reports the path and leaves no temp dir. */
    ck_assert_status(pt_checkpoint_save(ma, oa, NULL, "/proc/pt-no-such/ckpt"), PT_EIO, "/proc/pt-no-such");
    snprintf(path, sizeof path, "%s/checkpoint-x", root);
    ck_assert_status(pt_checkpoint_save(ma, oa, "{not json", path), PT_EINVAL, "not valid JSON");
    ck_assert_int_eq(access(path, F_OK), -1);
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
    pt_optimizer_free(oa); pt_optimizer_free(ob);
    pt_context_free(ca); pt_context_free(cb);
    pt_model_free(ma); pt_model_free(mb);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sft");
    TCase *tc = tcase_create("sft");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_plain_gradient_step);
    tcase_add_test(tc, test_accumulation_equals_big_batch);
    tcase_add_test(tc, test_nonfinite_loss_skips);
    tcase_add_test(tc, test_cancel_between_microbatches);
    tcase_add_test(tc, test_checkpoint_exact_resume);
    tcase_add_test(tc, test_resume_every_schedule);
    tcase_add_test(tc, test_nonfinite_never_saved);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
