/* posttrain export --checkpoint CKPT_DIR: the model a training checkpoint
 * holds, rebuilt from its base model and the trained tensors.  A checkpoint
 * (train/checkpoint.c) keeps only the trainable tensors and the optimizer
 * state; `posttrain sft` and `posttrain grpo` record in its host JSON
 * (cli_host_new) the base model ("model", its resolved path) and, for a LoRA
 * run, the adapters' options ("lora": rank, alpha, targets), which is what
 * the rebuild needs. */
#include "cmd_export.h"

#include <string.h>

/* What the host JSON says (pt_checkpoint_host_model): the base model (or
 * NULL) and the LoRA options (has_lora false for a full fine-tune). */
typedef struct ckpt_host {
    char *model;
    bool has_lora;
    pt_lora_options lora;
} ckpt_host;

static int read_host(ckpt_host *h, const char *ckpt)
{
    char *text = NULL;
    int st = pt_checkpoint_read_host(&text, ckpt);
    if (st)
        return cli_fail("--checkpoint", st);
    st = text ? pt_checkpoint_host_model(&h->model, &h->lora, &h->has_lora, text) : PT_OK;
    pt_free(text);
    if (st == PT_EFORMAT)
        fprintf(stderr, "posttrain export: --checkpoint %s: the recorded \"lora\" lacks rank, alpha or "
                        "targets\n", ckpt);
    return st == PT_EFORMAT ? 1 : st ? cli_fail("--checkpoint", st) : 0;
}

/* The base model, with the run's adapters when it was a LoRA run. */
static int load_base(pt_model **m, const export_args *a, const ckpt_host *h)
{
    const char *base = a->model ? a->model : h->model;
    if (!base)
        return cli_usage_error("export", "--checkpoint %s does not record its base model (a checkpoint "
                               "written before posttrain recorded it): give it with --model BASE_DIR",
                               a->checkpoint);
    int rc = a->model ? 0 : cli_check_disjoint("export", "--out", a->out, "the checkpoint's base model", base, true);
    if (rc)
        return rc;
    int st = pt_model_load_dir(m, base, NULL);
    if (st)
        return cli_fail(a->model ? "--model" : "the checkpoint's base model", st);
    if (h->has_lora && (st = pt_model_add_lora(*m, &h->lora)))
        return cli_fail("the checkpoint's LoRA adapters", st);
    fprintf(stderr, "posttrain export: checkpoint %s over %s%s\n", a->checkpoint, base,
            h->has_lora ? " with its LoRA adapters" : "");
    return 0;
}

int export_load_checkpoint(pt_model **out, const export_args *a)
{
    *out = NULL;
    ckpt_host h = { 0 };
    int rc = read_host(&h, a->checkpoint);
    pt_model *m = NULL;
    if (!rc)
        rc = load_base(&m, a, &h);
    int st = rc ? PT_OK : pt_checkpoint_load_weights(m, a->checkpoint);
    if (st) {
        rc = cli_fail("--checkpoint", st);
        if (!h.has_lora)
            fprintf(stderr, "posttrain export: (the checkpoint records no LoRA options: if it is of a "
                            "LoRA run from before they were recorded, it cannot be rebuilt)\n");
    }
    if (!rc && a->adapter_only && !pt_model_has_lora(m))
        rc = cli_usage_error("export", "--adapter-only: --checkpoint %s is of a full fine-tune (it "
                             "records no LoRA adapters)", a->checkpoint);
    pt_free(h.model);
    if (rc)
        pt_model_free(m);
    else
        *out = m;
    return rc;
}
