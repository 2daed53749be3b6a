/* A run's prompt order (posttrain/grpo_run.h): a seeded shuffle per pass,
 * recorded in a run state and continued on resume. */
#include "posttrain/grpo_run.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

/* The order's RNG at the start of a run: the seed mixed with the first
 * 64 bits of SHA-512's IV, as posttrain grpo always did. */
#define ORDER_SEED_MIX 0x6A09E667F3BCC908ull

struct pt_prompt_order {
    pt_prompt_order_options o;
    int32_t *order;     /* the current pass */
    int64_t cursor;     /* rows of it drawn */
    int64_t passes;
    uint64_t rng;       /* the splitmix state now */
    uint64_t order_rng; /* its state before the shuffle that made `order` */
};

static const pt_enum_entry k_faults[] = {
    { PT_ORDER_FAULT_NONE, "none" },
    { PT_ORDER_FAULT_ROWS, "rows" },
    { PT_ORDER_FAULT_CURSOR, "cursor" },
    { PT_ORDER_FAULT_RNG, "rng" },
};
PT_ENUM_NAME_FUNCS(pt_prompt_order_fault, k_faults, "prompt order fault")

PT_ZERO_INIT(pt_prompt_order_options_init, pt_prompt_order_options, opts)

int pt_prompt_order_restart(pt_prompt_order *o)
{
    PT_CHECK_NULL(o);
    o->rng = o->order_rng = o->o.seed ^ ORDER_SEED_MIX;
    o->cursor = o->o.rows;
    o->passes = 0;
    return PT_OK;
}

int pt_prompt_order_create(pt_prompt_order **out, const pt_prompt_order_options *opts)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(opts);
    pt_prompt_order_options o;
    PT_CHECK_STRUCT_READ(o, opts, pt_prompt_order_options_init);
    PT_CHECK_ARG(o.rows >= 1 && o.rows <= INT32_MAX, opts->rows, "%lld is not in 1 .. %d", (long long)o.rows,
                 INT32_MAX);
    pt_prompt_order *p = calloc(1, sizeof *p);
    if (!p || !(p->order = pt__malloc_array((size_t)o.rows, sizeof *p->order))) {
        free(p);
        return pt__err(PT_ENOMEM, "%s: out of memory", __func__);
    }
    p->o = o;
    pt_prompt_order_restart(p);
    *out = p;
    return PT_OK;
}

void pt_prompt_order_free(pt_prompt_order *o)
{
    if (!o)
        return;
    free(o->order);
    free(o);
}

/* A new pass: order = a shuffle of the rows drawn from rng (order_rng
 * keeps the state it started from). */
static void new_pass(pt_prompt_order *o)
{
    const int32_t n = (int32_t)o->o.rows;
    o->order_rng = o->rng;
    for (int32_t i = 0; i < n; i++)
        o->order[i] = i;
    for (int32_t i = n - 1; i > 0 && !o->o.no_shuffle; i--) {
        int32_t j = (int32_t)(pt__splitmix64(&o->rng) % (uint64_t)(i + 1));
        int32_t tmp = o->order[i];
        o->order[i] = o->order[j];
        o->order[j] = tmp;
    }
    o->cursor = 0;
    o->passes++;
}

int pt_prompt_order_next(pt_prompt_order *o, int32_t *rows, int n)
{
    PT_CHECK_NULL(o);
    PT_CHECK_ARG(n >= 0, n, "%d must be >= 0", n);
    PT_CHECK_ARG(n == 0 || rows, rows, "is NULL");
    if (o->o.drop_last && n > 0 && o->o.rows - o->cursor < n)
        new_pass(o); /* TRL's sampler drops a pass's last, incomplete batch */
    for (int i = 0; i < n; i++) {
        if (o->cursor == o->o.rows)
            new_pass(o);
        rows[i] = o->order[o->cursor++];
    }
    return PT_OK;
}

int64_t pt_prompt_order_passes(const pt_prompt_order *o)
{
    return o ? o->passes : 0;
}

int pt_prompt_order_save(pt_run_state *state, const pt_prompt_order *o)
{
    PT_CHECK_NULL(state);
    PT_CHECK_NULL(o);
    state->rng = o->rng;
    state->order_rng = o->order_rng;
    state->cursor = o->cursor;
    state->rows = o->o.rows;
    return PT_OK;
}

int pt_prompt_order_load(pt_prompt_order *o, const pt_run_state *state, int *fault)
{
    if (fault)
        *fault = PT_ORDER_FAULT_NONE;
    PT_CHECK_NULL(o);
    PT_CHECK_NULL(state);
    pt_run_state s;
    PT_CHECK_STRUCT_READ(s, state, pt_run_state_init);
    int why = PT_ORDER_FAULT_NONE;
    if (s.rows != o->o.rows)
        why = PT_ORDER_FAULT_ROWS;
    else if (s.cursor < 0 || s.cursor > o->o.rows)
        why = PT_ORDER_FAULT_CURSOR;
    else if (s.cursor == o->o.rows && s.rng == s.order_rng) {
        /* no pass begun (a state of the start): the next draw begins one */
        o->rng = o->order_rng = s.rng;
        o->cursor = s.cursor;
        o->passes = s.epoch;
    } else {
        /* rebuild the pass from the state before its shuffle */
        const pt_prompt_order keep = *o;
        int32_t *saved = pt__malloc_array((size_t)o->o.rows, sizeof *saved);
        if (!saved)
            return pt__err(PT_ENOMEM, "%s: out of memory", __func__);
        memcpy(saved, o->order, (size_t)o->o.rows * sizeof *saved);
        o->rng = s.order_rng;
        new_pass(o);
        if (o->rng != s.rng) {
            memcpy(o->order, saved, (size_t)o->o.rows * sizeof *saved);
            *o = keep;
            why = PT_ORDER_FAULT_RNG;
        } else {
            o->cursor = s.cursor;
            o->passes = s.epoch;
        }
        free(saved);
    }
    if (fault)
        *fault = why;
    switch (why) {
    case PT_ORDER_FAULT_ROWS:
        return pt__err(PT_ESTATE, "%s: the state was made with %lld rows, the order has %lld", __func__,
                       (long long)s.rows, (long long)o->o.rows);
    case PT_ORDER_FAULT_CURSOR:
        return pt__err(PT_ESTATE, "%s: the state's cursor %lld is past the %lld rows", __func__,
                       (long long)s.cursor, (long long)o->o.rows);
    case PT_ORDER_FAULT_RNG:
        return pt__err(PT_ESTATE, "%s: the state is inconsistent (its order_rng does not lead to its rng)",
                       __func__);
    default:
        return PT_OK;
    }
}
