/* The SFT loop's helpers (train/sft_run.c): a step's micro-batches and a
 * rank's rows of each against the dataset's own batches and the rows of a
 * JSONL file, the number of steps of --steps/--epochs (hand-computed), the
 * evaluation rule, and the metrics row byte for byte. */
#include "testutil.h"

#include "model/context_internal.h"
#include "posttrain/run.h"
#include "posttrain/train.h"

#include <math.h>
#include <unistd.h>

static char *write_tmp(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/pt_sftrun_XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

/* Rows of 3, 2, 4, 5, 3 and 2 tokens: row k's ids are 10k+1, 10k+2, ... */
static const char *k_rows = "{\"input_ids\": [1, 2, 3]}\n"
                            "{\"input_ids\": [11, 12]}\n"
                            "{\"input_ids\": [21, 22, 23, 24]}\n"
                            "{\"input_ids\": [31, 32, 33, 34, 35]}\n"
                            "{\"input_ids\": [41, 42, 43]}\n"
                            "{\"input_ids\": [51, 52]}\n";
static const int k_len[] = { 3, 2, 4, 5, 3, 2 };

static pt_dataset *load(const char *path, int batch, int max_length, bool shuffle, bool pack, double eval)
{
    pt_dataset_options o;
    pt_dataset_options_init(&o);
    o.batch_size = batch;
    o.max_length = max_length;
    o.shuffle = shuffle;
    o.pack = pack;
    o.eval_fraction = eval;
    o.seed = 5;
    pt_dataset *d;
    ck_assert_ok(pt_dataset_load_jsonl(&d, path, NULL, &o));
    return d;
}

/* Row r of batch b (shard) is file row `row`: its ids, targets the next id
 * (-1 at the end and on padding), weight 1 on every target. */
static void expect_file_row(const pt_batch *b, const float *w, int r, int row)
{
    for (int t = 0; t < b->seq; t++) {
        int i = r * b->seq + t, n = k_len[row];
        int32_t id = t < n ? 10 * row + t + 1 : 0, tg = t + 1 < n ? 10 * row + t + 2 : -1;
        ck_assert_msg(b->input_ids[i] == id, "row %d pos %d: id %d, expected %d", r, t, b->input_ids[i], id);
        ck_assert_msg(b->targets[i] == tg, "row %d pos %d: target %d, expected %d", r, t, b->targets[i], tg);
        ck_assert_float_eq(w[i], tg >= 0 ? 1.0f : 0.0f);
    }
}

START_TEST(test_batches_file_rows)
{
    const char *path = write_tmp(k_rows);
    pt_dataset *d = load(path, 2, 16, false, false, 0);
    /* all rows, two micro-batches: file rows 0,1 (seq 3) and 2,3 (seq 5) */
    pt_sft_batches *mb;
    ck_assert_ok(pt_sft_batches_create(&mb, d, 2, 0, 0));
    ck_assert_int_eq(pt_sft_batches_count(mb), 2);
    ck_assert_ok(pt_sft_batches_fill(mb, d));
    const pt_batch *m = pt_sft_batches_micro(mb);
    const float *const *w = pt_sft_batches_weights(mb);
    ck_assert_int_eq(m[0].batch, 2);
    ck_assert_int_eq(m[0].seq, 3);
    ck_assert_int_eq(m[1].seq, 5);
    ck_assert_ptr_null(m[0].segments);
    for (int r = 0; r < 2; r++) {
        expect_file_row(&m[0], w[0], r, r);   /* still there after the second batch was drawn */
        expect_file_row(&m[1], w[1], r, 2 + r);
    }
    ck_assert_int_eq(pt_sft_batches_tokens(mb), 2 * 3 + 2 * 5);
    /* the next step: rows 4, 5 then the next epoch's 0, 1 */
    ck_assert_ok(pt_sft_batches_fill(mb, d));
    expect_file_row(&m[0], w[0], 0, 4);
    expect_file_row(&m[0], w[0], 1, 5);
    expect_file_row(&m[1], w[1], 1, 1);
    ck_assert_int_eq(pt_sft_batches_tokens(mb), 2 * 3 + 2 * 3);
    pt_sft_batches_free(mb);
    pt_dataset_free(d);

    /* a rank's share: row 1 of each micro-batch only, the whole job's tokens */
    d = load(path, 2, 16, false, false, 0);
    ck_assert_ok(pt_sft_batches_create(&mb, d, 2, 1, 1));
    ck_assert_ok(pt_sft_batches_fill(mb, d));
    m = pt_sft_batches_micro(mb);
    w = pt_sft_batches_weights(mb);
    ck_assert_int_eq(m[0].batch, 1);
    ck_assert_int_eq(m[1].batch, 1);
    expect_file_row(&m[0], w[0], 0, 1);
    expect_file_row(&m[1], w[1], 0, 3);
    ck_assert_int_eq(m[1].positions[2], 2);
    ck_assert_int_eq(pt_sft_batches_tokens(mb), 2 * 3 + 2 * 5);
    pt_sft_batches_free(mb);

    /* bad ranges and counts */
    mb = (pt_sft_batches *)1;
    ck_assert_status(pt_sft_batches_create(&mb, d, 2, 2, 0), PT_EINVAL, "row_begin");
    ck_assert_ptr_null(mb);
    ck_assert_status(pt_sft_batches_create(&mb, d, 2, 1, 2), PT_EINVAL, "row_count");
    ck_assert_status(pt_sft_batches_create(&mb, d, 0, 0, 0), PT_EINVAL, "n_micro");
    ck_assert_status(pt_sft_batches_create(&mb, NULL, 1, 0, 0), PT_EINVAL, "dataset");
    ck_assert_status(pt_sft_batches_fill(NULL, d), PT_EINVAL, "batches");
    ck_assert_ptr_null(pt_sft_batches_micro(NULL));
    ck_assert_int_eq(pt_sft_batches_count(NULL), 0);
    pt_sft_batches_free(NULL);
    /* made for rows of at most 3 tokens, filled from a dataset of 16 */
    pt_dataset_free(d);
    pt_dataset *small = load(path, 2, 3, false, false, 0);
    d = load(path, 2, 16, false, false, 0);
    ck_assert_ok(pt_sft_batches_create(&mb, small, 1, 0, 0));
    ck_assert_ok(pt_sft_batches_fill(mb, d));                 /* rows 0, 1: 3 tokens, fits */
    ck_assert_status(pt_sft_batches_fill(mb, d), PT_ESTATE, "does not fit");   /* rows 2, 3: 5 */
    pt_sft_batches_free(mb);
    pt_dataset_free(small);
    pt_dataset_free(d);
}
END_TEST

/* Shuffled and packed: each shard equals the rows of the dataset's own
 * batches drawn in the same order from a twin dataset. */
START_TEST(test_batches_match_dataset)
{
    const char *path = write_tmp(k_rows);
    for (int pack = 0; pack < 2; pack++) {
        pt_dataset *d = load(path, 3, 8, true, pack, 0), *twin = load(path, 3, 8, true, pack, 0);
        pt_sft_batches *mb;
        ck_assert_ok(pt_sft_batches_create(&mb, d, 3, 1, 2));
        for (int step = 0; step < 4; step++) {
            ck_assert_ok(pt_sft_batches_fill(mb, d));
            const pt_batch *m = pt_sft_batches_micro(mb);
            const float *const *w = pt_sft_batches_weights(mb);
            int64_t tokens = 0;
            for (int i = 0; i < 3; i++) {
                pt_batch b;
                pt_batch_init(&b);
                const float *bw;
                ck_assert_ok(pt_dataset_next_batch(&b, &bw, twin));
                tokens += (int64_t)b.batch * b.seq;
                ck_assert_int_eq(m[i].batch, 2);
                ck_assert_int_eq(m[i].seq, b.seq);
                ck_assert(pack ? m[i].segments != NULL : m[i].segments == NULL);
                size_t off = (size_t)b.seq, n = 2 * (size_t)b.seq;
                ck_assert_mem_eq(m[i].input_ids, b.input_ids + off, n * sizeof(int32_t));
                ck_assert_mem_eq(m[i].targets, b.targets + off, n * sizeof(int32_t));
                ck_assert_mem_eq(m[i].positions, b.positions + off, n * sizeof(int32_t));
                if (pack)
                    ck_assert_mem_eq(m[i].segments, b.segments + off, n * sizeof(int32_t));
                ck_assert_mem_eq(w[i], bw + off, n * sizeof(float));
            }
            ck_assert_int_eq(pt_sft_batches_tokens(mb), tokens);
        }
        pt_sft_batches_free(mb);
        pt_dataset_free(d);
        pt_dataset_free(twin);
    }
}
END_TEST

START_TEST(test_total_steps_and_eval)
{
    /* ten examples of 4 tokens each */
    char text[512] = "";
    for (int k = 0; k < 10; k++)
        strcat(text, "{\"input_ids\": [1, 2, 3, 4]}\n");
    const char *path = write_tmp(text);
    pt_dataset *d = load(path, 3, 10, true, false, 0), *p = load(path, 3, 10, true, true, 0);
    int64_t t = -1;
    ck_assert_ok(pt_sft_total_steps(&t, d, 2, 7, 0));
    ck_assert_int_eq(t, 7);                              /* --steps */
    ck_assert_ok(pt_sft_total_steps(&t, d, 2, 0, 0));
    ck_assert_int_eq(t, 2);                              /* 1 epoch: ceil(10 / (3 * 2)) */
    ck_assert_ok(pt_sft_total_steps(&t, d, 1, 0, 2.5));
    ck_assert_int_eq(t, 9);                              /* ceil(25 / 3) */
    ck_assert_ok(pt_sft_total_steps(&t, d, 4, 0, 0.01));
    ck_assert_int_eq(t, 1);                              /* at least one */
    /* packed: floor(10 / 4) = 2 examples a row */
    ck_assert_ok(pt_sft_total_steps(&t, p, 1, 0, 0));
    ck_assert_int_eq(t, 2);                              /* ceil(10 / (3 * 2)) */
    ck_assert_ok(pt_sft_total_steps(&t, p, 1, 0, 4));
    ck_assert_int_eq(t, 7);                              /* ceil(40 / 6) */
    ck_assert_status(pt_sft_total_steps(&t, d, 0, 0, 1), PT_EINVAL, "grad_accum");
    ck_assert_status(pt_sft_total_steps(&t, d, 1, -1, 0), PT_EINVAL, "steps");
    ck_assert_status(pt_sft_total_steps(&t, d, 1, 0, NAN), PT_EINVAL, "epochs");
    ck_assert_status(pt_sft_total_steps(&t, NULL, 1, 0, 1), PT_EINVAL, "dataset");

    /* evaluation: with a split, every eval_every steps and at the last */
    pt_dataset *e = load(path, 3, 10, true, false, 0.3);
    ck_assert(pt_sft_eval_due(e, 4, 10, 2));
    ck_assert(!pt_sft_eval_due(e, 3, 10, 2));
    ck_assert(pt_sft_eval_due(e, 10, 10, 0));
    ck_assert(pt_sft_eval_due(e, 10, 10, 3));
    ck_assert(!pt_sft_eval_due(e, 3, 10, 0));
    ck_assert(!pt_sft_eval_due(d, 10, 10, 1));          /* no split: never */
    ck_assert(!pt_sft_eval_due(NULL, 10, 10, 1));
    pt_dataset_free(e);
    pt_dataset_free(p);
    pt_dataset_free(d);
}
END_TEST

/* The context: whole batches with an evaluation split, else the rows
 * given; max_length tokens, or the model's 64 positions when fewer. */
START_TEST(test_context)
{
    const char *path = write_tmp(k_rows);
    pt_model *m = pt_test_tiny_llama(64, 1);
    pt_dataset *d = load(path, 4, 100, false, false, 0), *e = load(path, 4, 32, false, false, 0.5);
    pt_context *ctx;
    ck_assert_ok(pt_sft_context_create(&ctx, m, d, 2));
    ck_assert_int_eq(ctx->max_batch, 2);
    ck_assert_int_eq(ctx->max_seq, 64);
    pt_context_free(ctx);
    ck_assert_ok(pt_sft_context_create(&ctx, m, d, 0));
    ck_assert_int_eq(ctx->max_batch, 4);
    pt_context_free(ctx);
    ck_assert_ok(pt_sft_context_create(&ctx, m, e, 1));
    ck_assert_int_eq(ctx->max_batch, 4);
    ck_assert_int_eq(ctx->max_seq, 32);
    pt_context_free(ctx);
    ck_assert_status(pt_sft_context_create(&ctx, m, d, 5), PT_EINVAL, "rows");
    ck_assert_status(pt_sft_context_create(&ctx, NULL, d, 1), PT_EINVAL, "model");
    pt_dataset_free(d);
    pt_dataset_free(e);
    pt_model_free(m);
}
END_TEST

static char *row(const pt_sft_stats *s, const pt_sft_row_extra *x)
{
    char *json = NULL;
    ck_assert_ok(pt_sft_metrics_row(&json, s, x));
    return json;
}

START_TEST(test_metrics_row)
{
    pt_sft_stats s;
    pt_sft_stats_init(&s);
    s.loss = 2.5;
    s.tokens = 37;
    s.grad_norm = 0.123456789;
    s.lr = 1e-4;
    s.comm_seconds = 0.25;
    pt_sft_row_extra x;
    pt_sft_row_extra_init(&x);
    ck_assert(isnan(x.eval_loss));
    x.step = 3;
    x.step_seconds = 0.5;
    x.step_tokens = 64;
    x.comm = true;
    x.eval = true;
    x.eval_loss = 1.25;
    char *j = row(&s, &x);
    ck_assert_str_eq(j, "{\"step\": 3, \"loss\": 2.500000, \"tokens\": 37, \"grad_norm\": 0.123457, "
                        "\"lr\": 0.0001, \"skipped\": false, \"step_seconds\": 0.5000, \"comm_seconds\": 0.2500, "
                        "\"tokens_per_s\": 128.0, \"eval_loss\": 1.250000}");
    pt_free(j);
    /* a skipped step: non-finite numbers as null; no comm_seconds */
    s.loss = NAN;
    s.tokens = 0;
    s.grad_norm = INFINITY;
    s.lr = 2e-5;
    s.skipped = true;
    x.step = 7;
    x.step_seconds = 0;
    x.comm = false;
    x.eval_loss = NAN;
    j = row(&s, &x);
    ck_assert_str_eq(j, "{\"step\": 7, \"loss\": null, \"tokens\": 0, \"grad_norm\": null, \"lr\": 2e-05, "
                        "\"skipped\": true, \"step_seconds\": 0.0000, \"tokens_per_s\": null, \"eval_loss\": null}");
    pt_free(j);
    /* no extra: step 0, no evaluation, 0 / 0 tokens a second */
    s.skipped = false;
    s.loss = 0.125;
    s.grad_norm = 1234567.0;
    j = row(&s, NULL);
    ck_assert_str_eq(j, "{\"step\": 0, \"loss\": 0.125000, \"tokens\": 0, \"grad_norm\": 1.23457e+06, "
                        "\"lr\": 2e-05, \"skipped\": false, \"step_seconds\": 0.0000, \"tokens_per_s\": null}");
    pt_free(j);
    j = (char *)1;
    ck_assert_status(pt_sft_metrics_row(&j, NULL, &x), PT_EINVAL, "stats");
    ck_assert_ptr_null(j);
    ck_assert_status(pt_sft_metrics_row(NULL, &s, &x), PT_EINVAL, "json");
    x.size = 3;
    ck_assert_status(pt_sft_metrics_row(&j, &s, &x), PT_EINVAL, "pt_sft_row_extra_init");
}
END_TEST

/* pt_sft_progress: the CLI's progress line and bar, written out by hand. */
static char *progress(const pt_sft_stats *s, const pt_sft_row_extra *x, int64_t total, double tps, double eta,
                      int style)
{
    char *t = NULL;
    ck_assert_int_eq(pt_sft_progress(&t, s, x, total, tps, eta, style), PT_OK);
    ck_assert_ptr_nonnull(t);
    return t;
}

START_TEST(test_progress)
{
    pt_sft_stats s;
    pt_sft_stats_init(&s);
    s.loss = 2.34567;
    s.lr = 1e-4;
    s.grad_norm = 0.123456;
    pt_sft_row_extra x;
    pt_sft_row_extra_init(&x);
    x.step = 6;
    /* 125.5 s left: 2 minutes 5 seconds; 1234.4 tokens/s rounds to 1234 */
    char *t = progress(&s, &x, 16, 1234.4, 125.5, PT_SFT_PROGRESS_LINE);
    ck_assert_str_eq(t, "step 6/16 loss 2.3457 lr 0.0001 grad_norm 0.123 1234 tok/s ETA 2m05s\n");
    pt_free(t);
    /* 6 of 16 steps fill 24 * 6 / 16 = 9 cells; 3725 s is 1 hour 2 minutes */
    t = progress(&s, &x, 16, 1234.4, 3725, PT_SFT_PROGRESS_BAR);
    ck_assert_str_eq(t, "\r[#########...............] step 6/16 loss 2.3457 1234 tok/s ETA 1h02m   ");
    pt_free(t);
    /* after an evaluation; an unknown time left */
    x.eval = true;
    x.eval_loss = 1.25;
    t = progress(&s, &x, 16, 0, NAN, PT_SFT_PROGRESS_LINE);
    ck_assert_str_eq(t, "step 6/16 loss 2.3457 lr 0.0001 grad_norm 0.123 0 tok/s ETA ? eval_loss 1.2500\n");
    pt_free(t);
    x.step = 16;
    t = progress(&s, &x, 16, 10, -1, PT_SFT_PROGRESS_BAR);
    ck_assert_str_eq(t, "\r[########################] step 16/16 loss 2.3457 10 tok/s ETA ?   \n  eval loss 1.2500\n");
    pt_free(t);
    t = (char *)1;
    ck_assert_status(pt_sft_progress(&t, &s, &x, 16, 1, 1, 2), PT_EINVAL, "style");
    ck_assert_ptr_null(t);
    ck_assert_status(pt_sft_progress(&t, &s, &x, 0, 1, 1, PT_SFT_PROGRESS_LINE), PT_EINVAL, "total");
    ck_assert_status(pt_sft_progress(&t, NULL, &x, 16, 1, 1, PT_SFT_PROGRESS_LINE), PT_EINVAL, "stats");
}
END_TEST

/* pt_sft_run_state: the data position after two batches of 3 of ten rows,
 * the seed (5) and examples (10) of the data, the optimizer's steps (none
 * taken), the step given. */
START_TEST(test_run_state)
{
    char text[512] = "";
    for (int k = 0; k < 10; k++)
        strcat(text, "{\"input_ids\": [1, 2, 3, 4]}\n");
    pt_dataset *d = load(write_tmp(text), 3, 10, false, false, 0);
    pt_batch b;
    const float *w;
    for (int i = 0; i < 2; i++) {
        pt_batch_init(&b);
        ck_assert_ok(pt_dataset_next_batch(&b, &w, d));
    }
    pt_model *m = pt_test_tiny_llama(37, 1);
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    pt_run_state s;
    pt_run_state_init(&s);
    s.rng = 77;
    ck_assert_ok(pt_sft_run_state(&s, d, opt, 4));
    ck_assert_int_eq(s.step, 4);
    ck_assert_int_eq(s.optimizer_steps, 0);
    ck_assert_int_eq(s.epoch, 0);
    ck_assert_int_eq(s.cursor, 6);
    ck_assert_int_eq(s.rows, 10);
    ck_assert_uint_eq(s.seed, 5);
    ck_assert_uint_eq(s.rng, 0);
    ck_assert_uint_eq(s.order_rng, 0);
    ck_assert_status(pt_sft_run_state(&s, d, opt, -1), PT_EINVAL, "step");
    ck_assert_status(pt_sft_run_state(&s, NULL, opt, 1), PT_EINVAL, "dataset");
    s.size = 3;
    ck_assert_status(pt_sft_run_state(&s, d, opt, 1), PT_EINVAL, "pt_run_state_init");
    pt_optimizer_free(opt);
    pt_model_free(m);
    pt_dataset_free(d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sft_run");
    TCase *tc = tcase_create("sft_run");
    tcase_add_test(tc, test_batches_file_rows);
    tcase_add_test(tc, test_batches_match_dataset);
    tcase_add_test(tc, test_total_steps_and_eval);
    tcase_add_test(tc, test_context);
    tcase_add_test(tc, test_metrics_row);
    tcase_add_test(tc, test_progress);
    tcase_add_test(tc, test_run_state);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
