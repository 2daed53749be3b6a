/* posttrain grpo's options: the tables --help is made from, their parsing
 * and the checks of their combinations (cmd_grpo.c runs what they ask). */
#include "cmd_grpo.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A bound of the importance-sampling correction: a number >= 0, or inf. */
static int parse_clip(void *dst, const char *v, const char *cmd, const char *opt)
{
    char *end = NULL;
    double x = strtod(v, &end);
    if (!*v || *end || isnan(x) || x < 0 || (isinf(x) && !strcmp(opt, "--importance-sampling-clip-min")))
        return cli_usage_error(cmd, "%s needs a number >= 0%s, not '%s'", opt,
                               strcmp(opt, "--importance-sampling-clip-min") ? " or inf" : "", v);
    *(double *)dst = x;
    return 0;
}

/* --stop-string S, repeatable: each is added. */
static int parse_stop_string(void *dst, const char *v, const char *cmd, const char *opt)
{
    grpo_args *a = (grpo_args *)((char *)dst - offsetof(grpo_args, stop_strings));
    if (!*v)
        return cli_usage_error(cmd, "%s needs a non-empty string", opt);
    if (a->n_stop_strings >= GRPO_MAX_STOP_STRINGS)
        return cli_usage_error(cmd, "at most %d %s", GRPO_MAX_STOP_STRINGS, opt);
    a->stop_strings[a->n_stop_strings++] = v;
    return 0;
}

typedef grpo_args cli_args; /* CLI_ARG's */
static const cli_opt k_grpo_io_opts[] = {
    { CLI_PATH, "model", CLI_ARG(model), "DIR", .required = true,
      .help = "Hugging Face model directory, or a GGUF file (F32/F16/BF16, or\nquantized: Q8_0, Q4_0, Q4_K, ... frozen, for LoRA)" },
    { CLI_PATH, "data", CLI_ARG(data), "FILE.jsonl", .required = true, .help = "the prompt rows" },
    { CLI_PATH, "out", CLI_ARG(out), "DIR", .required = true, .help = "where the trained model is saved" },
    { CLI_CUSTOM, "reward", CLI_ARG(rewards), "NAME[:W],...", .parse = grpo_parse_rewards,
      .help = "the rewards and their weights (may be repeated); required\nunless --env" },
};
static const cli_opt k_grpo_env_opts[] = {
    { CLI_STRING, "env", CLI_ARG(env), "CMD",
      .help = "play each group as multi-turn episodes with the environment\nCMD (/bin/sh -c CMD: one JSON line per "
              "turn on its stdin, one\nreply line on its stdout; docs/cli-grpo.md); its rewards\nreplace --reward" },
    { CLI_INT, "env-rewards", CLI_ARG(env_rewards), "N", .lo = 1, .hi = PT_GRPO_MAX_REWARD_FUNCS,
      .help = "rewards per reply, env0 .. env<N-1>, weight 1 each (default 1)" },
    { CLI_INT, "max-turns", CLI_ARG(max_turns), "N", .lo = 1, .hi = 100000,
      .help = "assistant turns per episode at most (default 4)" },
    { CLI_INT, "max-total-tokens", CLI_ARG(max_total_tokens), "N", .lo = 2, .hi = 100000000,
      .help = "ids per episode, prompt included (default: the longest\nprompt + 2 x --max-turns x --max-new-tokens)" },
    { CLI_CUSTOM, "stop-string", CLI_ARG(stop_strings), "S", .parse = parse_stop_string,
      .help = "a turn also ends once its text contains S (repeatable)" },
    { CLI_DOUBLE, "env-timeout", CLI_ARG(env_timeout), "S", .lo = 0.001, .hi = 1e6,
      .help = "seconds CMD has to take each request and give its reply line\n(default 60): past it the episode "
              "fails and CMD's process\ngroup is ended" },
    { CLI_INT64, "env-max-line", CLI_ARG(env_max_line), "BYTES", .lo = 16, .hi = 1 << 30,
      .help = "the longest reply line (default 4194304): a longer one fails\nthe episode" },
};
static const cli_opt k_grpo_eval_opts[] = {
    { CLI_PATH, "eval", CLI_ARG(eval), "FILE.jsonl",
      .help = "held-out prompt rows (as --data): greedy and sampled reward\nand accuracy before the first step, every "
              "--eval-every\nsteps and after the last" },
    { CLI_INT, "eval-every", CLI_ARG(eval_every), "N", .lo = 1, .hi = 1e9,
      .help = "evaluate every N steps (default: before the first and after\nthe last only)" },
    { CLI_INT, "eval-samples", CLI_ARG(eval_samples), "N", .lo = 1, .hi = 1024,
      .help = "sampled completions of each held-out prompt (default 1)" },
};
static const cli_opt k_grpo_generation_opts[] = {
    { CLI_INT, "num-generations", CLI_ARG(G), "G", .def = "8", .lo = 2, .hi = 1024,
      .help = "completions per prompt (a group)" },
    { CLI_INT, "max-new-tokens", CLI_ARG(gen.max_new_tokens), "N", .def = "64", .lo = 1, .hi = 1000000,
      .help = "tokens per completion at most" },
    { CLI_FLOAT, "temperature", CLI_ARG(gen.temperature), "F", .def = "1.0", .lo = 0, .hi = 100,
      .help = "0: greedy, else at least 1e-6; the step scores at it too\n(log_softmax(logits / T), as TRL)" },
    { CLI_FLOAT, "top-p", CLI_ARG(gen.top_p), "F", .def = "1.0", .lo = 1e-9, .hi = 1, .help = "nucleus sampling" },
    { CLI_INT, "top-k", CLI_ARG(gen.top_k), "N", .def = "0", .lo = 0, .hi = 100000000, .help = "0: off" },
    { CLI_FLAG, "chat", CLI_ARG(chat), .help = "wrap prompts in the tokenizer's chat template" },
    { CLI_STRING, "chat-template", CLI_ARG(chat_template), "NAME",
      .help = "wrap prompts in that template, e.g. chatml" },
};
static const cli_opt k_grpo_length_opts[] = {
    { CLI_INT64, "steps", CLI_ARG(steps), "N", .lo = 1, .hi = 1e9,
      .help = "generation rounds (default: one pass over the prompts)" },
    { CLI_INT, "batch-prompts", CLI_ARG(batch_prompts), "N", .def = "4", .lo = 1, .hi = 65536,
      .help = "prompts per step (of the whole job: under mpirun each rank\ngenerates for its share of them)" },
};
static const cli_opt k_grpo_lr_opt[] = {
    { CLI_DOUBLE, "lr", CLI_ARG(opt.lr), "F", .def = "1e-6",
      .help = "peak learning rate (TRL's default, for 1B+ models; small\nmodels need more: 1e-4 to 3e-4 for stories260K, docs/grpo.md)" },
};
static const cli_opt k_grpo_opts[] = {
    { CLI_DOUBLE, "beta", CLI_ARG(grpo.beta), "F", .def = "0", .lo = 0, .hi = 1e6,
      .help = "k3 KL weight; > 0 loads --model again as the reference" },
    { CLI_DOUBLE, "epsilon", CLI_ARG(grpo.epsilon_low), "F", .def = "0.2", .lo = 0, .hi = 0.999999,
      .help = "lower clip range" },
    { CLI_DOUBLE, "epsilon-high", CLI_ARG(grpo.epsilon_high), "F", .lo = 0, .hi = 10,
      .help = "upper clip range (default: --epsilon)" },
    { CLI_INT, "num-iterations", CLI_ARG(num_iterations), "N", .def = "1", .lo = 1, .hi = 1000,
      .help = "updates per generation round" },
    { CLI_ENUM, "loss-type", CLI_ARG(grpo.loss_type), .def = "dapo", .from_name = pt_grpo_loss_type_from_name,
      .enum_name = pt_grpo_loss_type_name, .help = "the loss and its aggregation (docs/grpo.md)" },
    { CLI_ENUM, "scale-rewards", CLI_ARG(grpo.scale_rewards), .def = "group", .from_name = pt_grpo_scale_from_name,
      .enum_name = pt_grpo_scale_name, .help = "how advantages are scaled" },
    { CLI_FLAG, "mask-truncated", CLI_ARG(grpo.mask_truncated_completions),
      .help = "no loss on completions cut at --max-new-tokens" },
    { CLI_DOUBLE, "delta", CLI_ARG(grpo.delta), "F", .def = "0", .lo = 0, .hi = 1e6,
      .help = "two-sided clipping: cap the ratio at F (> 1 + epsilon-high;\n0: off)" },
    { CLI_DOUBLE, "top-entropy-quantile", CLI_ARG(grpo.top_entropy_quantile), "F", .def = "1", .lo = 0, .hi = 1,
      .help = "train only the tokens in the top F quantile of entropy\n(1: all)" },
    { CLI_ENUM, "importance-sampling-correction", CLI_ARG(grpo.importance_sampling_correction),
      .def = "sequence_mask", .from_name = pt_grpo_is_correction_from_name,
      .enum_name = pt_grpo_is_correction_name,
      .help = "correct for the sampler (TRL's vllm_importance_sampling_mode)" },
    { CLI_CUSTOM, "importance-sampling-clip-max", CLI_ARG(grpo.importance_sampling_clip_max), "F|inf", .def = "3",
      .parse = parse_clip, .help = "the correction's upper bound" },
    { CLI_CUSTOM, "importance-sampling-clip-min", CLI_ARG(grpo.importance_sampling_clip_min), "F", .def = "0",
      .parse = parse_clip, .help = "the correction's lower bound (0: none)" },
    { CLI_DOUBLE, "entropy-coef", CLI_ARG(grpo.entropy_coef), "F", .def = "0", .lo = -1e6, .hi = 1e6,
      .help = "entropy bonus: the loss minus F times the mean entropy\n(TRL's entropy_coef; 0: off; the initial value with\n--use-adaptive-entropy)" },
    { CLI_FLAG, "use-adaptive-entropy", CLI_ARG(grpo.use_adaptive_entropy),
      .help = "TRL's adaptive entropy control: the bonus only while the\nentropy is <= --entropy-target, the coefficient moved by\n--entropy-coef-delta each update" },
    { CLI_DOUBLE, "entropy-coef-min", CLI_ARG(grpo.entropy_coef_min), "F", .def = "0", .lo = -1e6, .hi = 1e6,
      .help = "the adaptive coefficient's lower bound" },
    { CLI_DOUBLE, "entropy-coef-max", CLI_ARG(grpo.entropy_coef_max), "F", .def = "1", .lo = -1e6, .hi = 1e6,
      .help = "the adaptive coefficient's upper bound" },
    { CLI_DOUBLE, "entropy-coef-delta", CLI_ARG(grpo.entropy_coef_delta), "F", .def = "0.005", .lo = 0, .hi = 1e6,
      .help = "the adaptive coefficient's step" },
    { CLI_DOUBLE, "entropy-target", CLI_ARG(grpo.entropy_target), "F", .def = "0.2", .lo = -1e6, .hi = 1e6,
      .help = "the adaptive control's target entropy (nats)" },
    { CLI_DOUBLE, "vespo-k-pos", CLI_ARG(grpo.vespo_k_pos), "F", .def = "2", .lo = 0, .hi = 1e6,
      .help = "--loss-type vespo: k for A >= 0 (TRL's vespo_k_pos)" },
    { CLI_DOUBLE, "vespo-lambda-pos", CLI_ARG(grpo.vespo_lambda_pos), "F", .def = "3", .lo = 0, .hi = 1e6,
      .help = "--loss-type vespo: lambda for A >= 0" },
    { CLI_DOUBLE, "vespo-k-neg", CLI_ARG(grpo.vespo_k_neg), "F", .def = "3", .lo = 0, .hi = 1e6,
      .help = "--loss-type vespo: k for A < 0" },
    { CLI_DOUBLE, "vespo-lambda-neg", CLI_ARG(grpo.vespo_lambda_neg), "F", .def = "2", .lo = 0, .hi = 1e6,
      .help = "--loss-type vespo: lambda for A < 0" },
};
/* grpo's wording of the shared checkpoint and output options (cli_run_opts) */
static const cli_opt k_grpo_run_opts[] = {
    { .name = "save-every", .help = "checkpoint every N steps (generation rounds) into\nOUT/checkpoints/step-NNNNNNNN; "
                                    "0: none; auto: Young-Daly\n(--mtbf-hours)" },
    { .name = "bf16", .help = "BF16: a frozen base (LoRA) stored in BF16, and\nmixed-precision products where the CPU "
                              "has BF16\narithmetic (docs/bf16.md); the reference model in BF16;\ncheckpoints stay FP32" },
    { .name = "log-every", .def = "1", .help = "progress line interval" },
    { .name = "max-skipped-steps", .help = "stop the run (exit 1, the model not saved) after N updates in a\nrow "
                                           "skipped as non-finite (a runaway learning rate); 0: never" },
};
static const cli_opt k_grpo_other_opts[] = {
    { CLI_UINT64, "seed", CLI_ARG(seed), "N", .def = "0", .help = "prompt order, sampling, LoRA init" },
    { CLI_INT, "threads", CLI_ARG(threads), "N", .lo = 1, .hi = 1024, .help = "threads for every kernel" },
};

static const cli_command k_grpo = {
    .name = "grpo",
.usage = "--model DIR --data FILE.jsonl --out DIR (--reward NAME[:W][,NAME[:W]...] | --env CMD) [options]",
    .about = "Rows: {\"prompt\": str, \"answer\": str, ...} (other fields are ignored).  Each step\n"
             "samples --num-generations completions for each of --batch-prompts prompts, scores\n"
             "them, and applies --num-iterations GRPO updates.  The trained model is saved in\n"
             "Hugging Face layout at --out, with OUT/metrics.jsonl.\n\n"
             "rewards (weights W default to 1; R = sum of W * reward):\n"
             "  exact      1 if the completion, stripped of surrounding whitespace, equals the answer, else 0\n"
             "  contains   1 if the answer appears in the completion, else 0\n"
             "  length     -(completion tokens / --max-new-tokens): a length penalty (e.g. length:0.1)\n\n"
             "--env CMD: each request line is {\"step\", \"episode\", \"group\", \"turn\", \"attempt\", \"row\",\n"
             "\"text\", \"turn_text\", \"turn_end\", \"final\", \"tokens_left\"}; each reply line is\n"
             "{\"append\": TEXT} (not in the loss), {\"done\": true, \"rewards\": [..]} or {\"error\": WHY};\n"
             "\"rewards\"/\"turn_rewards\" (N numbers or nulls) may come with append or done.",
};

int grpo_parse_args(grpo_args *a, int argc, char **argv)
{
    pt_optimizer_options_init(&a->opt);
    pt_grpo_options_init(&a->grpo);
    pt_generate_options_init(&a->gen);
    pt_builtin_rewards_init(&a->rewards);
    a->grpo.epsilon_high = NAN; /* unset: --epsilon */
    a->eval_every = a->eval_samples = -1; /* unset */
    a->env_rewards = a->max_turns = a->max_total_tokens = -1;
    a->env_timeout = -1;
    a->env_max_line = -1;
    cli_opt run_opts[CLI_N_RUN_OPTS];
    cli_run_opts_with(run_opts, k_grpo_run_opts, CLI_COUNT_OF(k_grpo_run_opts));
    const cli_group groups[] = {
        { "options", k_grpo_io_opts, CLI_COUNT_OF(k_grpo_io_opts), a },
        { "generation", k_grpo_generation_opts, CLI_COUNT_OF(k_grpo_generation_opts), a },
        { "environment (multi-turn episodes; docs/cli-grpo.md)", k_grpo_env_opts, CLI_COUNT_OF(k_grpo_env_opts), a },
        { "held-out evaluation", k_grpo_eval_opts, CLI_COUNT_OF(k_grpo_eval_opts), a },
        { "length and batch", k_grpo_length_opts, CLI_COUNT_OF(k_grpo_length_opts), a },
        { "optimizer", k_grpo_lr_opt, CLI_COUNT_OF(k_grpo_lr_opt), a },
        { NULL, cli_optimizer_opts, cli_n_optimizer_opts, &a->opt },
        { "GRPO (docs/grpo.md)", k_grpo_opts, CLI_COUNT_OF(k_grpo_opts), a },
        { "LoRA", cli_lora_opts, cli_n_lora_opts, &a->lora },
        { "checkpoints and output", run_opts, CLI_N_RUN_OPTS, &a->run },
        { "data-parallel runs (mpirun -np N posttrain grpo ...; docs/distributed.md)", cli_dist_opts,
          cli_n_dist_opts, &a->dist },
        { "other", k_grpo_other_opts, CLI_COUNT_OF(k_grpo_other_opts), a },
    };
    int rc = cli_parse(&k_grpo, groups, CLI_COUNT_OF(groups), argc, argv, NULL);
    if (rc)
        return rc;
    if (a->gen.temperature > 0 && a->gen.temperature < 1e-6)
        return cli_usage_error("grpo", "--temperature must be 0 (greedy) or at least 1e-6");
    if (a->chat && a->chat_template)
        return cli_usage_error("grpo", "give --chat or --chat-template, not both");
    if (a->env && a->rewards.n)
        return cli_usage_error("grpo", "give --env or --reward, not both (the environment's rewards replace the "
                                       "built-in ones)");
    if (!a->env && !a->rewards.n)
        return cli_usage_error("grpo", "--reward is required (or --env CMD)");
    if (!a->env && (a->env_rewards != -1 || a->max_turns != -1 || a->max_total_tokens != -1 || a->n_stop_strings ||
                    a->env_timeout != -1 || a->env_max_line != -1))
        return cli_usage_error("grpo", "%s needs --env CMD",
                               a->env_rewards != -1 ? "--env-rewards" : a->max_turns != -1 ? "--max-turns"
                               : a->max_total_tokens != -1 ? "--max-total-tokens" : a->n_stop_strings ? "--stop-string"
                               : a->env_timeout != -1 ? "--env-timeout" : "--env-max-line");
    if (a->env && a->eval)
        return cli_usage_error("grpo", "--eval does not apply to --env (it scores single completions with --reward)");
    if (a->env && !*a->env)
        return cli_usage_error("grpo", "--env needs a command");
    if (a->env) {
        static const char *const env_names[PT_GRPO_MAX_REWARD_FUNCS] = { "env0", "env1", "env2", "env3",
                                                                         "env4", "env5", "env6", "env7" };
        a->rewards.n = a->env_rewards == -1 ? 1 : a->env_rewards;
        for (int k = 0; k < a->rewards.n; k++) {
            a->rewards.kinds[k] = PT_REWARD_LENGTH; /* unused: the environment scores */
            a->reward_names[k] = env_names[k];
            a->rewards.weights[k] = 1.0;
        }
        if (a->max_turns == -1)
            a->max_turns = 4;
        if (a->env_timeout == -1)
            a->env_timeout = 60;
        if (a->env_max_line == -1)
            a->env_max_line = (int64_t)4 << 20;
    }
    if (!a->eval && (a->eval_every != -1 || a->eval_samples != -1))
        return cli_usage_error("grpo", "%s needs --eval FILE.jsonl (the held-out prompts)",
                               a->eval_every != -1 ? "--eval-every" : "--eval-samples");
    if (a->eval_every == -1)
        a->eval_every = 0;
    if (a->eval_samples == -1)
        a->eval_samples = 1;
    if ((rc = cli_check_lora("grpo", &a->lora)) || (rc = cli_check_run("grpo", &a->run)) ||
        (rc = cli_check_dist("grpo", &a->dist, a->save_every)))
        return rc;
    if (a->G * (int64_t)a->batch_prompts > 65536)
        return cli_usage_error("grpo", "--num-generations x --batch-prompts is too large");
    if (isnan(a->grpo.epsilon_high))
        a->grpo.epsilon_high = a->grpo.epsilon_low;
    a->grpo.max_completion_length = a->rewards.max_new_tokens = a->gen.max_new_tokens;
    /* the step scores at the sampling temperature (greedy: the plain model) */
    a->grpo.temperature = a->gen.temperature > 0 ? a->gen.temperature : 1.0;
    /* the library's checks of the GRPO options, before anything is loaded */
    if (!(a->grpo.importance_sampling_clip_min < a->grpo.importance_sampling_clip_max))
        return cli_usage_error("grpo", "--importance-sampling-clip-min must be below --importance-sampling-clip-max");
    if (a->grpo.delta != 0 && !(a->grpo.delta > 1 + a->grpo.epsilon_high))
        return cli_usage_error("grpo", "--delta must be 0 (off) or above 1 + --epsilon-high (%g)",
                               1 + a->grpo.epsilon_high);
    if (a->grpo.delta != 0 && (a->grpo.loss_type == PT_GRPO_LOSS_CISPO || a->grpo.loss_type == PT_GRPO_LOSS_VESPO))
        return cli_usage_error("grpo", "--delta does not apply to --loss-type %s",
                               pt_grpo_loss_type_name(a->grpo.loss_type));
    if (!(a->grpo.entropy_coef_min <= a->grpo.entropy_coef_max))
        return cli_usage_error("grpo", "--entropy-coef-min must not be above --entropy-coef-max");
    a->grpo.entropy_last = INFINITY; /* the adaptive control's first update applies no bonus (TRL) */
    /* the samples carry the sampler's log-probabilities: TRL's rule for vespo */
    if (a->grpo.loss_type == PT_GRPO_LOSS_VESPO &&
        (a->grpo.importance_sampling_correction == PT_GRPO_IS_SEQUENCE_MASK ||
         a->grpo.importance_sampling_correction == PT_GRPO_IS_SEQUENCE_TRUNCATE))
        return cli_usage_error("grpo", "--loss-type vespo needs --importance-sampling-correction token_truncate, "
                               "token_mask or none (it folds the per-token correction into its sequence weight; "
                               "the default sequence_mask does not apply)");
    if (a->grpo.loss_type == PT_GRPO_LOSS_CISPO && !(a->grpo.epsilon_high > 0))
        return cli_usage_error("grpo", "--loss-type cispo needs --epsilon-high > 0 (its cap on the ratio; TRL "
                               "recommends 5)");
    if ((a->grpo.importance_sampling_correction == PT_GRPO_IS_TOKEN_TRUNCATE ||
         a->grpo.importance_sampling_correction == PT_GRPO_IS_SEQUENCE_TRUNCATE) &&
        a->grpo.importance_sampling_clip_min == 0 && isinf(a->grpo.importance_sampling_clip_max))
        return cli_usage_error("grpo", "--importance-sampling-correction %s needs --importance-sampling-clip-min > 0 "
                               "or a finite --importance-sampling-clip-max",
                               pt_grpo_is_correction_name(a->grpo.importance_sampling_correction));
    return 0;
}
