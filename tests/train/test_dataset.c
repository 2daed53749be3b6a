/* SFT datasets: row formats and masks, truncation, bad rows, the evaluation
 * split, seeded epochs, exact positions, and packing that changes nothing. */
#include "testutil.h"

#include "core/core.h"
#include "model/model.h"
#include "posttrain/train.h"

#include <math.h>
#include <stddef.h>
#include <unistd.h>

static char *write_tmp(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/pt_ds_XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static pt_tokenizer *bytes_tok(void)
{
    pt_tokenizer *t;
    ck_assert_ok(pt_tokenizer_create_bytes(&t));
    return t;
}

static void expect_row(const pt_batch *b, const float *w, int r, const int32_t *ids, const int32_t *tgt, int n)
{
    for (int t = 0; t < b->seq; t++) {
        int i = r * b->seq + t;
        int32_t eid = t < n ? ids[t] : 0, et = t < n ? tgt[t] : -1;
        ck_assert_msg(b->input_ids[i] == eid, "row %d pos %d: id %d, expected %d", r, t, b->input_ids[i], eid);
        ck_assert_msg(b->targets[i] == et, "row %d pos %d: target %d, expected %d", r, t, b->targets[i], et);
        ck_assert_float_eq(w[i], et >= 0 ? 1.0f : 0.0f);
        if (t < n)
            ck_assert_int_eq(b->positions[i], t);
    }
}

START_TEST(test_rows_and_masks)
{
    pt_tokenizer *tok = bytes_tok();
    const char *path = write_tmp("{\"prompt\": \"ab\", \"completion\": \"cd\"}\n"
                                 "\n"
                                 "{\"text\": \"xyz\"}\n"
                                 "{\"input_ids\": [5, 6, 7, 8], \"loss_mask\": [0, 0, 1, 1]}\n"
                                 "{\"input_ids\": [9, 10, 11]}\n");
    pt_dataset_options o;
    pt_dataset_options_init(&o);
    o.batch_size = 4;
    o.shuffle = false;
    pt_dataset *d;
    ck_assert_ok(pt_dataset_load_jsonl(&d, path, tok, &o));
    pt_dataset_stats s;
    pt_dataset_stats_init(&s);
    ck_assert_ok(pt_dataset_get_stats(&s, d));
    ck_assert_int_eq(s.rows, 4);
    ck_assert_int_eq(s.train_examples, 4);
    ck_assert_int_eq(s.train_tokens, 6 + 4 + 4 + 3);
    ck_assert_int_eq(s.train_target_tokens, 3 + 3 + 2 + 2);
    pt_batch b;
    pt_batch_init(&b);
    const float *w;
    ck_assert_ok(pt_dataset_next_batch(&b, &w, d));
    ck_assert_int_eq(b.batch, 4);
    ck_assert_int_eq(b.seq, 6);
    ck_assert_ptr_null(b.segments);
    /* <bos> a b | c d <eos>: the prompt is context, the completion and EOS are trained. */
    const int32_t r0[] = { 256, 97, 98, 99, 100, 257 }, t0[] = { -1, -1, 99, 100, 257, -1 };
    const int32_t r1[] = { 256, 120, 121, 122 }, t1[] = { 120, 121, 122, -1 }; /* text: no EOS added */
    const int32_t r2[] = { 5, 6, 7, 8 }, t2[] = { -1, 7, 8, -1 };
    const int32_t r3[] = { 9, 10, 11 }, t3[] = { 10, 11, -1 };
    expect_row(&b, w, 0, r0, t0, 6);
    expect_row(&b, w, 1, r1, t1, 4);
    expect_row(&b, w, 2, r2, t2, 4);
    expect_row(&b, w, 3, r3, t3, 3);
    pt_dataset_free(d);

    /* completion_only = false trains the prompt too. */
    o.completion_only = false;
    ck_assert_ok(pt_dataset_load_jsonl(&d, path, tok, &o));
    ck_assert_ok(pt_dataset_next_batch(&b, &w, d));
    const int32_t t0all[] = { 97, 98, 99, 100, 257, -1 };
    expect_row(&b, w, 0, r0, t0all, 6);
    pt_dataset_free(d);
    unlink(path);
    pt_tokenizer_free(tok);
}
END_TEST

START_TEST(test_bad_rows)
{
    pt_tokenizer *tok = bytes_tok();
    const char *path = write_tmp("{\"text\": \"ok\"}\n"
                                 "{\"text\": \"unterminated}\n"
                                 "{\"prompt\": \"p\"}\n"
                                 "{\"input_ids\": [1, 300]}\n"
                                 "{\"messages\": 5}\n"
                                 "{\"text\": \"fine\"}\n");
    pt_dataset_options o;
    pt_dataset_options_init(&o);
    pt_dataset *d = NULL;
    ck_assert_status(pt_dataset_load_jsonl(&d, path, tok, &o), PT_EFORMAT, "line 2");
    ck_assert_ptr_null(d);
    o.skip_bad_rows = true;
    ck_assert_ok(pt_dataset_load_jsonl(&d, path, tok, &o));
    pt_dataset_stats s;
    pt_dataset_stats_init(&s);
    ck_assert_ok(pt_dataset_get_stats(&s, d));
    ck_assert_int_eq(s.skipped_rows, 4);
    ck_assert_int_eq(s.train_examples, 2);
    pt_dataset_free(d);
    unlink(path);
    ck_assert_status(pt_dataset_load_jsonl(&d, "/nonexistent/x.jsonl", tok, &o), PT_ENOTFOUND, "x.jsonl");
    o.max_length = 1;
    ck_assert_status(pt_dataset_load_jsonl(&d, path, tok, &o), PT_EINVAL, "max_length");
    pt_dataset_options_init(&o);
    o.eval_fraction = 1.0;
    ck_assert_status(pt_dataset_create(&d, &o), PT_EINVAL, "eval_fraction");
    pt_dataset_options_init(&o);
    ck_assert_ok(pt_dataset_create(&d, &o));
    pt_batch b;
    pt_batch_init(&b);
    const float *w;
    ck_assert_status(pt_dataset_next_batch(&b, &w, d), PT_ESTATE, "no training examples");
    int32_t neg[2] = { 1, -4 };
    ck_assert_status(pt_dataset_add(d, neg, NULL, 2), PT_ERANGE, "negative id -4");
    pt_dataset_free(d);
    /* NULL options are the defaults (batch_size 8, max_length 512) */
    ck_assert_ok(pt_dataset_create(&d, NULL));
    int seq = 0;
    ck_assert_ok(pt_dataset_max_seq(&seq, d));
    ck_assert_int_eq(seq, 512);
    /* stats of an older, smaller header: its fields only */
    pt_dataset_stats old;
    pt_dataset_stats_init(&old);
    old.size = offsetof(pt_dataset_stats, skipped_rows);
    old.skipped_rows = 99;
    ck_assert_ok(pt_dataset_get_stats(&old, d));
    ck_assert_int_eq(old.rows, 0);
    ck_assert_int_eq(old.skipped_rows, 99);
    old.size = 3;
    ck_assert_status(pt_dataset_get_stats(&old, d), PT_EINVAL, "pt_dataset_stats_init");
    pt_dataset_free(d);
    pt_tokenizer_free(tok);
}
END_TEST

START_TEST(test_truncation)
{
    pt_dataset_options o;
    pt_dataset_options_init(&o);
    o.max_length = 4;
    o.batch_size = 1;
    pt_dataset *d;
    ck_assert_ok(pt_dataset_create(&d, &o));
    int32_t ids[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
    uint8_t late[10] = { 0, 0, 0, 0, 0, 0, 1, 1, 1, 1 };
    ck_assert_ok(pt_dataset_add(d, ids, NULL, 10));
    ck_assert_ok(pt_dataset_add(d, ids, late, 10)); /* nothing trained survives the cut */
    ck_assert_ok(pt_dataset_add(d, ids, NULL, 3));
    pt_dataset_stats s;
    pt_dataset_stats_init(&s);
    ck_assert_ok(pt_dataset_get_stats(&s, d));
    ck_assert_int_eq(s.rows, 3);
    ck_assert_int_eq(s.truncated_rows, 2);
    ck_assert_int_eq(s.truncated_tokens, 12);
    ck_assert_int_eq(s.empty_rows, 1);
    ck_assert_int_eq(s.train_examples, 2);
    ck_assert_int_eq(s.train_tokens, 4 + 3);
    pt_dataset_free(d);
}
END_TEST

static pt_dataset *numbered(int n, double eval_fraction, uint64_t seed, int batch)
{
    pt_dataset_options o;
    pt_dataset_options_init(&o);
    o.eval_fraction = eval_fraction;
    o.seed = seed;
    o.batch_size = batch;
    o.max_length = 8;
    pt_dataset *d;
    ck_assert_ok(pt_dataset_create(&d, &o));
    for (int i = 0; i < n; i++) {
        int32_t ids[3] = { i, i + 1, i + 2 };
        ck_assert_ok(pt_dataset_add(d, ids, NULL, 3));
    }
    return d;
}

/* First ids of the rows of the next `nb` batches. */
static void draw(pt_dataset *d, int nb, int *out)
{
    for (int k = 0; k < nb; k++) {
        pt_batch b;
        pt_batch_init(&b);
        const float *w;
        ck_assert_ok(pt_dataset_next_batch(&b, &w, d));
        for (int r = 0; r < b.batch; r++)
            out[k * b.batch + r] = b.input_ids[r * b.seq];
    }
}

START_TEST(test_split_epochs_position)
{
    pt_dataset *a = numbered(20, 0.25, 7, 5), *b = numbered(20, 0.25, 7, 5), *c = numbered(20, 0.25, 8, 5);
    pt_dataset_stats s;
    pt_dataset_stats_init(&s);
    ck_assert_ok(pt_dataset_get_stats(&s, a));
    ck_assert_int_eq(s.eval_examples, 5);
    ck_assert_int_eq(s.train_examples, 15);
    int xa[30], xb[30], xc[30];
    draw(a, 6, xa); /* two epochs of 3 batches */
    draw(b, 6, xb);
    draw(c, 6, xc);
    ck_assert_int_eq(memcmp(xa, xb, sizeof xa), 0); /* same seed, same stream */
    ck_assert_int_ne(memcmp(xa, xc, sizeof xa), 0);
    /* Each epoch is a permutation of the same 15 training examples. */
    int seen[20] = { 0 };
    for (int i = 0; i < 15; i++)
        seen[xa[i]]++;
    for (int i = 15; i < 30; i++)
        seen[xa[i]] += 100;
    int in_train = 0;
    for (int i = 0; i < 20; i++) {
        ck_assert(seen[i] == 0 || seen[i] == 101);
        in_train += seen[i] == 101;
    }
    ck_assert_int_eq(in_train, 15);
    ck_assert_int_ne(memcmp(xa, xa + 15, 15 * sizeof(int)), 0); /* reshuffled */
    /* Resume from a saved position gives the same batches. */
    pt_dataset *r = numbered(20, 0.25, 7, 5);
    int64_t epoch, cursor;
    pt_dataset *p = numbered(20, 0.25, 7, 5);
    int tmp[20];
    draw(p, 4, tmp);
    ck_assert_ok(pt_dataset_get_position(&epoch, &cursor, p));
    ck_assert_int_eq(epoch, 1);
    ck_assert_int_eq(cursor, 5);
    ck_assert_ok(pt_dataset_set_position(r, epoch, cursor));
    int xr[10];
    draw(r, 2, xr);
    ck_assert_int_eq(memcmp(xr, xa + 20, sizeof xr), 0);
    ck_assert_status(pt_dataset_set_position(r, 0, 99), PT_ERANGE, "cursor 99");
    pt_dataset_free(a); pt_dataset_free(b); pt_dataset_free(c); pt_dataset_free(r); pt_dataset_free(p);
}
END_TEST

static pt_model *tiny_model(void)
{
    pt_model_config c;
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, 50);
    c.tie_word_embeddings = true;
    c.initializer_range = 0.3;
    pt_model *m;
    ck_assert_ok(pt_model_create(&m, &c, 42));
    ck_assert_ok(pt_model_alloc_grads(m));
    return m;
}

static void grads(const pt_model *m, float *out)
{
    size_t off = 0;
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        memcpy(out + off, t->grad, t->numel * sizeof *out);
        off += t->numel;
    }
}

START_TEST(test_packing_changes_nothing)
{
    /* Four examples of 3, 4, 5 and 2 tokens: packed into 2 rows of 8, or one
     * per row; the loss and every gradient must agree. */
    pt_dataset_options o;
    pt_dataset_options_init(&o);
    o.max_length = 8;
    o.shuffle = false;
    pt_dataset *packed, *plain;
    o.batch_size = 2;
    o.pack = true;
    ck_assert_ok(pt_dataset_create(&packed, &o));
    o.batch_size = 4;
    o.pack = false;
    ck_assert_ok(pt_dataset_create(&plain, &o));
    const int32_t e0[] = { 3, 14, 15 }, e1[] = { 9, 26, 5, 35 }, e2[] = { 8, 9, 7, 9, 32 }, e3[] = { 38, 46 };
    const uint8_t m2[] = { 0, 0, 1, 1, 1 };
    const int32_t *ex[] = { e0, e1, e2, e3 };
    const size_t len[] = { 3, 4, 5, 2 };
    for (int i = 0; i < 4; i++) {
        ck_assert_ok(pt_dataset_add(packed, ex[i], i == 2 ? m2 : NULL, len[i]));
        ck_assert_ok(pt_dataset_add(plain, ex[i], i == 2 ? m2 : NULL, len[i]));
    }
    pt_batch bp, bu;
    pt_batch_init(&bp);
    pt_batch_init(&bu);
    const float *wp, *wu;
    ck_assert_ok(pt_dataset_next_batch(&bp, &wp, packed));
    ck_assert_ok(pt_dataset_next_batch(&bu, &wu, plain));
    ck_assert_int_eq(bp.batch, 2);
    ck_assert_int_eq(bp.seq, 8);
    ck_assert_ptr_nonnull(bp.segments);
    /* Row 0 holds examples 0 and 1, positions restarting at the boundary. */
    ck_assert_int_eq(bp.input_ids[3], 9);
    ck_assert_int_eq(bp.positions[3], 0);
    ck_assert_int_ne(bp.segments[2], bp.segments[3]);
    ck_assert_int_eq(bp.targets[2], -1); /* no target across the boundary */
    ck_assert_int_eq(bu.batch, 4);
    ck_assert_int_eq(bu.seq, 5);

    pt_model *m = tiny_model();
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 4, 8));
    size_t n = 0;
    for (size_t i = 0; i < pt_model_tensor_count(m); i++)
        n += pt__model_tensor(m, i)->numel;
    float *gp = malloc(n * 4), *gu = malloc(n * 4);
    float lp, lu;
    ck_assert_ok(pt_model_zero_grad(m));
    ck_assert_ok(pt_model_loss(ctx, &bp, wp, true, &lp));
    grads(m, gp);
    ck_assert_ok(pt_model_zero_grad(m));
    ck_assert_ok(pt_model_loss(ctx, &bu, wu, true, &lu));
    grads(m, gu);
    ck_assert_msg(fabsf(lp - lu) <= 1e-6f * fabsf(lu), "packed loss %.9g vs unpacked %.9g", (double)lp, (double)lu);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)gp[i] - gu[i]);
        worst = e > worst ? e : worst;
        scale = fabs(gu[i]) > scale ? fabs(gu[i]) : scale;
    }
    ck_assert_msg(worst <= 1e-5 * scale, "packed vs unpacked gradients differ by %g (scale %g)", worst, scale);
    ck_assert(scale > 0);
    free(gp); free(gu);
    pt_context_free(ctx);
    pt_model_free(m);
    pt_dataset_free(packed);
    pt_dataset_free(plain);
}
END_TEST

START_TEST(test_eval_loss)
{
    pt_dataset *d = numbered(12, 0.5, 3, 4);
    pt_model *m = tiny_model();
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 4, 8));
    double loss, tokens;
    ck_assert_ok(pt_dataset_eval_loss(&loss, &tokens, d, ctx));
    ck_assert_double_eq(tokens, 6 * 2);
    /* Near-uniform predictions of a random model over a 50-token vocabulary. */
    ck_assert_double_gt(loss, log(50.0) - 1.0);
    ck_assert_double_lt(loss, log(50.0) + 1.0);
    pt_dataset *none = numbered(5, 0.0, 3, 4);
    ck_assert_status(pt_dataset_eval_loss(&loss, &tokens, none, ctx), PT_ESTATE, "eval_fraction");
    pt_dataset_free(none);
    pt_context_free(ctx);
    pt_model_free(m);
    pt_dataset_free(d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dataset");
    TCase *tc = tcase_create("dataset");
    tcase_add_test(tc, test_rows_and_masks);
    tcase_add_test(tc, test_bad_rows);
    tcase_add_test(tc, test_truncation);
    tcase_add_test(tc, test_split_epochs_position);
    tcase_add_test(tc, test_packing_changes_nothing);
    tcase_add_test(tc, test_eval_loss);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
