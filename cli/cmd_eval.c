/* posttrain eval --model DIR --data FILE.jsonl: mean next-token loss. */
#include "cli.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: posttrain eval --model DIR --data FILE.jsonl [options]\n\n"
            "Mean next-token loss (nats per token; every position predicts the next) of a model\n"
            "on JSONL rows {\"text\": ...} (encoded with the model's tokenizer, special tokens\n"
            "added as its post-processor says, e.g. BOS) or {\"input_ids\": [...],\n"
            "\"loss_mask\": [...]} (the mask is optional; 0 leaves a token out as a target).\n\n"
            "options:\n"
            "  --json            print one JSON object {\"loss\", \"tokens\", \"rows\": [{\"loss\",\n"
            "                    \"tokens\"}, ...]} (a row without tokens has \"loss\": null)\n"
            "  --max-length N    cut rows to their first N tokens (default: the model's max\n"
            "                    positions)\n"
            "  --no-special      do not add special tokens to {\"text\"} rows\n"
            "  --adapter DIR     apply a PEFT LoRA adapter directory to the model first\n");
}

static void print_num(double v)
{
    if (isfinite(v))
        printf("%.17g", v);
    else
        printf("null");
}

int cmd_eval(int argc, char **argv)
{
    const char *model_dir = NULL, *data = NULL, *adapter = NULL;
    bool json = false, special = true;
    long max_length = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--no-special")) {
            special = false;
        } else if (!strcmp(a, "--model") || !strcmp(a, "--data") || !strcmp(a, "--adapter")) {
            if (i + 1 >= argc)
                return cli_usage_error("eval", "%s needs a value", a);
            if (!strcmp(a, "--model"))
                model_dir = argv[++i];
            else if (!strcmp(a, "--data"))
                data = argv[++i];
            else
                adapter = argv[++i];
        } else if (!strcmp(a, "--max-length")) {
            if (i + 1 >= argc || cli_parse_long(argv[i + 1], 2, 1L << 24, &max_length))
                return cli_usage_error("eval", "--max-length needs an integer in [2, %ld]",
                                       1L << 24);
            i++;
        } else {
            return cli_usage_error("eval", "unknown argument '%s'", a);
        }
    }
    if (!model_dir || !data)
        return cli_usage_error("eval", "needs --model DIR and --data FILE.jsonl");

    pt_model *m = NULL;
    int st = pt_model_load_dir(&m, model_dir, NULL);
    if (st)
        return cli_fail("eval", st);
    if (adapter && (st = pt_lora_load_peft(m, adapter)) != PT_OK) {
        pt_model_free(m);
        return cli_fail("eval", st);
    }
    pt_eval_options eo;
    pt_eval_options_init(&eo);
    eo.max_length = (int)max_length;
    eo.add_special = special;
    pt_eval_result *r = NULL;
    st = pt_model_eval_jsonl(&r, m, pt_model_tokenizer(m), data, &eo);
    if (st) {
        pt_model_free(m);
        return cli_fail("eval", st);
    }
    if (json) {
        printf("{\"loss\": ");
        print_num(r->loss);
        printf(", \"tokens\": %lld, \"rows\": [", (long long)r->tokens);
        for (size_t i = 0; i < r->n_rows; i++) {
            printf("%s{\"loss\": ", i ? ", " : "");
            print_num(r->row_loss[i]);
            printf(", \"tokens\": %lld}", (long long)r->row_tokens[i]);
        }
        printf("]}\n");
    } else {
        for (size_t i = 0; i < r->n_rows; i++) {
            if (r->row_tokens[i])
                printf("row %zu: loss %.6f nats/token over %lld tokens\n", i + 1, r->row_loss[i],
                       (long long)r->row_tokens[i]);
            else
                printf("row %zu: no tokens to predict\n", i + 1);
        }
        printf("overall: loss %.6f nats/token over %lld tokens in %zu rows (perplexity %.4f)\n",
               r->loss, (long long)r->tokens, r->n_rows, exp(r->loss));
    }
    pt_eval_result_free(r);
    pt_model_free(m);
    return 0;
}
