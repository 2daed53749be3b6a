/* Data-parallel SFT from C: how a host cuts its rows out of a global batch
 * (docs/distributed.md, "From C").  Public API only.
 *
 *   ./dist_batch                       one process: the whole batch
 *   mpirun -np 3 ./dist_batch          3 ranks: each its own rows
 *
 * Every rank builds the same global batch of ROWS rows (the same data, the
 * same order: here made up from a formula; a host reads the same file with
 * the same shuffle on every rank), asks pt_dist_shard for its share
 * [lo, lo + n) and hands pt_sft_step a pt_batch that points at those rows.
 * The library normalises the loss by the weight of the whole global batch
 * and sums the gradients over the ranks, so every rank count trains the
 * same weights up to rounding: rank 0 prints the loss of every step, which
 * tests/dist/test_dist_batch.sh compares across 1, 2 and 3 ranks. */
#include <posttrain/posttrain.h>

#include <stdio.h>

#define ROWS 5   /* the global batch: 5 rows (3 ranks: 2, 2, 1) */
#define SEQ 12
#define VOCAB 40
#define STEPS 4

static int fail(const char *what, int st)
{
    fprintf(stderr, "dist_batch: %s: %s: %s\n", what, pt_status_name(st), pt_last_error());
    return 1;
}

/* The global batch: ids and targets of ROWS rows; the first 3 positions of
 * a row are a prompt (target -1: not in the loss). */
static void global_batch(int32_t ids[ROWS][SEQ], int32_t tgt[ROWS][SEQ])
{
    for (int r = 0; r < ROWS; r++)
        for (int t = 0; t < SEQ; t++) {
            ids[r][t] = (int32_t)((r * 11 + t * 7 + 1) % VOCAB);
            int32_t next = (int32_t)((r * 11 + (t + 1) * 7 + 1) % VOCAB);
            tgt[r][t] = t >= 3 && t + 1 < SEQ ? next : -1;
        }
}

static int train(pt_dist *d, pt_model *model)
{
    int32_t ids[ROWS][SEQ], tgt[ROWS][SEQ];
    global_batch(ids, tgt);
    /* this rank's rows of every global batch */
    int64_t lo = 0, n = 0;
    int st = pt_dist_shard(&lo, &n, d, ROWS);
    if (st)
        return fail("pt_dist_shard", st);
    printf("rank %d of %d: rows [%lld, %lld) of %d\n", pt_dist_rank(d), pt_dist_size(d), (long long)lo,
           (long long)(lo + n), ROWS);
    fflush(stdout);
    pt_batch mine;
    pt_batch_init(&mine);
    mine.batch = (int)n;
    mine.seq = SEQ;
    mine.input_ids = &ids[lo][0]; /* rows are contiguous: point at the first */
    mine.targets = &tgt[lo][0];

    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = 1e-2;
    pt_optimizer *opt = NULL;
    pt_context *ctx = NULL;
    if ((st = pt_optimizer_create(&opt, model, &oo)) || (st = pt_context_create(&ctx, model, (int)n, SEQ)) ||
        (st = pt_optimizer_set_dist(opt, d))) {
        pt_context_free(ctx);
        pt_optimizer_free(opt);
        return fail("setup", st);
    }
    for (int step = 1; step <= STEPS && !st; step++) {
        pt_sft_stats s;
        pt_sft_stats_init(&s);
        if ((st = pt_sft_step(&s, opt, ctx, &mine, NULL, 1)))
            break;
        if (pt_dist_rank(d) == 0) /* the job's loss: the same on every rank */
            printf("step %d: loss %.9f over %.0f tokens\n", step, s.loss, s.tokens);
    }
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    return st ? fail("pt_sft_step", st) : 0;
}

int main(void)
{
    pt_set_num_threads(1);
    pt_dist *d = NULL;
    int st = pt_dist_create(&d, NULL, NULL); /* auto: MPI under mpirun, else one process */
    if (st)
        return fail("pt_dist_create", st);
    pt_model_config c;
    pt_model_config_init(&c);
    c.arch = PT_ARCH_LLAMA;
    c.vocab_size = VOCAB;
    c.hidden_size = 16;
    c.intermediate_size = 24;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 4;
    c.max_position_embeddings = 64;
    c.tie_word_embeddings = true;
    pt_model *model = NULL;
    /* the same seed on every rank: the same initial weights */
    if ((st = pt_model_create(&model, &c, 7)) || (st = pt_model_alloc_grads(model))) {
        pt_model_free(model);
        pt_dist_free(d);
        return fail("pt_model_create", st);
    }
    int rc = train(d, model);
    pt_model_free(model);
    pt_dist_free(d);
    return rc;
}
