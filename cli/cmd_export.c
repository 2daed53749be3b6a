/* posttrain export --model DIR --out FILE.gguf: a model (or a PEFT adapter
 * of it, or a training checkpoint) as the GGUF file llama.cpp loads. */
#include "cmd_export.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>

typedef export_args cli_args; /* CLI_ARG's */
static const cli_opt k_export_opts[] = {
    { CLI_PATH, "model", CLI_ARG(model), "DIR",
      .help = "Hugging Face model directory (a downloaded model or a run's --out);\n"
              "with --checkpoint: the base model (default: the one it records)" },
    { CLI_PATH, "out", CLI_ARG(out), "FILE.gguf", .required = true,
      .help = "the GGUF file to write (replaced atomically)" },
    { CLI_ENUM, "type", CLI_ARG(gguf.type), "TYPE", .def = "f32", .from_name = pt_gguf_ftype_from_name,
      .enum_name = pt_gguf_ftype_name, .help = "tensor type of the matrices (1-D tensors stay f32)" },
    { CLI_ENUM, "spm-scores", CLI_ARG(gguf.spm_scores), "MODE", .def = "converter",
      .from_name = pt_gguf_spm_scores_from_name, .enum_name = pt_gguf_spm_scores_name,
      .help = "tokenizer.ggml.scores of a SentencePiece-style tokenizer.json:\n"
              "converter: -1000 for every token, as llama.cpp's converter\n"
              "(llama.cpp then tokenizes some texts differently); merges: from\n"
              "the merge ranks (llama.cpp tokenizes as Hugging Face)" },
    { CLI_STRING, "name", CLI_ARG(gguf.name), "NAME",
      .help = "general.name (default: derived as llama.cpp's converters derive it\n"
              "from DIR's name, or for an adapter the PEFT_DIR's)" },
    { CLI_PATH, "adapter", CLI_ARG(adapter), "PEFT_DIR",
      .help = "a PEFT LoRA adapter of the model: written as a GGUF LoRA adapter\n(llama.cpp --lora)" },
    { CLI_FLAG, "merge", CLI_ARG(merge),
      .help = "with --adapter: write the model with the adapter merged instead" },
    { CLI_PATH, "checkpoint", CLI_ARG(checkpoint), "CKPT_DIR",
      .help = "a training checkpoint (OUT/checkpoints/step-N of posttrain sft):\n"
              "its model (LoRA adapters merged)" },
    { CLI_FLAG, "adapter-only", CLI_ARG(adapter_only),
      .help = "with --checkpoint of a LoRA run: write its adapters as a GGUF\nLoRA adapter instead" },
};

static const cli_command k_export = {
    .name = "export",
    .usage = "--model DIR --out FILE.gguf [--type f32|f16|bf16] [--name NAME] [--spm-scores MODE]\n"
             "       [--adapter PEFT_DIR [--merge]]\n"
             "       posttrain export --checkpoint CKPT_DIR [--model BASE_DIR] [--adapter-only] --out FILE.gguf ...",
    .about = "Write a model as the GGUF file llama.cpp's convert_hf_to_gguf.py writes for DIR:\n"
             "the metadata, the tokenizer (DIR must hold tokenizer.json) and the tensors under\n"
             "llama.cpp's names.  With --adapter, write the PEFT adapter as a GGUF LoRA adapter\n"
             "(as convert_lora_to_gguf.py does) for llama.cpp's --lora over DIR's GGUF, or with\n"
             "--merge the model with the adapter merged into its weights.  With --checkpoint,\n"
             "the model of a training checkpoint: its base (recorded by posttrain sft, or\n"
             "--model) with the trained tensors (LoRA merged, or with --adapter-only the\n"
             "adapters as a GGUF LoRA adapter).",
};

/* The size of dir/name (name NULL: dir itself) when it is a regular file, else -1. */
static long long file_size(const char *dir, const char *name)
{
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s%s%s", dir, name ? "/" : "", name ? name : "");
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? (long long)sb.st_size : -1;
}

static int check_args(const export_args *a)
{
    if (!a->model && !a->checkpoint)
        return cli_usage_error("export", "give --model DIR (or --checkpoint CKPT_DIR)");
    if (a->merge && !a->adapter)
        return cli_usage_error("export", "--merge needs --adapter");
    if (a->adapter_only && !a->checkpoint)
        return cli_usage_error("export", "--adapter-only needs --checkpoint (--adapter alone writes "
                               "the adapter)");
    if (a->checkpoint && a->adapter)
        return cli_usage_error("export", "--checkpoint holds its own adapters: give --checkpoint or "
                               "--adapter, not both");
    if (a->model && file_size(a->model, "MANIFEST.json") >= 0 && file_size(a->model, "config.json") < 0)
        return cli_usage_error("export", "--model %s is a training checkpoint: it holds the trained "
                               "tensors and the optimizer state, not a model; export it with "
                               "--checkpoint %s (or give the run's --out directory)", a->model, a->model);
    int rc;
    if ((rc = cli_check_disjoint("export", "--out", a->out, "--model", a->model, true)) ||
        (rc = cli_check_disjoint("export", "--out", a->out, "--adapter", a->adapter, true)))
        return rc;
    return cli_check_disjoint("export", "--out", a->out, "--checkpoint", a->checkpoint, true);
}

static int write_gguf(const export_args *a, pt_model *m)
{
    bool adapter = (a->adapter && !a->merge) || a->adapter_only;
    int st = adapter ? pt_lora_export_gguf(m, a->out, &a->gguf) : pt_model_export_gguf(m, a->out, &a->gguf);
    if (st) {
        const char *dir = pt_model_source_dir(m);
        if (dir)
            cli_explain_tokenizer("export", dir, m);
        return cli_fail("export", st);
    }
    return 0;
}

int cmd_export(int argc, char **argv)
{
    export_args a = { 0 };
    pt_gguf_export_options_init(&a.gguf);
    int rc = cli_parse_table(&k_export, k_export_opts, CLI_COUNT_OF(k_export_opts), &a, argc, argv, NULL);
    if (rc)
        return cli_exit_code(rc);
    if ((rc = check_args(&a)))
        return rc;
    pt_model *m = NULL;
    if (a.checkpoint) {
        if ((rc = export_load_checkpoint(&m, &a)))
            return rc;
    } else if (cli_open_model(&m, "export", a.model, false, PT_QUANTIZE_NONE, a.adapter, "--model", "--adapter")) {
        return 1;
    }
    rc = write_gguf(&a, m);
    pt_model_free(m);
    if (rc)
        return rc;
    int version;
    int64_t n_tensors, n_kv;
    (void)pt_gguf_file_counts(&version, &n_tensors, &n_kv, a.out); /* 0 tensors if it cannot be read */
    fprintf(stderr, "posttrain export: wrote %s (%lld bytes, %lld tensors)\n", a.out, file_size(a.out, NULL),
            (long long)n_tensors);
    return 0;
}
