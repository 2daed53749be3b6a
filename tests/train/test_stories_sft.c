/* Real checks on stories260K (../shared/data): full fine-tuning and LoRA on a
 * small dataset written here both lower the held-out loss, and the merged
 * export reloads with logits equal to the in-memory model's. */
#include "testutil.h"
#include "testfs.h"

#include <math.h>
#include <unistd.h>

static const char *stories[] = {
    "Lily had a red ball. She liked to play with it in the park.",
    "Tom saw a big dog. The dog was happy and wagged its tail.",
    "One day, Sam found a little bird. The bird could not fly.",
    "Mia liked to draw. She drew a sun and a tree and a house.",
    "Ben had a toy car. He pushed the car and it went fast.",
    "The cat sat on the mat. It was warm and the cat was happy.",
    "Anna went to the shop with her mom. They bought some milk.",
    "Max wanted to climb the tree. His dad helped him go up.",
    "The little fish swam in the pond. It saw a big frog.",
    "Sue made a cake for her friend. Her friend said thank you.",
    "Jack lost his hat. He looked and looked and found it under the bed.",
    "The sun was hot, so Lily and Tom went to swim in the lake.",
    "Sara had a doll. She gave the doll a name and a hug.",
    "A boy named Tim liked to run. He ran to the park every day.",
    "The dog found a stick. He gave the stick to his friend.",
    "Emma saw a rainbow in the sky. She was very happy.",
    "Bob and his sister played a game. They laughed and had fun.",
    "The bird sang a song. Lily listened and smiled.",
    "Tom was sad because it was raining. Then the sun came out.",
    "Mom made soup for dinner. Ben said it was yummy.",
    "The bunny hopped in the grass. It found a carrot to eat.",
    "Lucy wanted to help her dad. She carried the small box.",
    "The kids built a sand castle. The waves came and took it away.",
    "A little girl had a blue kite. The wind made it fly high.",
};
#define N_STORIES (sizeof stories / sizeof stories[0])

static char data_path[64];

static void write_data(void)
{
    snprintf(data_path, sizeof data_path, "/tmp/pt_stories_XXXXXX");
    int fd = mkstemp(data_path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    for (size_t i = 0; i < N_STORIES; i++)
        fprintf(f, "{\"text\": \"%s\"}\n", stories[i]);
    fclose(f);
}

static double train(pt_model *m, int steps, double lr, double *before)
{
    pt_dataset_options o;
    pt_dataset_options_init(&o);
    o.eval_fraction = 0.25;
    o.batch_size = 4;
    o.max_length = 64;
    o.seed = 3;
    pt_dataset *d;
    ck_assert_ok(pt_dataset_load_jsonl(&d, data_path, pt_model_tokenizer(m), &o));
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 4, 64));
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = lr;
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    double tokens, after;
    ck_assert_ok(pt_dataset_eval_loss(before, &tokens, d, ctx));
    ck_assert_double_gt(tokens, 20);
    for (int s = 0; s < steps; s++) {
        pt_batch b;
        pt_batch_init(&b);
        const float *w;
        ck_assert_ok(pt_dataset_next_batch(&b, &w, d));
        pt_sft_stats st;
        pt_sft_stats_init(&st);
        ck_assert_ok(pt_sft_step(&st, opt, ctx, &b, &w, 1));
        ck_assert(!st.skipped);
    }
    ck_assert_ok(pt_dataset_eval_loss(&after, &tokens, d, ctx));
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    pt_dataset_free(d);
    return after;
}

static void logits_of(pt_model *m, float *out, const int32_t *ids, int n)
{
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 1, n));
    pt_batch b = pt_test_row_batch(ids, NULL, n);
    ck_assert_ok(pt_model_forward(ctx, &b, NULL, out));
    pt_context_free(ctx);
}

START_TEST(test_full_and_lora_lower_heldout_loss)
{
    const char *shared = pt_test_shared_data("stories260K SFT");
    if (!shared)
        return;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/stories260K", shared);
    write_data();

    pt_model *full;
    ck_assert_ok(pt_model_load_dir(&full, dir, NULL));
    double b0, a0 = train(full, 30, 1e-4, &b0);
    printf("stories260K full fine-tuning: held-out loss %.4f -> %.4f\n", b0, a0);
    ck_assert_msg(a0 < b0 - 0.05, "full fine-tuning: held-out loss %.4f -> %.4f", b0, a0);

    pt_model *lora;
    ck_assert_ok(pt_model_load_dir(&lora, dir, NULL));
    pt_lora_options lo;
    pt_lora_options_init(&lo);
    lo.rank = 8;
    lo.alpha = 16;
    lo.targets = PT_LORA_ALL;
    ck_assert_ok(pt_model_add_lora(lora, &lo));
    double b1, a1 = train(lora, 30, 3e-4, &b1);
    printf("stories260K LoRA r8: held-out loss %.4f -> %.4f\n", b1, a1);
    ck_assert_msg(fabs(b1 - b0) < 1e-6, "a fresh adapter changed the loss: %.6f vs %.6f", b1, b0);
    ck_assert_msg(a1 < b1 - 0.05, "LoRA: held-out loss %.4f -> %.4f", b1, a1);

    /* Merge, export, reload: logits equal the in-memory model's. */
    const int n = 24;
    int32_t ids[24];
    for (int i = 0; i < n; i++)
        ids[i] = i == 0 ? 1 : 259 + (i * 37) % 250;
    const int V = 512;
    float *with_adapter = malloc((size_t)n * V * 4), *merged = malloc((size_t)n * V * 4),
          *reloaded = malloc((size_t)n * V * 4);
    logits_of(lora, with_adapter, ids, n);
    ck_assert_ok(pt_model_merge_lora(lora));
    ck_assert(!pt_model_has_lora(lora));
    logits_of(lora, merged, ids, n);
    char out[] = "/tmp/pt_stories_out_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(out));
    ck_assert_ok(pt_model_save_dir(lora, out, NULL));
    pt_model *back;
    ck_assert_ok(pt_model_load_dir(&back, out, NULL));
    logits_of(back, reloaded, ids, n);
    double worst = 0;
    for (int i = 0; i < n * V; i++) {
        ck_assert_msg(reloaded[i] == merged[i], "reloaded logit %d: %.9g vs %.9g", i, (double)reloaded[i],
                      (double)merged[i]);
        worst = fmax(worst, fabs((double)merged[i] - with_adapter[i]));
    }
    ck_assert_msg(worst < 1e-4, "merged vs adapter logits differ by %g", worst);
    printf("merged export reloads with identical logits; merged vs adapter max diff %.3g\n", worst);
    ck_assert_int_eq(pt_test_rm_rf(out), 0);
    unlink(data_path);
    free(with_adapter); free(merged); free(reloaded);
    pt_model_free(back);
    pt_model_free(lora);
    pt_model_free(full);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stories_sft");
    TCase *tc = tcase_create("stories_sft");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_full_and_lora_lower_heldout_loss);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
