/* pt_model_load_dir: a Hugging Face model directory into a pt_model
 * (config.json, the weights checked against the schema and converted to
 * F32, and the tokenizer). */
#include "core/core.h"
#include "io/fileio.h"
#include "model/model.h"
#include "modelio/gguf_import.h"
#include "modelio/modelio_internal.h"
#include "posttrain/modelio.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int pt_model_load_options_init(pt_model_load_options *o)
{
    PT_CHECK_NULL(o);
    *o = (pt_model_load_options){ .size = sizeof *o, .load_tokenizer = true,
                                  .quantize = PT_QUANTIZE_NONE };
    return PT_OK;
}

static const pt_enum_entry k_quantize_names[] = {
    { PT_QUANTIZE_NONE, "none" },
    { PT_QUANTIZE_Q8_0, "q8_0" },
    { PT_QUANTIZE_Q4_0, "q4_0" },
};
PT_ENUM_NAME_FUNCS(pt_quantize, k_quantize_names, "quantization type")

/* The loaded model quantized as the options ask; freed on failure. */
static int quantize_loaded(pt_model **out, const pt_model_load_options *o, const char *dir)
{
    if (o->quantize == PT_QUANTIZE_NONE || !*out)
        return PT_OK;
    int st = pt__model_quantize(*out, o->quantize);
    if (st) {
        pt_model_free(*out);
        *out = NULL;
        return pt__err_prefix(st, "pt_model_load_dir: %s", dir);
    }
    return PT_OK;
}

/* A tied checkpoint that still carries lm_head.weight: accepted only when
 * it is the embedding matrix again, so nothing is silently dropped. */
static int check_tied_head(const pt_model *m, const pt_weight_entry *head, const char *dir)
{
    const pt_tensor_ref *embed = pt__model_find_tensor(m, "model.embed_tokens.weight");
    float *tmp = pt__malloc_array(embed->numel, sizeof(float));
    if (!tmp)
        return PT_ENOMEM;
    int st = pt__st_read_f32(head->t, tmp, embed->numel);
    if (st == PT_OK && (st = pt__err_nonfinite(tmp, embed->numel)))
        pt__err_prefix(st, "%s: tensor 'lm_head.weight'", dir);
    if (st == PT_OK && memcmp(tmp, embed->data, embed->numel * sizeof(float)) != 0)
        st = pt__err(PT_EFORMAT,
                    "%s: 'lm_head.weight' differs from 'model.embed_tokens.weight' but "
                    "tie_word_embeddings is true",
                    dir);
    pt_free(tmp);
    return st;
}

/* Fill the model's tensors from w (checked first), converting to F32. */
static int fill_model(pt_model *m, const pt_weight_files *w, const char *dir)
{
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    pt_model_get_config(&cfg, m);
    const pt_weight_entry *head = NULL;
    int st = pt__weights_check(w, &cfg, dir, &head);
    if (st)
        return st;
    size_t nt = pt__model_base_tensor_count(m);
    for (size_t i = 0; i < nt; i++) {
        const pt_tensor_ref *r = pt__model_tensor(m, i);
        if ((st = pt_check_abort()))
            return st;
        st = pt__st_read_f32(pt__weight_files_find(w, r->name)->t, r->data, r->numel);
        if (!st)
            st = pt__err_nonfinite(r->data, r->numel);
        if (st)
            return pt__err_prefix(st, "%s: tensor '%s'", dir, r->name);
        /* streamed into BF16 (the embedding after a tied head's check) */
        if (!head || strcmp(r->name, "model.embed_tokens.weight") != 0)
            pt__model_bf16_stream_tensor(m, i);
    }
    st = head ? check_tied_head(m, head, dir) : PT_OK;
    for (size_t i = 0; i < nt && st == PT_OK; i++)
        if (strcmp(pt__model_tensor(m, i)->name, "model.embed_tokens.weight") == 0)
            pt__model_bf16_stream_tensor(m, i);
    return st;
}

/* What is named tokenizer.json in dir, when it is not a regular file. */
static int check_entry(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return PT_OK; /* absent: the model has no tokenizer */
    if (stat(path, &sb) != 0)
        return pt__err(PT_ENOTFOUND, "%s is a symbolic link to %s", path,
                      errno == ENOENT ? "a missing file" : strerror(errno));
    if (S_ISREG(sb.st_mode))
        return PT_OK;
    return pt__err(PT_EFORMAT, "%s is %s, not a file", path,
                  S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO" :
                  S_ISSOCK(sb.st_mode) ? "a socket" : "a device");
}

int pt__modelio_dir_tokenizer(pt_tokenizer **out, const char *dir, int32_t model_vocab)
{
    *out = NULL;
    char *path = pt__path_join(dir, "tokenizer.json");
    if (!path)
        return PT_ENOMEM;
    int st = check_entry(path);
    if (st == PT_OK && pt__is_file(path) && (st = pt_tokenizer_load(out, dir)) == PT_OK &&
        (st = pt__modelio_check_tokenizer(*out, model_vocab, path))) {
        pt_tokenizer_free(*out);
        *out = NULL;
    }
    if (st && !strstr(pt_last_error(), path))
        pt__err_prefix(st, "%s", path);
    pt_free(path);
    return st;
}

/* The tokenizer of dir when asked for and present: a malformed one is an
 * error, one this build cannot run is a warning (the weights are still
 * usable, ids in, ids out) and *out stays NULL. */
static int load_tokenizer(pt_tokenizer **out, const char *dir, bool wanted, int32_t model_vocab)
{
    *out = NULL;
    if (!wanted)
        return PT_OK;
    int st = pt__modelio_dir_tokenizer(out, dir, model_vocab);
    if (st == PT_EUNSUPPORTED) {
        pt__log(PT_LOG_WARN, "%s; the model is loaded without a tokenizer", pt_last_error());
        pt_clear_error();
        *out = NULL;
        return PT_OK;
    }
    return st;
}

int pt_model_load_dir(pt_model **out, const char *dir, const pt_model_load_options *opts)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(dir);
    pt_model_load_options o;
    PT_CHECK_STRUCT_READ(o, opts, pt_model_load_options_init);
    PT_CHECK_ARG(o.bf16 >= PT_BF16_OFF && o.bf16 <= PT_BF16_FROZEN, o.bf16,
                 "%d is not a pt_bf16_mode (0 off, 1 on, 2 frozen)", o.bf16);
    if (!pt_quantize_name(o.quantize))
        return pt__err_arg(__func__, "opts->quantize", "%d is not a pt_quantize (none 0, q4_0 2, "
                          "q8_0 8)", o.quantize);
    PT_CHECK_ARG(o.quantize == PT_QUANTIZE_NONE || o.bf16 == PT_BF16_OFF, opts->quantize,
                 "and opts->bf16 exclude each other (a quantized base is not also BF16)");
    int st;
    if (pt__gguf_is_file(dir)) {
        st = pt__gguf_load_model(out, dir, &o);
        if (st == PT_OK && o.bf16 != PT_BF16_OFF && (st = pt_model_set_bf16(*out, o.bf16))) {
            pt_model_free(*out);
            *out = NULL;
        }
        if (st == PT_OK)
            return quantize_loaded(out, &o, dir);
        return st == PT_ENONFINITE ? pt__err_prefix(st, "pt_model_load_dir") : st;
    }
    if (!pt__is_dir(dir))
        return pt__err(PT_ENOTFOUND, pt__is_file(dir) ? "%s: not a directory (and not a GGUF file: no "
                                                      "GGUF magic)"
                                                    : "%s: not a directory", dir);
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    if ((st = pt_model_config_load(&cfg, dir)))
        return st;
    pt_weight_files w;
    if ((st = pt__weight_files_open(&w, dir)) != PT_OK)
        return st;
    pt_model *m = NULL;
    if ((st = pt__model_create_uninit(&m, &cfg)) != PT_OK)
        st = pt__err_prefix(st, "%s", dir);
    else if (o.bf16 == PT_BF16_FROZEN && (st = pt__model_bf16_stream_begin(m)) != PT_OK)
        st = pt__err_prefix(st, "%s", dir);
    else
        st = fill_model(m, &w, dir);
    if (st == PT_OK && o.bf16 == PT_BF16_ON)
        st = pt_model_set_bf16(m, PT_BF16_ON);
    pt__weight_files_close(&w);
    pt_tokenizer *tok = NULL;
    if (st == PT_OK)
        st = load_tokenizer(&tok, dir, o.load_tokenizer, cfg.vocab_size);
    char *d = NULL;
    if (st == PT_OK && !(d = pt__strdup(dir))) {
        pt_tokenizer_free(tok);
        st = PT_ENOMEM;
    }
    if (st == PT_OK)
        st = pt__modelio_set_record(m, d, tok);
    if (st) {
        pt_model_free(m);
        /* a model with a non-finite weight is not loaded: say which call */
        return st == PT_ENONFINITE ? pt__err_prefix(st, "pt_model_load_dir") : st;
    }
    *out = m;
    return quantize_loaded(out, &o, dir);
}
