/* The real model: Karpathy's stories260K (TinyStories Llama, 260K parameters)
 * in Hugging Face layout, from ../shared/data/models/stories260K.
 *
 *  - logits of reference/logits.json's 32 ids within 1e-4 absolute.  The file
 *    holds float32 PyTorch logits rounded to 6 significant digits (|logit| up
 *    to ~22, so rounding alone is up to 5e-5; the file is 5.3e-5 from the
 *    float64 forward at worst).  A correct float32 forward is ~1e-5 from the
 *    float64 one, so 1e-4 holds with margin; we keep the 1e-4 rather
 *    than the README's looser 2e-4 suggestion;
 *  - reference/loss.json's float64 losses (greedy ids, and story.txt through
 *    its ids) within 1e-5 (float32 vs float64 differs by 4e-8 / 1.7e-7);
 *  - greedy decoding from BOS for 200 tokens (a full forward per step, argmax
 *    of the last position) reproduces reference/greedy_200_ids.json exactly.
 * The suite exits 77 (skipped, loudly) when the shared data is absent. */
#include "parity_util.h"

#include "stories.h"

#define LOGITS_ATOL 1e-4
#define LOSS_ATOL 1e-5

static char model_dir[4096];

static cJSON *read_json(const char *rel)
{
    return pt_test_read_json(model_dir, rel);
}

START_TEST(test_logits)
{
    pt_model *m = pt_test_load_stories(model_dir);
    cJSON *j = read_json("reference/logits.json");
    int n = 0;
    int32_t *ids = pt_test_json_ids(cJSON_GetObjectItemCaseSensitive(j, "input_ids"), &n);
    ck_assert_int_eq(n, 32);
    const int V = 512;
    float *ref = malloc((size_t)n * V * sizeof *ref);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(j, "logits");
    ck_assert_int_eq(cJSON_GetArraySize(rows), n);
    int r = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, rows) {
        ck_assert_int_eq(cJSON_GetArraySize(row), V);
        int v = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, row) ref[(size_t)r * V + (size_t)v++] = (float)e->valuedouble;
        r++;
    }
    pt_context *ctx = NULL;
    ck_assert_ok(pt_context_create(&ctx, m, 1, n));
    pt_batch b = pt_test_row_batch(ids, NULL, n);
    float *logits = malloc((size_t)n * V * sizeof *logits);
    ck_assert_ok(pt_model_forward(ctx, &b, NULL, logits));
    int64_t shape[2] = { n, V };
    parity_assert_close("stories260K logits vs reference/logits.json", logits, ref,
                        (size_t)n * V, shape, 2, LOGITS_ATOL, 0.0);
    parity_cmp c = parity_compare(logits, ref, (size_t)n * V, LOGITS_ATOL, 0.0);
    fprintf(stderr, "stories260K: logits max |diff| %.3g (tolerance %.0e)\n", c.max_abs,
            LOGITS_ATOL);
    free(logits);
    free(ref);
    free(ids);
    cJSON_Delete(j);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

static void check_loss(pt_model *m, const int32_t *ids, int n, double expect, const char *what)
{
    pt_context *ctx = NULL;
    ck_assert_ok(pt_context_create(&ctx, m, 1, n - 1));
    pt_batch b = pt_test_row_batch(ids, ids + 1, n - 1);
    float loss = NAN;
    ck_assert_ok(pt_model_loss(ctx, &b, NULL, false, &loss));
    fprintf(stderr, "stories260K: loss %s %.9f (reference %.9f, diff %.2g)\n", what,
            (double)loss, expect, fabs((double)loss - expect));
    ck_assert_msg(fabs((double)loss - expect) <= LOSS_ATOL, "stories260K loss over %s: %.9f, "
                  "reference/loss.json says %.9f", what, (double)loss, expect);
    pt_context_free(ctx);
}

START_TEST(test_losses)
{
    pt_model *m = pt_test_load_stories(model_dir);
    cJSON *lj = read_json("reference/loss.json");
    cJSON *gj = read_json("reference/greedy_200_ids.json");
    int n = 0;
    int32_t *ids = pt_test_json_ids(gj, &n);
    ck_assert_int_eq(n, 201);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(lj, "greedy_200");
    check_loss(m, ids, n, cJSON_GetObjectItemCaseSensitive(g, "loss")->valuedouble,
               "greedy_200_ids.json");
    free(ids);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(lj, "story");
    ids = pt_test_json_ids(cJSON_GetObjectItemCaseSensitive(s, "ids"), &n);
    ck_assert_int_eq(n, 103);
    check_loss(m, ids, n, cJSON_GetObjectItemCaseSensitive(s, "loss")->valuedouble,
               "story.txt ids");
    free(ids);
    cJSON_Delete(lj);
    cJSON_Delete(gj);
    pt_model_free(m);
}
END_TEST

START_TEST(test_greedy_200)
{
    pt_model *m = pt_test_load_stories(model_dir);
    cJSON *gj = read_json("reference/greedy_200_ids.json");
    int n = 0;
    int32_t *ref = pt_test_json_ids(gj, &n);
    ck_assert_int_eq(n, 201);
    ck_assert_int_eq(ref[0], 1);
    const int V = 512, steps = 200;
    int32_t *ids = calloc((size_t)steps + 1, sizeof *ids);
    float *logits = malloc((size_t)steps * V * sizeof *logits);
    pt_context *ctx = NULL;
    ck_assert_ok(pt_context_create(&ctx, m, 1, steps));
    ids[0] = 1; /* BOS */
    for (int t = 1; t <= steps; t++) {
        pt_batch b = pt_test_row_batch(ids, NULL, t);
        ck_assert_ok(pt_model_forward(ctx, &b, NULL, logits));
        const float *last = logits + (size_t)(t - 1) * V;
        int best = 0, second = -1;
        for (int v = 1; v < V; v++) {
            if (last[v] > last[best]) {
                second = best;
                best = v;
            } else if (second < 0 || last[v] > last[second]) {
                second = v;
            }
        }
        ids[t] = best;
        ck_assert_msg(best == ref[t], "greedy step %d: argmax %d (logit %.6f), reference id %d "
                      "(logit %.6f); runner-up %d", t, best, (double)last[best], ref[t],
                      (double)last[ref[t]], second);
    }
    free(ids);
    free(logits);
    free(ref);
    cJSON_Delete(gj);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

static Suite *stories_suite(void)
{
    Suite *s = suite_create("stories260K");
    TCase *tc = tcase_create("real_model");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_logits);
    tcase_add_test(tc, test_losses);
    tcase_add_test(tc, test_greedy_200);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    const char *shared = pt_test_shared_data("stories260K");
    if (!shared)
        return 77; /* meson: skipped */
    snprintf(model_dir, sizeof model_dir, "%s/models/stories260K", shared);
    struct stat st;
    if (stat(model_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "SKIP stories260K: %s not found\n", model_dir);
        return 77;
    }
    return pt_test_run(stories_suite());
}
