/* pt_generate on the real stories260K model (../shared/data/models/stories260K):
 *  - greedy from BOS reproduces reference/greedy_200_ids.json (200 ids,
 *    llama2.c's run.c at temperature 0) exactly, alone and as every row of a
 *    batch of 3 (the repeated prompt is prefilled once and copied);
 *  - greedy from a longer prompt (the first 40 reference ids) continues with
 *    the reference ids;
 *  - sampled rows are bit-identical alone and in a batch.
 * The suite exits 77 (skipped, loudly) when the shared data is absent. */
#include "stories.h"

static char model_dir[4096];

static int32_t *reference_ids(int *n)
{
    cJSON *j = pt_test_read_json(model_dir, "reference/greedy_200_ids.json");
    int32_t *ids = pt_test_json_ids(j, n);
    cJSON_Delete(j);
    return ids;
}

START_TEST(test_greedy_200)
{
    int n = 0;
    int32_t *ref = reference_ids(&n);
    ck_assert_int_eq(n, 201);
    pt_model *m = pt_test_load_stories(model_dir);
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, 3, 201));
    pt_generate_options o;
    ck_assert_ok(pt_generate_options_init(&o));
    o.temperature = 0.0f;
    o.max_new_tokens = 200;
    const int32_t prompt[3] = { 1, 1, 1 }, lens[3] = { 1, 1, 1 };
    static int32_t tok[3 * 200];
    int32_t cnt[3], fin[3];
    for (int B = 1; B <= 3; B += 2) {
        ck_assert_ok(pt_generate(g, prompt, lens, B, &o, tok, cnt, fin, NULL));
        for (int b = 0; b < B; b++) {
            ck_assert_int_eq(cnt[b], 200);
            ck_assert_int_eq(fin[b], PT_FINISH_LENGTH);
            for (int i = 0; i < 200; i++)
                ck_assert_msg(tok[b * 200 + i] == ref[i + 1], "batch %d row %d: greedy token "
                              "%d is %d, reference %d", B, b, i + 1, tok[b * 200 + i],
                              ref[i + 1]);
        }
    }
    /* a 40-token prompt continues with the reference */
    const int32_t len40 = 40;
    o.max_new_tokens = 161;
    ck_assert_ok(pt_generate(g, ref, &len40, 1, &o, tok, cnt, fin, NULL));
    ck_assert_int_eq(cnt[0], 161);
    ck_assert_mem_eq(tok, ref + 40, 161 * sizeof(int32_t));
    fprintf(stderr, "stories260K: greedy generation reproduces the 200 reference ids\n");
    pt_generator_free(g);
    pt_model_free(m);
    free(ref);
}
END_TEST

START_TEST(test_sampled_batch_vs_alone)
{
    int n = 0;
    int32_t *ref = reference_ids(&n);
    pt_model *m = pt_test_load_stories(model_dir);
    pt_generator *g = NULL, *g1 = NULL;
    ck_assert_ok(pt_generator_create(&g, m, 3, 120));
    ck_assert_ok(pt_generator_create(&g1, m, 1, 120));
    pt_generate_options o;
    ck_assert_ok(pt_generate_options_init(&o));
    o.temperature = 1.0f;
    o.top_p = 0.9f;
    o.max_new_tokens = 60;
    o.seed = 7;
    /* prompts: ref[0..10), ref[0..25), ref[0..3) back to back */
    const int32_t lens[3] = { 10, 25, 3 };
    int32_t prompts[38];
    memcpy(prompts, ref, 10 * sizeof *prompts);
    memcpy(prompts + 10, ref, 25 * sizeof *prompts);
    memcpy(prompts + 35, ref, 3 * sizeof *prompts);
    int32_t tok[180], cnt[3], t1[60], c1;
    float lp[180], l1[60];
    ck_assert_ok(pt_generate(g, prompts, lens, 3, &o, tok, cnt, NULL, lp));
    size_t off = 0;
    for (int b = 0; b < 3; b++) {
        o.stream_offset = (uint64_t)b;
        ck_assert_ok(pt_generate(g1, prompts + off, lens + b, 1, &o, t1, &c1, NULL, l1));
        ck_assert_int_eq(c1, cnt[b]);
        ck_assert_mem_eq(t1, tok + b * 60, (size_t)c1 * sizeof(int32_t));
        ck_assert_mem_eq(l1, lp + b * 60, (size_t)c1 * sizeof(float));
        off += (size_t)lens[b];
    }
    pt_generator_free(g);
    pt_generator_free(g1);
    pt_model_free(m);
    free(ref);
}
END_TEST

int main(void)
{
    const char *shared = pt_test_shared_data("generate_stories");
    if (!shared)
        return 77;
    snprintf(model_dir, sizeof model_dir, "%s/models/stories260K", shared);
    struct stat st;
    if (stat(model_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "SKIP generate_stories: %s not found\n", model_dir);
        return 77;
    }
    Suite *s = suite_create("generate_stories");
    TCase *tc = tcase_create("stories260K");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_greedy_200);
    tcase_add_test(tc, test_sampled_batch_vs_alone);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
