/* Generator (not built by meson): what llama.cpp computes on a GGUF file
 * for a sequence of token ids, through its public C API (llama.h), for the
 * goldens of tests/kernels/data/quant (its README has the commands); only
 * the output is committed.
 *
 *   llamacpp_logits MODEL.gguf THREADS ID ID ...
 *       the logits of every position, one batch, as raw float32
 *       little-endian rows (n_tokens x n_vocab) on stdout;
 *   LLAMACPP_GREEDY=N llamacpp_logits MODEL.gguf THREADS ID ID ...
 *       the ids of N greedy tokens after the prompt ids (argmax, the lowest
 *       id on a tie), one line, space-separated, on stdout.
 *
 * Environment: LLAMACPP_ONE_BY_ONE=1 decodes the prompt one llama_decode
 * call per token (llama.cpp's decoding path) instead of one batch;
 * LLAMACPP_LORA=ADAPTER.gguf applies that LoRA adapter at scale 1.
 * The KV cache is F32 (llama.cpp's default is F16, which rounds every key
 * and value: a perturbation the 8-bit activations of the next products
 * turn into roundings that differ, about 0.2 in stories260K's logits).
 */
#include <llama.h>

#include <stdio.h>
#include <stdlib.h>

static int decode_one(struct llama_context *ctx, struct llama_batch *b, int32_t id, int pos)
{
    b->token[0] = id;
    b->pos[0] = pos;
    b->n_seq_id[0] = 1;
    b->seq_id[0][0] = 0;
    b->logits[0] = 1;
    b->n_tokens = 1;
    return llama_decode(ctx, *b);
}

static int32_t argmax(const float *v, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL.gguf THREADS ID...\n", argv[0]);
        return 2;
    }
    const int n = argc - 3;
    const char *e = getenv("LLAMACPP_ONE_BY_ONE"), *lora = getenv("LLAMACPP_LORA"),
               *greedy = getenv("LLAMACPP_GREEDY");
    const int n_new = greedy ? atoi(greedy) : 0;
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model)
        return 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n + n_new);
    cp.n_batch = (uint32_t)n;
    cp.n_ubatch = (uint32_t)n;
    cp.n_threads = cp.n_threads_batch = atoi(argv[2]);
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx)
        return 1;
    if (lora) {
        struct llama_adapter_lora *a = llama_adapter_lora_init(model, lora);
        if (!a || llama_set_adapter_lora(ctx, a, 1.0f) != 0)
            return 1;
    }
    const int step = e && atoi(e) ? 1 : n;
    const int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int at = 0; at < n; at += step) {
        for (int i = 0; i < step; i++) {
            b.token[i] = atoi(argv[3 + at + i]);
            b.pos[i] = at + i;
            b.n_seq_id[i] = 1;
            b.seq_id[i][0] = 0;
            b.logits[i] = 1;
        }
        b.n_tokens = step;
        if (llama_decode(ctx, b) != 0)
            return 1;
        for (int i = 0; i < step && !n_new; i++)
            if (fwrite(llama_get_logits_ith(ctx, i), sizeof(float), (size_t)nv, stdout) != (size_t)nv)
                return 1;
    }
    for (int t = 0; t < n_new; t++) {
        const int32_t id = argmax(llama_get_logits_ith(ctx, t == 0 ? step - 1 : 0), nv);
        printf(t ? " %d" : "%d", id);
        if (t + 1 < n_new && decode_one(ctx, &b, id, n + t) != 0)
            return 1;
    }
    if (n_new)
        printf("\n");
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
