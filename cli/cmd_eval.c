/* posttrain eval --model DIR --data FILE.jsonl: mean next-token loss. */
#include "cli.h"

#include <stddef.h>
#include <stdbool.h>
#include <string.h>

typedef struct eval_args {
    const char *model, *data, *adapter;
    bool json, bf16;
    int quantize;
    pt_eval_options eo;
} cli_args; /* CLI_ARG's */

static const cli_opt k_eval_opts[] = {
    { CLI_PATH, "model", CLI_ARG(model), "DIR", .required = true,
      .help = "Hugging Face model directory, or a GGUF file (F32/F16/BF16, or\nquantized: Q8_0, Q4_0, Q4_K, ... frozen, for LoRA)" },
    { CLI_PATH, "data", CLI_ARG(data), "FILE.jsonl", .required = true, .help = "the rows to score" },
    { CLI_ENUM, "quantize", CLI_ARG(quantize), "TYPE", .def = "none", .from_name = pt_quantize_from_name,
      .enum_name = pt_quantize_name,
      .help = "quantize the weights on load: q8_0 or q4_0 (as llama-quantize\n--pure; the base is then frozen: LoRA only; docs/gguf.md)" },
    { CLI_FLAG, "bf16", CLI_ARG(bf16), .help = "keep the weights in BF16 (half the memory; products\nin BF16 where the CPU has it, else widened to FP32;\ndocs/bf16.md)" },
    { CLI_FLAG, "json", CLI_ARG(json),
      .help = "print one JSON object {\"loss\", \"tokens\", \"rows\": [{\"loss\",\n"
              "\"tokens\"}, ...]} (a row without tokens has \"loss\": null)" },
    { CLI_INT, "max-length", CLI_ARG(eo.max_length), "N", .lo = 2, .hi = 1 << 24,
      .help = "cut rows to their first N tokens (default: the model's max\npositions)" },
    { CLI_FLAG_CLEAR, "no-special", CLI_ARG(eo.add_special), .help = "do not add special tokens to {\"text\"} rows" },
    { CLI_PATH, "adapter", CLI_ARG(adapter), "DIR", .help = "apply a PEFT LoRA adapter directory to the model first" },
};

static const cli_command k_eval = {
    .name = "eval",
    .usage = "--model DIR --data FILE.jsonl [options]",
    .about = "Mean next-token loss (nats per token; every position predicts the next) of a model\n"
             "on JSONL rows {\"text\": ...} (encoded with the model's tokenizer, special tokens\n"
             "added as its post-processor says, e.g. BOS) or {\"input_ids\": [...],\n"
             "\"loss_mask\": [...]} (the mask is optional; 0 leaves a token out as a target).",
};

int cmd_eval(int argc, char **argv)
{
    cli_args a = { 0 };
    pt_eval_options_init(&a.eo); /* add_special true */
    int rc = cli_parse_table(&k_eval, k_eval_opts, CLI_COUNT_OF(k_eval_opts), &a, argc, argv, NULL);
    if (rc)
        return cli_exit_code(rc);
    pt_model *m = NULL;
    if (cli_open_model(&m, "eval", a.model, a.bf16, a.quantize, a.adapter, "eval", "eval"))
        return 1;
    pt_eval_result *r = NULL;
    int st = pt_model_eval_jsonl(&r, m, pt_model_tokenizer(m), a.data, &a.eo);
    if (st) {
        pt_model_free(m);
        return cli_fail("eval", st);
    }
    if (r->n_rows == 0 || r->tokens == 0) {
        /* a loss over nothing is not a loss of 0 */
        if (r->n_rows == 0)
            fprintf(stderr, "posttrain eval: %s has no rows to score\n", a.data);
        else
            fprintf(stderr, "posttrain eval: %s: none of its %zu rows has a token to predict\n", a.data,
                    r->n_rows);
        pt_eval_result_free(r);
        pt_model_free(m);
        return 1;
    }
    char *text = NULL;
    if ((st = (a.json ? pt_eval_result_to_json : pt_eval_result_to_text)(&text, NULL, r)) == PT_OK)
        printf(a.json ? "%s\n" : "%s", text);
    pt_free(text);
    pt_eval_result_free(r);
    pt_model_free(m);
    return st ? cli_fail("eval", st) : 0;
}
