/* BF16 in the model (pt_model_set_bf16) on the real stories260K model, on
 * every kernel path this CPU runs (the others are named as skipped):
 *  - a frozen BF16 base gives the logits of the FP32 model whose matrices
 *    were rounded to BF16 (exactly up to FP32 rounding where BF16 is widened,
 *    within 2e-2 relative L2 where products are BF16), and the PyTorch
 *    reference logits within 2e-2;
 *  - PT_BF16_ON on a trainable model is FP32 itself where the CPU has no
 *    BF16 arithmetic (bit for bit) and mixed precision where it has;
 *  - the mixed-precision SFT loss curve over 200 steps (activations kept in
 *    BF16: the context's default) stays within 2% of FP32's at every step;
 *  - LoRA on a BF16 base trains like LoRA on the rounded FP32 base; merging
 *    restores FP32; saving writes the BF16 values widened exactly;
 *  - greedy generation on a BF16 base equals the rounded FP32 model's.
 * Exits 77 (skipped, loudly) without the shared data. */
#include "stories.h"
#include "testfs.h"

#include "model/transformer.h"
#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "posttrain/posttrain.h"

#include <math.h>
#include <sys/stat.h>

static char model_dir[4096];
static int32_t *ref_ids;
static int n_ref;
static float *ref_logits; /* [n_ref, 512] */
static int32_t *text_ids; /* 800 sampled stories of 49 tokens (SFT data) */
static int n_text;

#define V 512

static double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static void logits_of(pt_model *m, float *out)
{
    pt_context *ctx = NULL;
    ck_assert_ok(pt_context_create(&ctx, m, 1, n_ref));
    pt_batch b;
    ck_assert_ok(pt_batch_init(&b));
    b.batch = 1;
    b.seq = n_ref;
    b.input_ids = ref_ids;
    ck_assert_ok(pt_model_forward(ctx, &b, NULL, out));
    pt_context_free(ctx);
}

/* Round every matrix of m to BF16 in place (the reference for a BF16 base). */
static void round_matrices(pt_model *m)
{
    size_t n = 0;
    n = pt_model_tensor_count(m);
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info t;
        pt_tensor_info_init(&t);
        ck_assert_ok(pt_model_tensor_info(&t, m, i));
        if (t.ndim != 2 || t.adapter)
            continue;
        for (size_t j = 0; j < t.numel; j++)
            t.data[j] = pt__bf16_to_f32(pt__f32_to_bf16(t.data[j]));
    }
    pt_model_weights_changed(m);
}

/* 2-D base tensors have no FP32 view (stored), 1-D ones have. */
static void check_views(pt_model *m, bool stored)
{
    size_t n = 0;
    n = pt_model_tensor_count(m);
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info t;
        pt_tensor_info_init(&t);
        ck_assert_ok(pt_model_tensor_info(&t, m, i));
        if (t.adapter)
            continue;
        if (t.ndim == 2 && stored)
            ck_assert_msg(t.data == NULL, "%s has an FP32 view", t.name);
        else
            ck_assert_msg(t.data != NULL, "%s has no FP32 view", t.name);
    }
}

static int paths_run;
static char ran[64], skipped[64];

/* Run fn once per path this CPU has, lowest first; the others are named. */
#define FOR_EACH_PATH(lv)                                                                          \
    for (int lv = 0; lv < PT_CPU_LEVELS; lv++)                                                     \
        if (lv > (int)pt__cpu_detected()) {                                                         \
            printf("bf16: skipped path %s (this CPU runs up to %s)\n",                            \
                   pt__cpu_level_str((pt_cpu_level)lv), pt__cpu_level_str(pt__cpu_detected()));      \
        } else if (pt_set_cpu_path(pt__cpu_level_str((pt_cpu_level)lv)) != PT_OK) {                \
            ck_abort_msg("cannot force %s: %s", pt__cpu_level_str((pt_cpu_level)lv),               \
                         pt_last_error());                                                         \
        } else

START_TEST(test_forward)
{
    const size_t nl = (size_t)n_ref * V;
    float *l32 = malloc(nl * sizeof *l32), *lr = malloc(nl * sizeof *lr);
    float *lf = malloc(nl * sizeof *lf), *lon = malloc(nl * sizeof *lon);
    pt_model *m32 = pt_test_load_stories(model_dir), *mr = pt_test_load_stories(model_dir);
    round_matrices(mr);
    FOR_EACH_PATH(lv)
    {
        logits_of(m32, l32);
        logits_of(mr, lr);
        pt_model *mf = pt_test_load_stories(model_dir), *mon = pt_test_load_stories(model_dir);
        ck_assert_ok(pt_model_set_bf16(mf, PT_BF16_FROZEN));
        ck_assert_int_eq(pt_model_get_bf16(mf), PT_BF16_FROZEN);
        check_views(mf, true);
        uint64_t trainable = 1;
        trainable = pt_model_trainable_param_count(mf);
        ck_assert_uint_eq(trainable, 0);
        logits_of(mf, lf);
        ck_assert_ok(pt_model_set_bf16(mon, PT_BF16_ON));
        check_views(mon, false);
        logits_of(mon, lon);
        double e_round = rel_l2(lf, lr, nl), e_ref = rel_l2(lf, ref_logits, nl);
        double e_on = rel_l2(lon, l32, nl), e32 = rel_l2(l32, ref_logits, nl);
        printf("bf16 %s: rel L2 of logits: FP32 vs PyTorch %.2e; BF16 base vs rounded FP32 %.2e, "
               "vs PyTorch %.2e; ON (trainable) vs FP32 %.2e\n",
               pt_cpu_path(), e32, e_round, e_ref, e_on);
        ck_assert_double_le(e_ref, 2e-2);
        if (pt__cpu_bf16_compute()) {
            ck_assert_double_le(e_round, 2e-2);
            ck_assert_double_gt(e_on, 1e-6); /* mixed precision really ran */
            ck_assert_double_le(e_on, 2e-2);
        } else {
            ck_assert_double_le(e_round, 1e-6); /* widening is exact */
            ck_assert_mem_eq(lon, l32, nl * sizeof *l32); /* ON without BF16 arithmetic is FP32 */
        }
        /* back to FP32: the views return with the rounded values */
        ck_assert_ok(pt_model_set_bf16(mf, PT_BF16_OFF));
        check_views(mf, false);
        logits_of(mf, lf);
        ck_assert_double_le(rel_l2(lf, lr, nl), 1e-6);
        pt_model_free(mf);
        pt_model_free(mon);
        strcat(ran, " ");
        strcat(ran, pt_cpu_path());
        paths_run++;
    }
    pt_set_cpu_path(NULL);
    pt_model_free(m32);
    pt_model_free(mr);
    free(l32);
    free(lr);
    free(lf);
    free(lon);
}
END_TEST

/* In mixed precision the optimizer writes the BF16 copies as it updates
 * the FP32 masters: every copy equals its master rounded to BF16, and is
 * marked current (the next forward converts nothing). */
static void check_copies_follow(pt_model *m)
{
    if (!pt__cpu_bf16_compute() || m->bf16_mode != PT_BF16_ON || m->bf16_stored)
        return;
    ck_assert_msg(m->bf16_version == m->weights_version, "BF16 copies not marked current");
    size_t checked = 0;
    for (size_t i = 0; i < pt__model_base_tensor_count(m); i++) {
        const pt_tensor_ref *t = &m->tensors[i];
        if (t->ndim != 2)
            continue;
        const pt_bf16 *c = m->params16 + m->offsets[i];
        for (size_t j = 0; j < t->numel; j++)
            ck_assert_msg(c[j] == pt__f32_to_bf16(t->data[j]), "%s[%zu]: copy %04x, master %a",
                          t->name, j, c[j], (double)t->data[j]);
        checked += t->numel;
    }
    ck_assert_uint_gt(checked, 0);
}

/* n_steps of SFT on the sampled stories (4 a step); losses out.  stash:
 * the context's BF16 activations, -1 its default (on for a frozen BF16
 * base, off for full mixed precision). */
static void sft_curve(pt_model *m, int n_steps, double *losses, int stash)
{
    pt_context *ctx = NULL;
    ck_assert_ok(pt_context_create(&ctx, m, 4, 48));
    ck_assert(pt_context_get_bf16_activations(ctx) ==
              (pt_model_get_bf16(m) == PT_BF16_FROZEN ||
               (pt_model_get_bf16(m) == PT_BF16_ON && pt_model_has_lora(m))));
    if (stash >= 0)
        ck_assert_ok(pt_context_set_bf16_activations(ctx, stash == 1));
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = 3e-4;
    pt_optimizer *opt = NULL;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    int32_t ids[4 * 48], tgt[4 * 48];
    for (int s = 0; s < n_steps; s++) {
        for (int r = 0; r < 4; r++)
            for (int t = 0; t < 48; t++) {
                const int32_t *story = text_ids + (size_t)((s * 4 + r) % 800) * 49;
                ids[r * 48 + t] = story[t];
                tgt[r * 48 + t] = story[t + 1];
            }
        pt_batch b;
        pt_batch_init(&b);
        b.batch = 4;
        b.seq = 48;
        b.input_ids = ids;
        b.targets = tgt;
        pt_sft_stats st;
        pt_sft_stats_init(&st);
        const float *w = NULL;
        ck_assert_ok(pt_sft_step(&st, opt, ctx, &b, &w, 1));
        ck_assert(!st.skipped);
        losses[s] = st.loss;
    }
    check_copies_follow(m);
    pt_optimizer_free(opt);
    pt_context_free(ctx);
}

START_TEST(test_sft_curve)
{
    /* the sanitizer build checks the same code for memory errors over 40 */
    enum { STEPS = 200, STEPS_FP32 = 20, STEPS_SAN = 40 };
    double l32[STEPS], lbf[STEPS];
    FOR_EACH_PATH(lv)
    {
        /* the 200-step curve where products are BF16; elsewhere BF16 ON is
         * FP32 itself, which 20 steps show bit for bit.  Both runs keep
         * their activations in FP32 (full mixed precision's default; the
         * BF16 activations' curve: test_lora_base, tests/model/test_stash.c). */
        const int steps = !pt__cpu_bf16_compute() ? STEPS_FP32 : PT_TEST_SANITIZED ? STEPS_SAN : STEPS;
        pt_model *m32 = pt_test_load_stories(model_dir), *mbf = pt_test_load_stories(model_dir);
        ck_assert_ok(pt_model_set_bf16(mbf, PT_BF16_ON));
        sft_curve(m32, steps, l32, -1);
        sft_curve(mbf, steps, lbf, -1);
        double worst = 0;
        for (int s = 0; s < steps; s++) {
            double rel = fabs(lbf[s] - l32[s]) / l32[s];
            worst = rel > worst ? rel : worst;
            ck_assert_msg(rel <= 0.02, "%s step %d: BF16 loss %g, FP32 %g", pt_cpu_path(), s + 1,
                          lbf[s], l32[s]);
            if (!pt__cpu_bf16_compute())
                ck_assert_msg(lbf[s] == l32[s], "%s step %d: %g != %g without BF16 arithmetic",
                              pt_cpu_path(), s + 1, lbf[s], l32[s]);
        }
        if (pt__cpu_bf16_compute())
            ck_assert_double_gt(worst, 0); /* mixed precision really ran */
        printf("bf16 %s: SFT %d steps%s, loss %.4f -> %.4f (FP32) / %.4f (BF16), worst step "
               "%.3f%% apart\n", pt_cpu_path(), steps,
               steps == STEPS_SAN ? " (sanitizer build; the release suite runs 200)" : "", l32[0],
               l32[steps - 1], lbf[steps - 1], 100 * worst);
        pt_model_free(m32);
        pt_model_free(mbf);
    }
    pt_set_cpu_path(NULL);
}
END_TEST

START_TEST(test_lora_base)
{
    enum { STEPS = 30, STEPS_SAN = 10 }; /* the sanitizer build: 10 */
    double lr_[STEPS], lb[STEPS];
    const int steps = PT_TEST_SANITIZED ? STEPS_SAN : STEPS;
    pt_lora_options lo;
    pt_lora_options_init(&lo);
    lo.rank = 4;
    lo.targets = PT_LORA_ALL;
    FOR_EACH_PATH(lv)
    {
        pt_model *mr = pt_test_load_stories(model_dir), *mb = pt_test_load_stories(model_dir);
        round_matrices(mr);
        ck_assert_ok(pt_model_add_lora(mr, &lo));
        ck_assert_ok(pt_model_set_bf16(mb, PT_BF16_ON));
        ck_assert_ok(pt_model_add_lora(mb, &lo));
        check_views(mb, true); /* the frozen base went to BF16 */
        sft_curve(mr, steps, lr_, 1); /* BF16 activations as mb's default */
        sft_curve(mb, steps, lb, -1);
        for (int s = 0; s < steps; s++) {
            double rel = fabs(lb[s] - lr_[s]) / lr_[s];
            ck_assert_msg(rel <= (pt__cpu_bf16_compute() ? 0.02 : 1e-5),
                          "%s LoRA step %d: BF16 base %g, rounded FP32 base %g", pt_cpu_path(),
                          s + 1, lb[s], lr_[s]);
        }
        /* merging widens the base back to FP32 */
        const size_t nl = (size_t)n_ref * V;
        float *before = malloc(nl * sizeof *before), *after = malloc(nl * sizeof *after);
        logits_of(mb, before);
        ck_assert_ok(pt_model_merge_lora(mb));
        check_views(mb, false);
        logits_of(mb, after);
        double e = rel_l2(after, before, nl);
        ck_assert_double_le(e, pt__cpu_bf16_compute() ? 2e-2 : 1e-5);
        printf("bf16 %s: LoRA on a BF16 base, %d steps, loss %.4f -> %.4f; merged vs unmerged %.2e\n",
               pt_cpu_path(), steps, lb[0], lb[steps - 1], e);
        free(before);
        free(after);
        pt_model_free(mr);
        pt_model_free(mb);
    }
    pt_set_cpu_path(NULL);
}
END_TEST

START_TEST(test_load_straight_to_bf16)
{
    /* pt_model_load_options.bf16 = PT_BF16_FROZEN reads each matrix into
     * BF16 as it loads: the same model as loading in FP32 and freezing in
     * BF16 after (same logits, bit for bit), base frozen and stored; a
     * LoRA adapter trains on it; ON equals pt_model_set_bf16(ON) after. */
    const size_t nl = (size_t)n_ref * V;
    float *want = malloc(nl * sizeof *want), *got = malloc(nl * sizeof *got);
    for (int mode = PT_BF16_ON; mode <= PT_BF16_FROZEN; mode++) {
        pt_model *ref = pt_test_load_stories(model_dir), *m = NULL;
        ck_assert_ok(pt_model_set_bf16(ref, mode));
        pt_model_load_options o;
        pt_model_load_options_init(&o);
        o.bf16 = mode;
        ck_assert_ok(pt_model_load_dir(&m, model_dir, &o));
        ck_assert_int_eq(pt_model_get_bf16(m), mode);
        check_views(m, mode == PT_BF16_FROZEN);
        logits_of(ref, want);
        logits_of(m, got);
        ck_assert_int_eq(memcmp(want, got, nl * sizeof *got), 0);
        if (mode == PT_BF16_FROZEN) {
            /* LoRA on it: the curve of LoRA added to an FP32 load, then
             * BF16 on (the frozen base converted then), step for step */
            pt_model *r2 = pt_test_load_stories(model_dir);
            pt_lora_options lo;
            pt_lora_options_init(&lo);
            lo.rank = 4;
            ck_assert_ok(pt_model_add_lora(m, &lo));
            ck_assert_ok(pt_model_set_bf16(m, PT_BF16_ON));
            ck_assert_ok(pt_model_add_lora(r2, &lo));
            ck_assert_ok(pt_model_set_bf16(r2, PT_BF16_ON));
            check_views(m, true);
            double la[10], lb[10];
            sft_curve(m, 10, la, -1);
            sft_curve(r2, 10, lb, -1);
            for (int k = 0; k < 10; k++)
                ck_assert_msg(la[k] == lb[k], "LoRA step %d: %g != %g", k + 1, la[k], lb[k]);
            pt_model_free(r2);
        }
        pt_model_free(ref);
        pt_model_free(m);
    }
    pt_model_load_options o;
    pt_model_load_options_init(&o);
    o.bf16 = 3;
    pt_model *bad = NULL;
    ck_assert_int_eq(pt_model_load_dir(&bad, model_dir, &o), PT_EINVAL);
    ck_assert_ptr_null(bad);
    free(want);
    free(got);
}
END_TEST

START_TEST(test_save_and_generate)
{
    pt_model *mb = pt_test_load_stories(model_dir), *mr = pt_test_load_stories(model_dir);
    ck_assert_ok(pt_model_set_bf16(mb, PT_BF16_FROZEN));
    round_matrices(mr);
    char dir[] = "/tmp/pt_bf16_save_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    pt_model_save_options so;
    pt_model_save_options_init(&so);
    so.copy_tokenizer = false;
    ck_assert_ok(pt_model_save_dir(mb, dir, &so));
    pt_model *back = pt_test_load_stories(dir);
    size_t n = 0;
    n = pt_model_tensor_count(back);
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info a, b;
        pt_tensor_info_init(&a);
        pt_tensor_info_init(&b);
        ck_assert_ok(pt_model_tensor_info(&a, back, i));
        ck_assert_ok(pt_model_tensor_info(&b, mr, i));
        ck_assert_mem_eq(a.data, b.data, a.numel * sizeof(float)); /* FP32 file, BF16 values */
    }
    pt_model_free(back);
    pt_test_rm_rf(dir);
    FOR_EACH_PATH(lv)
    {
        pt_generator *gb = NULL, *gr = NULL;
        ck_assert_ok(pt_generator_create(&gb, mb, 1, 64));
        ck_assert_ok(pt_generator_create(&gr, mr, 1, 64));
        pt_generate_options o;
        pt_generate_options_init(&o);
        o.temperature = 0.0f;
        o.max_new_tokens = 60;
        const int32_t bos = 1, len = 1;
        int32_t tb[60], tr[60], cb, cr;
        ck_assert_ok(pt_generate(gb, &bos, &len, 1, &o, tb, &cb, NULL, NULL));
        ck_assert_ok(pt_generate(gr, &bos, &len, 1, &o, tr, &cr, NULL, NULL));
        int same = 0;
        while (same < cb && same < cr && tb[same] == tr[same])
            same++;
        printf("bf16 %s: greedy on the BF16 base: %d of 60 ids as the rounded FP32 model's\n",
               pt_cpu_path(), same);
        /* decoding widens BF16 and computes in FP32 on every path */
        ck_assert_int_eq(same, 60);
        pt_generator_free(gb);
        pt_generator_free(gr);
    }
    pt_set_cpu_path(NULL);
    pt_model_free(mb);
    pt_model_free(mr);
}
END_TEST

START_TEST(test_bad_mode)
{
    pt_model *m = pt_test_load_stories(model_dir);
    ck_assert_int_eq(pt_model_set_bf16(m, 3), PT_EINVAL);
    ck_assert(strstr(pt_last_error(), "pt_model_set_bf16") != NULL);
    ck_assert_int_eq(pt_model_set_bf16(NULL, 1), PT_EINVAL);
    ck_assert_int_eq(pt_model_get_bf16(m), PT_BF16_OFF);
    /* an optimizer made before the base was frozen is refused after */
    pt_optimizer *opt = NULL;
    ck_assert_ok(pt_optimizer_create(&opt, m, NULL));
    ck_assert_ok(pt_model_set_bf16(m, PT_BF16_FROZEN));
    pt_step_stats st;
    pt_step_stats_init(&st);
    ck_assert_int_eq(pt_optimizer_step(&st, opt), PT_ESTATE);
    pt_optimizer_free(opt);
    ck_assert_int_eq(pt_optimizer_create(&opt, m, NULL), PT_EINVAL); /* nothing trainable */
    pt_model_free(m);
    printf("bf16: paths run:%s\n", ran);
}
END_TEST

static void load_reference(void)
{
    cJSON *j = pt_test_read_json(model_dir, "reference/logits.json");
    ref_ids = pt_test_json_ids(cJSON_GetObjectItem(j, "input_ids"), &n_ref);
    const cJSON *rows = cJSON_GetObjectItem(j, "logits"), *row, *v;
    ref_logits = malloc((size_t)n_ref * V * sizeof *ref_logits);
    size_t k = 0;
    cJSON_ArrayForEach(row, rows) cJSON_ArrayForEach(v, row) ref_logits[k++] = (float)v->valuedouble;
    ck_assert_uint_eq(k, (size_t)n_ref * V);
    cJSON_Delete(j);
    /* SFT data: 800 stories of 49 tokens sampled from the FP32 model (its own
     * distribution: the loss stays near its entropy instead of falling to 0
     * as a memorised text's would), no stop ids. */
    pt_model *m = pt_test_load_stories(model_dir);
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, 16, 49));
    pt_generate_options o;
    pt_generate_options_init(&o);
    o.max_new_tokens = 48;
    o.n_stop_ids = 0;
    o.seed = 5;
    n_text = 800 * 49;
    text_ids = malloc((size_t)n_text * sizeof *text_ids);
    int32_t bos[16], lens[16], tok[16 * 48], cnt[16];
    for (int i = 0; i < 16; i++)
        bos[i] = 1, lens[i] = 1;
    for (int c = 0; c < 50; c++) {
        o.stream_offset = (uint64_t)c * 16;
        ck_assert_ok(pt_generate(g, bos, lens, 16, &o, tok, cnt, NULL, NULL));
        for (int r = 0; r < 16; r++) {
            ck_assert_int_eq(cnt[r], 48);
            int32_t *dst = text_ids + (size_t)(c * 16 + r) * 49;
            dst[0] = 1;
            memcpy(dst + 1, tok + r * 48, 48 * sizeof *dst);
        }
    }
    pt_generator_free(g);
    pt_model_free(m);
}

int main(void)
{
    const char *shared = pt_test_shared_data("bf16");
    if (!shared)
        return 77;
    snprintf(model_dir, sizeof model_dir, "%s/models/stories260K", shared);
    struct stat sb;
    if (stat(model_dir, &sb) != 0) {
        fprintf(stderr, "SKIP bf16: %s not found\n", model_dir);
        return 77;
    }
    (void)skipped;
    Suite *s = suite_create("bf16");
    TCase *tc = tcase_create("stories260K");
    tcase_set_timeout(tc, 600);
    tcase_add_unchecked_fixture(tc, load_reference, NULL);
    tcase_add_test(tc, test_forward);
    tcase_add_test(tc, test_sft_curve);
    tcase_add_test(tc, test_lora_base);
    tcase_add_test(tc, test_load_straight_to_bf16);
    tcase_add_test(tc, test_save_and_generate);
    tcase_add_test(tc, test_bad_mode);
    suite_add_tcase(s, tc);
    int rc = pt_test_run(s);
    free(ref_ids);
    free(ref_logits);
    free(text_ids);
    return rc;
}
