/* What the model tests that compare two ways of running the backward
 * (test_checkpointing.c, test_stash.c) share: a tiny model with gradients,
 * LoRA adapters whose path counts, a batch over fixed arrays, and the
 * trainable gradients taken out. */
#ifndef PT_MODEL_TESTUTIL_H
#define PT_MODEL_TESTUTIL_H

#include "testutil.h"

#include "model/model.h"

#include <string.h>

/* A tiny model of arch (pt_test_tiny_config, vocab V) with `layers`
 * layers, initializer range 0.2, and its gradients allocated. */
static inline pt_model *mt_tiny(int arch, int vocab, int layers, uint64_t seed)
{
    pt_model_config c;
    pt_test_tiny_config(&c, arch, vocab);
    c.num_hidden_layers = layers;
    return pt_test_model_with_grads(&c, seed);
}

/* Rank-2 adapters on every projection, with values (B starts at zero:
 * without them the adapters' path would not count). */
static inline void mt_add_lora(pt_model *m)
{
    pt_lora_options lo;
    pt_lora_options_init(&lo);
    lo.rank = 2;
    lo.targets = PT_LORA_ALL;
    ck_assert_ok(pt_model_add_lora(m, &lo));
    ck_assert_ok(pt_model_alloc_grads(m));
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        if (t->adapter)
            for (size_t j = 0; j < t->numel; j++)
                t->data[j] = (float)((int)(j % 5) - 2) * 0.05f;
    }
    pt_model_weights_changed(m);
}

/* Every trainable gradient of m, appended to out at *k, and zeroed. */
static inline void mt_take_grads(pt_model *m, float *out, size_t *k)
{
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        if (!t->trainable)
            continue;
        memcpy(out + *k, t->grad, t->numel * sizeof *out);
        memset(t->grad, 0, t->numel * sizeof *out);
        *k += t->numel;
    }
}

#endif
