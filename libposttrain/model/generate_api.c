/* The generator's public entry points that take it for the call (one call
 * at a time on a handle: core/busy.h), and its small setters. */
#include "model/generate_struct.h"
#include "model/generate_rows.h"

#include "posttrain/modelio.h"
#include "posttrain/tokenizer.h"

int pt_generate_options_init(pt_generate_options *o)
{
    PT_CHECK_NULL(o);
    *o = (pt_generate_options){ .size = sizeof *o, .max_new_tokens = 64, .temperature = 1.0f,
                                .top_p = 1.0f, .n_stop_ids = -1 };
    return PT_OK;
}

int pt_model_stop_ids(int32_t out[2], int *n, const pt_model *m)
{
    PT_CHECK_NULL(n);
    *n = 0;
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(m);
    if (m->cfg.eos_token_id >= 0)
        out[(*n)++] = m->cfg.eos_token_id;
    const pt_tokenizer *tok = pt_model_tokenizer(m);
    int32_t te = tok ? pt_tokenizer_eos_id(tok) : -1;
    if (te >= 0 && te < m->cfg.vocab_size && (*n == 0 || out[0] != te))
        out[(*n)++] = te;
    return PT_OK;
}

void pt__generator_set_logits_hook(pt_generator *gen, pt_generate_logits_fn fn, void *payload)
{
    gen->hook = fn;
    gen->hook_payload = payload;
}

int pt_generator_set_num_threads(pt_generator *gen, int n)
{
    PT_CHECK_NULL(gen);
    int st = pt__thread_setting_check(n, __func__);
    if (!st && !(st = pt__busy_enter(&gen->busy, __func__, "generator", gen))) {
        gen->num_threads = n;
        pt__busy_leave(&gen->busy);
    }
    return st;
}

int pt_generator_get_num_threads(const pt_generator *gen)
{
    if (!gen)
        return pt__err(PT_EINVAL, "pt_generator_get_num_threads: gen is NULL");
    return pt__thread_setting_count(gen->num_threads);
}

int pt_generate(pt_generator *g, const int32_t *prompt_ids, const int32_t *prompt_lens, int batch,
                const pt_generate_options *opts, int32_t *tokens, int32_t *n_tokens,
                int32_t *finish_reasons, float *logprobs)
{
    PT_CHECK_NULL(g);
    PT_CHECK_NULL(prompt_ids);
    PT_CHECK_NULL(prompt_lens);
    PT_CHECK_NULL(tokens);
    PT_CHECK_NULL(n_tokens);
    int st = pt__busy_enter(&g->busy, __func__, "generator", g);
    if (st)
        return st;
    st = pt__generator_run(g, prompt_ids, prompt_lens, batch, opts, tokens, n_tokens, finish_reasons,
                          logprobs);
    pt__busy_leave(&g->busy);
    return st;
}

int pt__genrows_take(pt_generator *g, const char *fn)
{
    return pt__busy_enter(&g->busy, fn, "generator", g);
}

void pt__genrows_give(pt_generator *g)
{
    pt__busy_leave(&g->busy);
}

static const pt_enum_entry k_kv_cache[] = {
    { PT_KV_CACHE_FP32, "fp32" },
    { PT_KV_CACHE_BF16, "bf16" },
};
PT_ENUM_NAME_FUNCS(pt_kv_cache, k_kv_cache, "KV-cache type")

int pt_generator_set_kv_cache(pt_generator *gen, int type)
{
    PT_CHECK_NULL(gen);
    if (!pt_kv_cache_name(type))
        return pt__err(PT_EINVAL, "pt_generator_set_kv_cache: type %d is not a pt_kv_cache "
                      "(PT_KV_CACHE_FP32 or PT_KV_CACHE_BF16)", type);
    int st = pt__busy_enter(&gen->busy, __func__, "generator", gen);
    if (st)
        return st;
    st = pt__generator_set_kv16(gen, type == PT_KV_CACHE_BF16);
    pt__busy_leave(&gen->busy);
    return st;
}

int pt_generator_get_kv_cache(const pt_generator *gen)
{
    if (!gen)
        return pt__err(PT_EINVAL, "pt_generator_get_kv_cache: gen is NULL");
    return pt__generator_kv16(gen) ? PT_KV_CACHE_BF16 : PT_KV_CACHE_FP32;
}
