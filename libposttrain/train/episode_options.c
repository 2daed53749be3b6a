/* pt_episodes_run's options (pt_episode_options_init) and its arguments'
 * checks: the options against the generator, the prompts against the
 * model's vocabulary and the episode length. */
#include "train/episode_internal.h"

#include "model/generate_rows.h"

#include <stdio.h>

int pt_episode_options_init(pt_episode_options *o)
{
    PT_STRUCT_INIT_ZERO(o);
    o->max_turns = 4;
    o->n_reward_funcs = 1;
    o->on_error = PT_EPISODE_ERROR_CONTINUE;
    return PT_OK;
}

int pt__episode_check_options(const pt_episode_options *o, const pt_generator *g, int *limit)
{
    static const char fn[] = "pt_episodes_run";
    const int max_seq = pt__genrows_max_seq(g);
    if (o->max_turns < 1)
        return pt__err_arg(fn, "max_turns", "%d must be at least 1", o->max_turns);
    if (o->max_total_tokens < 0 || o->max_total_tokens > max_seq)
        return pt__err_arg(fn, "max_total_tokens", "%d must be in 0 .. the generator's max_seq "
                          "%d (0: max_seq)", o->max_total_tokens, max_seq);
    if (o->max_total_tokens == 1 || (o->max_total_tokens == 0 && max_seq < 2))
        return pt__err_arg(fn, "max_total_tokens", "%d leaves no room for a prompt and a "
                          "sampled token", o->max_total_tokens ? o->max_total_tokens : max_seq);
    *limit = o->max_total_tokens ? o->max_total_tokens : max_seq;
    if (o->n_stop_strings < 0)
        return pt__err_arg(fn, "n_stop_strings", "%d must be >= 0", o->n_stop_strings);
    if (o->n_stop_strings > 0 && !o->stop_strings)
        return pt__err_arg(fn, "stop_strings", "is NULL but n_stop_strings is %d",
                          o->n_stop_strings);
    for (int i = 0; i < o->n_stop_strings; i++)
        if (!o->stop_strings[i] || !o->stop_strings[i][0]) {
            char arg[32];
            snprintf(arg, sizeof arg, "stop_strings[%d]", i);
            return pt__err_arg(fn, arg, "is %s: a stop string needs at least one byte",
                              o->stop_strings[i] ? "empty" : "NULL");
        }
    if (o->n_stop_strings > 0 && !o->tokenizer)
        return pt__err_arg(fn, "tokenizer", "is NULL, but stop strings need one to decode the "
                          "sampled tokens");
    if (o->decode_text && !o->tokenizer)
        return pt__err_arg(fn, "tokenizer", "is NULL, but decode_text needs one");
    if (o->n_reward_funcs < 1 || o->n_reward_funcs > PT_GRPO_MAX_REWARD_FUNCS)
        return pt__err_arg(fn, "n_reward_funcs", "%d must be in 1 .. %d", o->n_reward_funcs,
                          PT_GRPO_MAX_REWARD_FUNCS);
    const int cap = pt__genrows_step_capacity(g), B = pt__genrows_max_batch(g);
    if (o->max_step_tokens != 0 && (o->max_step_tokens < B || o->max_step_tokens > cap))
        return pt__err_arg(fn, "max_step_tokens", "%d must be 0 or in %d (the generator's "
                          "max_batch: every decoding row feeds a token per step) .. %d (what "
                          "a step of this generator holds)", o->max_step_tokens, B, cap);
    if (!pt_episode_on_error_name(o->on_error))
        return pt__err_arg(fn, "on_error", "%d is not a pt_episode_on_error (0 continue, "
                          "1 stop)", o->on_error);
    return PT_OK;
}

int pt__episode_check_prompts(const int32_t *ids, const int32_t *lens, int n, int V, int L)
{
    size_t off = 0;
    for (int e = 0; e < n; e++) {
        int T = lens[e];
        if (T < 1 || T >= L)
            return pt__err(PT_EINVAL, "pt_episodes_run: prompt %d has length %d; it must be in "
                          "1 .. %d (max_total_tokens %d leaves room for a sampled token)",
                          e, T, L - 1, L);
        for (int t = 0; t < T; t++)
            if (ids[off + (size_t)t] < 0 || ids[off + (size_t)t] >= V)
                return pt__err(PT_ERANGE, "pt_episodes_run: prompt %d token %d is id %d, "
                              "outside the vocabulary [0, %d)", e, t, ids[off + (size_t)t], V);
        off += (size_t)T;
    }
    return PT_OK;
}
