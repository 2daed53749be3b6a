/* posttrain grpo: GRPO of a Hugging Face model directory on JSONL prompts
 * with built-in reward functions: pt_generate rollouts, pt_rollout_buffer,
 * pt_grpo_step; a progress line per step, a metrics file, checkpoints and
 * bit-exact resume, the trained model saved in Hugging Face layout. */
#include "cmd_grpo.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the run ------------------------------------------------------------------ */

/* What one step reports (its metrics row and progress line): m's rewards
 * and lengths come from the rollouts (the same for every iteration: the
 * first update's stats); loss, clipping, kl and grad norm from the last.
 * All of them are of the whole job (pt_grpo_step gathers them) but the
 * generation speed, this rank's. */
typedef struct step_report {
    pt_grpo_metrics m;
    pt_grpo_round_updates u;   /* m.first, m.last */
    pt_grpo_episode_totals ep; /* --env: the job's episodes of the round (summed over ranks) */
} step_report;

/* Everything a run holds; grpo_free releases it. */
typedef struct grpo_run {
    grpo_args a;
    cli_job job;
    pt_model *model, *ref;
    const pt_tokenizer *tok;
    pt_chat_template *tpl;
    pt_optimizer *opt;
    pt_context *ctx, *rctx;
    pt_generator *gen;
    pt_rollout_buffer *buf;
    pt_prompt_rows *rows, *eval_rows; /* --data's and --eval's */
    int n_rows, n_eval, max_prompt, max_seq;
    int P;             /* prompts (groups) per step, of the whole job */
    int g0, ng, NL;    /* this rank's groups [g0, g0 + ng) and its ng * G samples */
    int64_t total, step;               /* step: rounds done */
    int64_t skipped_total;             /* optimizer updates skipped */
    pt_run_skips skips;
    bool runaway;                      /* --max-skipped-steps reached: stop after the step's row */
    FILE *metrics;
    cli_out out;
    /* per step: this rank's ng prompts and their answers, the rows of the
     * step's P groups */
    int32_t *prompts, *plens, *group_row;
    const char **answers;
    /* The prompt order (a seeded shuffle per pass; the same on every rank) */
    pt_prompt_order *order;
    /* --env: the environment process, the episodes of a round */
    pt_env_process *env;
    pt_grpo_env_request req; /* the round's fields of its requests */
    pt_episode_results *eres;
    int max_total; /* the episodes' max_total_tokens */
} grpo_run;

static void grpo_free(grpo_run *r)
{
    cli_metrics_close(&r->metrics);
    free(r->prompts); free(r->plens); free(r->group_row); free(r->answers);
    pt_prompt_order_free(r->order);
    pt_episode_results_free(r->eres);
    if (grpo_env_stop(r->env))
        fprintf(stderr, "posttrain grpo: --env: the environment had to be killed\n");
    r->env = NULL;
    pt_grpo_env_request_clear(&r->req);
    pt_prompt_rows_free(r->rows);
    pt_prompt_rows_free(r->eval_rows);
    pt_rollout_buffer_free(r->buf);
    pt_generator_free(r->gen);
    pt_context_free(r->ctx);
    pt_context_free(r->rctx);
    pt_optimizer_free(r->opt);
    pt_chat_template_free(r->tpl);
    pt_model_free(r->ref);
    pt_model_free(r->model);
    cli_out_end(&r->out);
}

/* The model, its tokenizer and chat template, and the prompts. */
static int load(grpo_run *r)
{
    grpo_args *a = &r->a;
    int st;
    /* LoRA on a BF16 base: the base read straight into BF16, frozen (BF16
     * on once the adapters are attached) */
    const bool lora16 = a->bf16 && a->lora.rank > 0;
    if ((st = cli_load_model(&r->model, a->model, lora16 ? PT_BF16_FROZEN : PT_BF16_OFF, a->quantize)))
        return cli_fail(a->model, st);
    if (a->bf16 && !lora16 && cli_set_bf16("grpo", r->model, PT_BF16_ON))
        return 1;
    if (!(r->tok = pt_model_tokenizer(r->model)))
        return cli_no_tokenizer("grpo", a->model, "it is needed to encode prompts and score answers");
    if (a->chat_template && (st = pt_chat_template_create(&r->tpl, a->chat_template)))
        return cli_fail("--chat-template", st);
    if (a->chat && (st = pt_chat_template_from_tokenizer(&r->tpl, r->tok)))
        return cli_fail("--chat", st);
    if (grpo_load_rows(&r->rows, a->data, NULL, a, r->tok, r->tpl) ||
        (a->eval && grpo_load_rows(&r->eval_rows, a->eval, "--eval", a, r->tok, r->tpl)))
        return 1;
    r->n_rows = (int)pt_prompt_rows_size(r->rows);
    r->n_eval = (int)pt_prompt_rows_size(r->eval_rows);
    /* the generator takes the held-out prompts too */
    r->max_prompt = pt_prompt_rows_max_prompt_len(r->rows);
    if (pt_prompt_rows_max_prompt_len(r->eval_rows) > r->max_prompt)
        r->max_prompt = pt_prompt_rows_max_prompt_len(r->eval_rows);
    r->max_seq = r->max_prompt + a->gen.max_new_tokens;
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    pt_model_get_config(&cfg, r->model);
    if (a->env) {
        /* the episodes' room: --max-total-tokens, or twice the turns' tokens */
        if (a->max_total_tokens > 0 && a->max_total_tokens <= r->max_prompt) {
            fprintf(stderr, "posttrain grpo: --max-total-tokens %d leaves no room after the longest prompt (%d "
                            "tokens)\n", a->max_total_tokens, r->max_prompt);
            return 1;
        }
        int64_t total = a->max_total_tokens > 0 ? a->max_total_tokens
                                                : r->max_prompt + 2 * (int64_t)a->max_turns * a->gen.max_new_tokens;
        if (a->max_total_tokens <= 0 && cfg.max_position_embeddings > 0 && total > cfg.max_position_embeddings)
            total = cfg.max_position_embeddings > r->max_seq ? cfg.max_position_embeddings : r->max_seq;
        if (total > 100000000)
            total = 100000000;
        r->max_total = (int)total;
        if (r->max_total > r->max_seq)
            r->max_seq = r->max_total;
        if (cfg.max_position_embeddings > 0 && r->max_seq > cfg.max_position_embeddings) {
            fprintf(stderr, "posttrain grpo: --max-total-tokens %d exceeds the model's max_position_embeddings %d\n",
                    r->max_seq, cfg.max_position_embeddings);
            return 1;
        }
        /* dr_grpo's constant: the longest completion an episode can have */
        r->a.grpo.max_completion_length = r->max_total - r->max_prompt;
    }
    if (cfg.max_position_embeddings > 0 && r->max_seq > cfg.max_position_embeddings) {
        fprintf(stderr, "posttrain grpo: the longest prompt%s (%d tokens) plus --max-new-tokens %d exceeds the model's "
                        "max_position_embeddings %d\n", r->n_eval ? " of --data and --eval" : "", r->max_prompt,
                a->gen.max_new_tokens,
                cfg.max_position_embeddings);
        return 1;
    }
    return 0;
}

static int alloc_buffers(grpo_run *r)
{
    r->prompts = malloc((size_t)r->ng * (size_t)r->max_prompt * sizeof *r->prompts);
    r->plens = malloc((size_t)r->ng * sizeof *r->plens);
    r->answers = malloc((size_t)r->ng * sizeof *r->answers);
    r->group_row = malloc((size_t)r->P * sizeof *r->group_row);
    pt_prompt_order_options oo;
    pt_prompt_order_options_init(&oo);
    oo.rows = r->n_rows;
    oo.seed = r->a.seed;
    if (!r->prompts || !r->plens || !r->answers || !r->group_row || (r->a.env && pt_episode_results_create(&r->eres)) ||
        pt_prompt_order_create(&r->order, &oo)) {
        fprintf(stderr, "posttrain grpo: out of memory\n");
        return 1;
    }
    return 0;
}

/* What a checkpoint records beside the run state and a resume checks. */
static void run_fields(grpo_run *r, pt_grpo_run_fields *f)
{
    pt_grpo_run_fields_init(f);
    f->num_generations = r->a.G;
    f->batch_prompts = r->a.batch_prompts;
    f->num_iterations = r->a.num_iterations;
    f->grpo = &r->a.grpo;
}

/* A checkpoint after r->step rounds (pt_run_save on every rank: rank 0
 * writes it, every rank agrees): the run state (step, seed, the prompt
 * order: rng, order_rng, cursor, rows; the optimizer's step count) and the
 * shared host fields (cli_host_new: base model, LoRA options) with the
 * batch shape and the entropy controller; the run adds the goodput totals.
 * Nothing in it depends on the number of ranks but the timings. */
static int save_checkpoint(void *run)
{
    grpo_run *r = run;
    const grpo_args *a = &r->a;
    pt_run_state s;
    pt_run_state_init(&s);
    s.optimizer_steps = pt_optimizer_step_count(r->opt);
    s.step = r->step;
    s.seed = a->seed;
    pt_prompt_order_save(&s, r->order);
    pt_grpo_run_fields f;
    run_fields(r, &f);
    char *h = cli_host_new("grpo", a->model, r->model), *extra = NULL;
    if (h && pt_grpo_run_extra(&extra, h, &f))
        fprintf(stderr, "posttrain grpo: out of memory building a checkpoint\n");
    int rc = extra ? cli_checkpoint_save("grpo", &r->out, r->model, r->opt, &s, extra) : 1;
    pt_free(extra);
    pt_free(h);
    return rc;
}

/* The loaded state `s` and host fields `h` of the checkpoint `dir` into
 * the run (pt_grpo_run_resume: the batch shape, the prompt order, the
 * optimizer's step count, the entropy controller).  0, or 1 after the
 * message. */
static int apply_state(void *run, const pt_run_state *s, const char *h, const char *dir)
{
    grpo_run *r = run;
    pt_grpo_run_fields f;
    run_fields(r, &f);
    pt_grpo_resume_report rep;
    pt_grpo_resume_report_init(&rep);
    int st = pt_grpo_run_resume(&rep, h, s, r->order, pt_optimizer_step_count(r->opt), &f);
    const int fault = rep.fault;
    const char *pre = "posttrain grpo: --resume: ", *opt = "--batch-prompts";
    if ((!st || fault >= PT_RESUME_FAULT_RNG) && rep.num_iterations >= 0 &&
        rep.num_iterations != r->a.num_iterations)
        cli_note("posttrain grpo: warning: the checkpoint was made with --num-iterations %lld, resuming with %d\n",
                 (long long)rep.num_iterations, r->a.num_iterations);
    if (fault == PT_RESUME_FAULT_MISSING)
        fprintf(stderr, "%s%s does not record \"%s\" (not a checkpoint of posttrain grpo)\n", pre, dir, rep.key);
    if (fault == PT_RESUME_FAULT_SHAPE && !strcmp(rep.key, "num_generations"))
        opt = "--num-generations";
    if (fault == PT_RESUME_FAULT_SHAPE)
        fprintf(stderr, "%s%s was made with %s %lld, this run gives %s %lld: resume with %s %lld, or start a new "
                        "--out\n", pre, dir, opt, (long long)rep.saved, opt, (long long)rep.want, opt,
                (long long)rep.saved);
    if (fault == PT_RESUME_FAULT_ROWS)
        fprintf(stderr, "%s%s was made with %lld prompt rows in --data, this run has %lld: the prompt order cannot "
                        "be continued\n", pre, dir, (long long)rep.saved, (long long)rep.want);
    if (fault == PT_RESUME_FAULT_CURSOR)
        fprintf(stderr, "%s%s has no prompt order (its cursor %lld is past the %lld rows)\n", pre, dir,
                (long long)rep.saved, (long long)rep.want);
    if (fault == PT_RESUME_FAULT_OPTIMIZER)
        fprintf(stderr, "%s%s: the optimizer's step count %lld does not match the recorded %lld\n", pre, dir,
                (long long)rep.want, (long long)rep.saved);
    if (fault == PT_RESUME_FAULT_RNG)
        fprintf(stderr, "%s%s: its prompt order state is inconsistent (order_rng does not lead to rng)\n", pre, dir);
    if (fault == PT_RESUME_FAULT_ENTROPY)
        fprintf(stderr, "%s%s has no entropy_coef (made without --use-adaptive-entropy)\n", pre, dir);
    if (st && fault == PT_RESUME_FAULT_NONE)
        return cli_fail("--resume", st);
    if (!st)
        r->step = s->step;
    return st ? 1 : 0;
}

/* This rank's groups of the step's P prompts; 0, or the exit code after
 * the message (fewer prompts than ranks). */
static int shard_groups(grpo_run *r)
{
    r->P = r->a.batch_prompts < r->n_rows ? r->a.batch_prompts : r->n_rows;
    int64_t g0, ng;
    int rc = cli_job_shard(&r->job, &g0, &ng, r->P,
                           r->P < r->a.batch_prompts ? "the prompt rows of --data" : "--batch-prompts");
    r->g0 = (int)g0;
    r->ng = (int)ng;
    r->NL = r->ng * r->a.G;
    return rc;
}

/* Back to the start of the run: the weights of --model (with the LoRA
 * adapters initialised as at the start), a new optimizer, the first prompt
 * order. */
static int restart(void *run)
{
    grpo_run *r = run;
    int rc = cli_reload_start("grpo", r->model, r->a.model, &r->a.lora, r->a.seed);
    if (!rc)
        rc = cli_job_optimizer(&r->job, &r->opt, r->model, &r->a.opt);
    pt_prompt_order_restart(r->order);
    r->step = 0;
    return rc;
}

/* The reference model, LoRA, the optimizer, contexts, generator, rollout
 * buffer and step buffers, the prompt order (or the state --resume loads),
 * and the metrics file (rank 0; continued after a resumed step). */
static int setup(grpo_run *r)
{
    grpo_args *a = &r->a;
    int st;
    const int ctx_batch = r->NL < 8 ? r->NL : 8;
    /* The reference policy: the starting model, frozen. */
    if (a->grpo.beta > 0 && ((st = cli_load_model(&r->ref, a->model,
                                                  a->bf16 ? PT_BF16_FROZEN : PT_BF16_OFF, a->quantize)) ||
                             (st = pt_context_create(&r->rctx, r->ref, ctx_batch, r->max_seq))))
        return cli_fail("the reference model", st);
    if (a->lora.rank > 0 && cli_add_lora("grpo", r->model, &a->lora, a->seed))
        return 1;
    if (a->bf16 && a->lora.rank > 0 && cli_set_bf16("grpo", r->model, PT_BF16_ON))
        return 1;
    r->total = a->steps ? a->steps : (r->n_rows + r->P - 1) / r->P;
    if (a->opt.schedule != PT_SCHEDULE_CONSTANT)
        a->opt.total_steps = r->total * a->num_iterations;
    if (cli_job_optimizer(&r->job, &r->opt, r->model, &a->opt))
        return 1;
    if ((st = pt_context_create(&r->ctx, r->model, ctx_batch, r->max_seq)) ||
        (st = cli_run_context(r->ctx, &a->run)) ||
        (st = pt_generator_create(&r->gen, r->model, r->NL, r->max_seq)))
        return cli_fail("context", st);
    pt_rollout_buffer_options bo;
    pt_rollout_buffer_options_init(&bo);
    bo.n_reward_funcs = a->rewards.n;
    bo.reward_names = a->reward_names;
    bo.reward_weights = a->rewards.weights;
    if ((st = pt_rollout_buffer_create(&r->buf, &bo)))
        return cli_fail("rollout buffer", st);
    if (alloc_buffers(r))
        return 1;
    cli_note("posttrain grpo: %d prompts, %lld steps of %d prompts x %d generations, rewards", r->n_rows,
             (long long)r->total, r->P, a->G);
    for (int k = 0; k < a->rewards.n; k++)
        cli_note(" %s:%g", a->reward_names[k], a->rewards.weights[k]);
    if (a->env)
        cli_note(" from --env '%s' (episodes of at most %d turns, %d tokens)", a->env, a->max_turns, r->max_total);
    cli_note("\n");
    /* every rank its own environment process */
    pt_grpo_env_request_init(&r->req);
    r->req.rows = r->rows;
    if (a->env && grpo_env_start(&r->env, a, &r->req))
        return 1;
    /* --resume: the checkpoint's weights, optimizer and state */
    const cli_back b = { r, restart, apply_state };
    if (a->resume && cli_job_resume(&r->job, &r->out, r->model, r->opt, a->resume, a->seed, &b, &r->step))
        return 1;
    if (r->job.rank == 0 &&
        !(r->metrics = cli_open_metrics("grpo")))
        return 1;
    return 0;
}

/* The step's P prompts in the shuffled order (every rank draws them all);
 * this rank's groups [g0, g0 + ng): their prompts and answers. */
static void next_prompts(grpo_run *r)
{
    int off = 0;
    pt_prompt_order_next(r->order, r->group_row, r->P);
    for (int p = 0; p < r->ng; p++) {
        pt_prompt_row row;
        pt_prompt_row_init(&row);
        pt_prompt_rows_get(&row, r->rows, r->group_row[r->g0 + p]);
        memcpy(r->prompts + off, row.ids, (size_t)row.n_ids * sizeof *r->prompts);
        r->plens[p] = row.n_ids;
        r->answers[p] = row.answer;
        off += row.n_ids;
    }
}

/* This rank's rollouts of the round (pt_grpo_rollout_round: its groups
 * sampled G times each from the round's seed, or with --env played as
 * episodes with the environment, which gives the rewards) with the
 * reference log-probabilities and the built-in rewards.  A dead
 * environment, or a round in which every episode failed, ends the run.
 * rep->m.gen_tokens_per_s: generated tokens per second. */
static int rollout(grpo_run *r, int64_t step, step_report *rep)
{
    const grpo_args *a = &r->a;
    pt_builtin_reward_payload bp;
    pt_builtin_reward_payload_init(&bp);
    bp.rewards = &a->rewards;
    bp.tokenizer = r->tok;
    bp.answers = r->answers;
    bp.n_answers = r->ng;
    pt_episode_options eo;
    pt_episode_options_init(&eo);
    eo.max_turns = a->max_turns;
    eo.max_total_tokens = r->max_total;
    eo.stop_strings = a->n_stop_strings ? a->stop_strings : NULL;
    eo.n_stop_strings = a->n_stop_strings;
    eo.tokenizer = r->tok;
    eo.decode_text = true;
    eo.n_reward_funcs = a->rewards.n;
    eo.on_error = PT_EPISODE_ERROR_CONTINUE;
    r->req.step = step;
    r->req.first_episode = (int64_t)r->g0 * a->G;
    r->req.first_group = r->g0;
    r->req.group_row = r->group_row + r->g0;
    pt_grpo_round_options o;
    pt_grpo_round_options_init(&o);
    o.sampling = &a->gen;
    o.seed = a->seed;
    o.step = step;
    o.group_size = a->G;
    o.first_group = r->g0;
    o.ref_ctx = r->rctx;
    o.ref_temperature = a->grpo.temperature;
    o.reward = pt_builtin_reward_fn;
    o.reward_payload = &bp;
    o.n_reward_funcs = a->rewards.n;
    o.episodes = a->env ? &eo : NULL;
    o.results = r->eres;
    o.env = pt_env_process_call;
    o.env_payload = r->env;
    pt_grpo_round_result res;
    pt_grpo_round_result_init(&res);
    int st = pt_grpo_rollout_round(&res, r->gen, r->buf, r->prompts, r->plens, r->ng, &o);
    const char *failed = res.failed ? res.failed : "rollout";
    /* a failed run of the episodes first, then a dead environment */
    const char *dead = st && !strcmp(failed, "episodes") ? NULL : pt_env_process_failure(r->env);
    if (dead || (st && !strcmp(failed, "every episode failed"))) {
        fprintf(stderr, "posttrain grpo: step %lld: %s\n", (long long)step, dead ? dead : pt_last_error());
        return 1;
    }
    if (st)
        return cli_fail(failed, st);
    rep->m.gen_tokens_per_s = res.tokens_per_second;
    rep->ep = res.episodes;
    if (a->env && r->job.size > 1 &&
        (st = pt_dist_allreduce_sum(r->job.dist, (double *)&rep->ep, sizeof rep->ep / sizeof(double))))
        return cli_fail("adding the ranks' episode counts", st);
    return 0;
}

/* After each update: its skip note and the --max-skipped-steps guard. */
typedef struct update_ctx {
    grpo_run *r;
    int64_t step;
} update_ctx;

static int after_update(const pt_grpo_stats *s, int it, void *user)
{
    const update_ctx *u = user;
    grpo_run *r = u->r;
    if (s->skipped)
        cli_note("posttrain grpo: step %lld iteration %d skipped (%s)\n", (long long)u->step, it + 1,
                 s->tokens > 0 ? "non-finite loss or gradients" : "no loss token");
    r->skipped_total = s->skipped_total;
    return r->runaway = cli_skip_guard("grpo", &r->skips, s->skip_reason, (long long)u->step, r->a.max_skipped, s->lr);
}

/* --num-iterations GRPO updates on the buffer (pt_grpo_round_update). */
static int update(grpo_run *r, int64_t step, step_report *rep)
{
    update_ctx uc = { r, step };
    pt_grpo_round_updates *u = &rep->u;
    pt_grpo_round_updates_init(u);
    int st = pt_grpo_round_update(u, r->opt, r->ctx, r->buf, &r->a.grpo, r->a.num_iterations, after_update, &uc);
    if (st)
        return cli_fail("grpo step", st);
    rep->m.first = &u->first;
    rep->m.last = &u->last;
    rep->m.comm_seconds = u->comm_seconds;
    rep->m.loss = u->loss_sum / r->a.num_iterations;
    rep->m.train_tokens_per_s = u->train_seconds > 0 ? u->first.tokens_per_second : 0;
    return 0;
}

/* --eval after `step` rounds (0: before the first): every rank evaluates
 * its contiguous share of the held-out rows (possibly none), the sums are
 * added over the job, and rank 0 writes the row and the line.  Every rank
 * takes part, so the job stays in step. */
static int evaluate(grpo_run *r, int64_t step)
{
    cli_job *j = &r->job;
    cli_job_section(j, PT_TIME_EVAL);
    const int64_t n = r->n_eval, q = n / j->size, extra = n % j->size;
    pt_grpo_eval_options o;
    pt_grpo_eval_options_init(&o);
    o.sampling = &r->a.gen;
    o.samples = r->a.eval_samples;
    o.seed = r->a.seed;
    o.batch = r->NL;
    o.begin = j->rank * q + (j->rank < extra ? j->rank : extra);
    o.count = q + (j->rank < extra);
    pt_grpo_eval_sums s;
    int st = pt_grpo_evaluate(&s, r->gen, r->eval_rows, r->tok, &r->a.rewards, &o);
    if (st == PT_ECALLBACK)
        fprintf(stderr, "posttrain grpo: --eval: scoring failed (out of memory)\n");
    else if (st)
        cli_fail("grpo --eval: generate", st);
    int rc = cli_job_agree(j, st != 0, "evaluating --eval");
    if (!rc && j->size > 1 && (st = pt_dist_allreduce_sum(j->dist, (double *)&s, sizeof s / sizeof(double))))
        rc = cli_fail("grpo --eval: adding the ranks' scores", st);
    char *text;
    if (!rc && r->metrics && !pt_grpo_eval_row(&text, &s, &r->a.rewards, r->a.eval_samples, step)) {
        fprintf(r->metrics, "%s\n", text);
        fflush(r->metrics);
        pt_free(text);
    }
    if (!rc && j->rank == 0 &&
        !pt_grpo_eval_line(&text, &s, &r->a.rewards, r->a.eval_samples, r->a.gen.temperature, step)) {
        fprintf(stderr, "%s\n", text);
        pt_free(text);
    }
    cli_metrics_row("grpo", &r->metrics);
    cli_job_section(j, -1);
    return rc;
}

/* Whether --eval runs after `step` (0: before the first step). */
static bool eval_due(const grpo_run *r, int64_t step)
{
    return r->n_eval > 0 && (step == 0 || step == r->total || (r->a.eval_every > 0 && step % r->a.eval_every == 0));
}

/* The step's metrics row (pt_grpo_metrics_row) into the metrics file, and
 * its progress line (rank 0: every --log-every steps, and the last). */
static int report(grpo_run *r, int64_t step, step_report *rep, double t_start)
{
    pt_grpo_metrics *m = &rep->m;
    m->step = step;
    m->grpo = &r->a.grpo;
    m->n_reward_funcs = r->a.rewards.n;
    m->reward_names = r->a.reward_names;
    m->comm = r->job.size > 1;
    m->episodes = r->a.env ? &rep->ep : NULL;
    char *text;
    int st;
    if (r->metrics && (st = pt_grpo_metrics_row(&text, m)))
        return cli_fail("metrics row", st);
    if (r->metrics) {
        fprintf(r->metrics, "%s\n", text);
        pt_free(text);
    }
    cli_metrics_row("grpo", &r->metrics);
    if (r->job.rank == 0 && (step % r->a.log_every == 0 || step == r->total) &&
        !pt_grpo_progress_line(&text, m, r->total, cli_now() - t_start)) {
        fprintf(stderr, "%s\n", text);
        pt_free(text);
    }
    return 0;
}

/* Every step (after a resumed one): prompts, rollouts, updates, a metrics
 * line and a progress line (rank 0), replica checks, checkpoints, and a
 * rollback when the replicas disagree. */
static int train(grpo_run *r)
{
    cli_job *j = &r->job;
    const double t_start = cli_now();
    cli_job_section(j, -1);
    /* a resumed run has the rows of the checkpoint's step */
    if (r->step == 0 && eval_due(r, 0) && evaluate(r, 0))
        return 1;
    while (r->step < r->total) {
        const int64_t step = r->step + 1;
        step_report rep;
        pt_grpo_metrics_init(&rep.m);
        double t0 = cli_now();
        next_prompts(r);
        if (rollout(r, step, &rep))
            return 1;
        const double gen_s = cli_now() - t0;
        if (update(r, step, &rep))
            return 1;
        r->step = step;
        rep.m.step_seconds = cli_now() - t0;
        cli_job_step_time(j, rep.m.step_seconds, rep.m.comm_seconds, gen_s);
        cli_job_flip_hook(j, r->model, (long long)step);
        if (report(r, step, &rep, t_start))
            return 1;
        if (r->runaway || (eval_due(r, step) && evaluate(r, step)))
            return 1;
        const cli_back b = { r, restart, apply_state };
        if (cli_job_step_end(j, &r->out, r->model, r->opt, &b, save_checkpoint, (long long)step, (long long)r->total))
            return 1;
    }
    return 0;
}

/* The trained model in --out, written by rank 0 and agreed by every rank. */
static int save_final(grpo_run *r)
{
    return cli_job_save_final(&r->job, r->model, r->a.out, r->a.model, (long long)r->step,
                              (long long)r->skipped_total);
}

int cmd_grpo(int argc, char **argv)
{
    grpo_run r;
    memset(&r, 0, sizeof r);
    int rc = grpo_parse_args(&r.a, argc, argv);
    if (rc)
        return cli_exit_code(rc);
    int st;
    if (r.a.threads && (st = pt_set_num_threads(r.a.threads)))
        return cli_fail("--threads", st);
    /* the job (one process, or every rank under mpirun) and its goodput
     * clock; before anything is written: outputs apart from the inputs, the
     * hold on --out (rank 0: its lock, an earlier run in it, --resume auto's
     * checkpoint, shared with every rank) */
    r.out.keep_last = r.a.keep_last;
    r.out.keep_every = r.a.keep_every;
    if (!(rc = cli_job_begin(&r.job, "grpo", &r.a.dist, r.a.save_every)))
        rc = cli_job_out_start(&r.job, &r.out, r.a.out, r.a.metrics, r.a.model, r.a.data, &r.a.resume,
                               r.a.overwrite);
    /* this rank's groups of every step (the same outcome on every rank) */
    if (!rc) {
        rc = load(&r);
        rc = cli_job_agree(&r.job, rc, "loading the model and prompts");
    }
    if (!rc)
        rc = shard_groups(&r);
    if (!rc) {
        rc = setup(&r);
        rc = cli_job_agree(&r.job, rc, "starting");
    }
    /* a final checkpoint (before LoRA is merged) is part of train() */
    if (!rc)
        rc = train(&r) || save_final(&r);
    if (!rc) {
        rc = cli_job_finish(&r.job, &r.out, &r.metrics, r.a.out, (long long)r.step);
    }
    grpo_free(&r);
    cli_job_end(&r.job);
    return rc;
}
