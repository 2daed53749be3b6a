/* Two host threads, each training its own model: wall time of the two runs
 * one after the other, at once with a per-context thread count (each context
 * gets half the cores), and at once with both following the process-wide
 * count (the behaviour before per-context counts: the two OpenMP teams fight
 * for the cores).
 *     bench_threads [steps] [hidden] [layers]      (defaults 6, 256, 4)   */
#include "core/core.h"
#include "posttrain/posttrain.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define B 4
#define T 128
#define V 4096

static int steps = 6, hidden = 256, layers = 4;

typedef struct job {
    pt_model *model;
    int threads;   /* the context's count (0: the process setting) */
    int status;
} job;

static int train(job *j)
{
    static int32_t ids[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++)
        ids[i] = (int32_t)((i * 7919u + 13u) % V);
    for (int i = 0; i < B * T; i++)
        tgt[i] = (i % T) + 1 < T ? ids[i + 1] : -1;
    pt_batch b;
    pt_batch_init(&b);
    b.batch = B;
    b.seq = T;
    b.input_ids = ids;
    b.targets = tgt;
    pt_context *ctx = NULL;
    pt_optimizer *opt = NULL;
    int st = pt_context_create(&ctx, j->model, B, T);
    if (!st)
        st = pt_context_set_num_threads(ctx, j->threads);
    if (!st)
        st = pt_optimizer_create(&opt, j->model, NULL);
    for (int s = 0; s < steps && !st; s++)
        st = pt_sft_step(NULL, opt, ctx, &b, NULL, 1);
    if (st)
        fprintf(stderr, "bench_threads: %s\n", pt_last_error());
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    return st;
}

static void *train_thread(void *arg)
{
    job *j = arg;
    j->status = train(j);
    return NULL;
}

static pt_model *make_model(uint64_t seed)
{
    pt_model_config c;
    pt_model_config_init(&c);
    c.vocab_size = V;
    c.hidden_size = hidden;
    c.intermediate_size = 3 * hidden;
    c.num_hidden_layers = layers;
    c.num_attention_heads = hidden / 64;
    c.num_key_value_heads = hidden / 64 > 1 ? hidden / 128 : 1;
    c.head_dim = 64;
    c.max_position_embeddings = T;
    c.tie_word_embeddings = true;
    pt_model *m = NULL;
    if (pt_model_create(&m, &c, seed) != PT_OK) {
        fprintf(stderr, "bench_threads: %s\n", pt_last_error());
        exit(1);
    }
    return m;
}

static double run(int concurrent, int threads_each)
{
    job j[2] = { { make_model(1), threads_each, 0 }, { make_model(2), threads_each, 0 } };
    double t0 = pt__now();
    if (concurrent) {
        pthread_t th[2];
        for (int k = 0; k < 2; k++)
            pthread_create(&th[k], NULL, train_thread, &j[k]);
        for (int k = 0; k < 2; k++)
            pthread_join(th[k], NULL);
    } else {
        for (int k = 0; k < 2; k++)
            j[k].status = train(&j[k]);
    }
    double dt = pt__now() - t0;
    for (int k = 0; k < 2; k++) {
        if (j[k].status)
            exit(1);
        pt_model_free(j[k].model);
    }
    return dt;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        steps = atoi(argv[1]);
    if (argc > 2)
        hidden = atoi(argv[2]);
    if (argc > 3)
        layers = atoi(argv[3]);
    int n = pt_get_num_threads();
    int half = n / 2 > 0 ? n / 2 : 1;
    printf("cpu: %s\n", pt_cpu_info());
    printf("two models: hidden %d, %d layers, vocab %d, batch %d x %d, %d SFT steps each; "
           "process threads %d\n", hidden, layers, V, B, T, steps, n);
    int keep = steps;
    steps = 1;
    run(1, 0); /* warm-up: BLIS, the OpenMP pools, first-touch pages */
    steps = keep;
    double seq = run(0, 0);
    printf("%-44s %8.2f s\n", "one after the other (process count each)", seq);
    double per = run(1, half);
    char label[64];
    snprintf(label, sizeof label, "at once, per-context count %d each", half);
    printf("%-44s %8.2f s  (%.2fx the sequential time)\n", label, per, per / seq);
    double old = run(1, 0);
    printf("%-44s %8.2f s  (%.2fx the sequential time)\n", "at once, both on the process count", old,
           old / seq);
    return 0;
}
