/* posttrain info DIR: what a Hugging Face model directory holds and the
 * memory it needs for inference, full fine-tuning and LoRA. */
#include "cli.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct info_args {
    bool json, lenient;
    pt_memory_estimate_options mo;
} cli_args; /* CLI_ARG's */

static const cli_opt k_info_opts[] = {
    { CLI_FLAG, "json", CLI_ARG(json), .help = "print one JSON object instead of text" },
    { CLI_FLAG, "lenient", CLI_ARG(lenient),
      .help = "describe a directory whose weights will not load too (it still\nexits 1 and says it is broken)" },
    { CLI_INT64, "context", CLI_ARG(mo.context), "T", .lo = 1, .hi = 1 << 24,
      .help = "inference length for the KV-cache estimate (default: min(max\npositions, 2048))" },
    { CLI_INT64, "batch", CLI_ARG(mo.batch), "B", .def = "4", .lo = 1, .hi = 1 << 24,
      .help = "training batch for the activation estimate" },
    { CLI_INT64, "seq", CLI_ARG(mo.seq), "T", .lo = 1, .hi = 1 << 24,
      .help = "training sequence length (default: min(max positions, 256))" },
    { CLI_INT64, "lora-rank", CLI_ARG(mo.lora_rank), "R", .def = "16", .lo = 1, .hi = 1 << 24,
      .help = "LoRA rank on all seven projections" },
};

static const cli_command k_info = {
    .name = "info",
    .usage = "[options] DIR|FILE.gguf",
    .about = "Describe a Hugging Face model directory (config.json + safetensors) or a GGUF file:\n"
             "architecture, sizes, parameter count, dtypes on disk (GGUF: tensor types, quantised\n"
             "or not; no tensor data is read), and estimated memory for inference, full\n"
             "fine-tuning (AdamW, FP32) and LoRA.  The weights are checked as loading checks\n"
             "them (every shard present; tensor names, shapes and dtypes against config.json):\n"
             "a directory that will not load is an error (exit 1) before anything is printed.",
    .max_args = 1,
};

int cmd_info(int argc, char **argv)
{
    cli_args a = { 0 };
    pt_memory_estimate_options_init(&a.mo);
    cli_rest rest;
    int rc = cli_parse_table(&k_info, k_info_opts, CLI_COUNT_OF(k_info_opts), &a, argc, argv, &rest);
    if (rc)
        return cli_exit_code(rc);
    if (rest.n == 0)
        return cli_usage_error("info", "needs a model directory");
    const char *dir = rest.args[0];
    pt_model_dir_info info;
    pt_model_dir_info_init(&info);
    int st = pt_model_dir_inspect(&info, dir);
    if (st)
        return cli_fail("info", st);
    /* the same checks as loading, before anything is reported: the weights,
     * then the tokenizer (one this build cannot run is left out, not fatal) */
    int why = info.weights_status;
    const char *problem = info.weights_problem;
    if (why == PT_OK && info.tokenizer_status != PT_OK && info.tokenizer_status != PT_EUNSUPPORTED) {
        why = info.tokenizer_status;
        problem = info.tokenizer_problem;
    }
    const bool broken = why != PT_OK;
    if (broken && !a.lenient) {
        fprintf(stderr, "posttrain info: %s is broken and will not load: %s: %s (--lenient describes it anyway)\n",
                dir, pt_status_name(why), problem);
        return 1;
    }
    pt_memory_estimate e;
    pt_memory_estimate_init(&e);
    char *text = NULL;
    if ((st = pt_model_config_memory_estimate(&e, &info.config, &a.mo)) ||
        (st = (a.json ? pt_model_dir_info_to_json : pt_model_dir_info_to_text)(&text, NULL, dir, &info, &e)))
        return cli_fail("info", st);
    fputs(text, stdout);
    pt_free(text);
    if (broken) {
        fflush(stdout);
        fprintf(stderr, "posttrain info: %s is broken and will not load: %s: %s\n", dir, pt_status_name(why),
                problem);
        return 1;
    }
    return 0;
}
