/* config.json parsing and validation: real configs of each architecture, the
 * committed corpus of bad configs (tests/modelio/bad_configs/MANIFEST), and
 * the config.json writer round trip. */
#include "testutil.h"

#include <math.h>

#include "core/core.h"
#include "io/fileio.h"

static pt_model_config parse_ok(const char *json)
{
    pt_model_config c;
    pt_model_config_init(&c);
    ck_assert_ok(pt_model_config_from_json(&c, json, strlen(json)));
    return c;
}

static int parse_status(const char *json)
{
    pt_model_config c;
    pt_model_config_init(&c);
    return pt_model_config_from_json(&c, json, strlen(json));
}

/* SmolLM2-135M's config.json (as published). */
static const char *SMOLLM2 =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, "
    "\"attention_dropout\": 0.0, \"bos_token_id\": 0, \"eos_token_id\": 0, \"hidden_act\": \"silu\", "
    "\"hidden_size\": 576, \"initializer_range\": 0.041666666666666664, \"intermediate_size\": 1536, "
    "\"is_llama_config\": true, \"max_position_embeddings\": 8192, \"model_type\": \"llama\", "
    "\"num_attention_heads\": 9, \"num_hidden_layers\": 30, \"num_key_value_heads\": 3, "
    "\"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05, \"rope_interleaved\": false, "
    "\"rope_scaling\": null, \"rope_theta\": 100000, \"tie_word_embeddings\": true, "
    "\"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.40.1\", \"use_cache\": true, "
    "\"vocab_size\": 49152}";

START_TEST(test_llama_smollm2)
{
    pt_model_config c = parse_ok(SMOLLM2);
    ck_assert_int_eq(c.arch, PT_ARCH_LLAMA);
    ck_assert_int_eq(c.vocab_size, 49152);
    ck_assert_int_eq(c.hidden_size, 576);
    ck_assert_int_eq(c.intermediate_size, 1536);
    ck_assert_int_eq(c.num_hidden_layers, 30);
    ck_assert_int_eq(c.num_attention_heads, 9);
    ck_assert_int_eq(c.num_key_value_heads, 3);
    ck_assert_int_eq(c.head_dim, 64);
    ck_assert_int_eq(c.max_position_embeddings, 8192);
    ck_assert(c.rms_norm_eps == 1e-5);
    ck_assert(c.rope_theta == 100000.0);
    ck_assert(c.initializer_range == 0.041666666666666664);
    ck_assert_int_eq(c.rope_type, PT_ROPE_DEFAULT);
    ck_assert(c.tie_word_embeddings);
    ck_assert(!c.attention_bias && !c.qk_norm);
    ck_assert_int_eq(c.sliding_window, 0);
    ck_assert_int_eq(c.bos_token_id, 0);
    ck_assert_int_eq(c.eos_token_id, 0);
    ck_assert_int_eq(c.pad_token_id, -1);
    uint64_t n;
    ck_assert_ok(pt_model_config_num_params(&n, &c));
    ck_assert_uint_eq(n, 134515008u); /* SmolLM2-135M's published parameter count */
}
END_TEST

/* Llama-3.2-1B: llama3 rope scaling, eos list, untied defaults overridden. */
START_TEST(test_llama3_rope)
{
    pt_model_config c = parse_ok(
        "{\"architectures\": [\"LlamaForCausalLM\"], \"bos_token_id\": 128000, "
        "\"eos_token_id\": [128001, 128008, 128009], \"head_dim\": 64, \"hidden_size\": 2048, "
        "\"intermediate_size\": 8192, \"max_position_embeddings\": 131072, \"mlp_bias\": false, "
        "\"model_type\": \"llama\", \"num_attention_heads\": 32, \"num_hidden_layers\": 16, "
        "\"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 32.0, "
        "\"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, "
        "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}, "
        "\"rope_theta\": 500000.0, \"tie_word_embeddings\": true, \"vocab_size\": 128256}");
    ck_assert_int_eq(c.rope_type, PT_ROPE_LLAMA3);
    ck_assert(c.rope_factor == 32.0);
    ck_assert(c.rope_low_freq_factor == 1.0);
    ck_assert(c.rope_high_freq_factor == 4.0);
    ck_assert_int_eq(c.rope_original_max_position_embeddings, 8192);
    ck_assert(c.rope_theta == 500000.0);
    ck_assert_int_eq(c.bos_token_id, 128000);
    ck_assert_int_eq(c.eos_token_id, 128001);
    uint64_t n;
    ck_assert_ok(pt_model_config_num_params(&n, &c));
    ck_assert_uint_eq(n, 1235814400u); /* Llama-3.2-1B */
}
END_TEST

/* Qwen2.5-0.5B: q/k/v biases implied, sliding window off. */
START_TEST(test_qwen2)
{
    pt_model_config c = parse_ok(
        "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, "
        "\"bos_token_id\": 151643, \"eos_token_id\": 151643, \"hidden_act\": \"silu\", "
        "\"hidden_size\": 896, \"initializer_range\": 0.02, \"intermediate_size\": 4864, "
        "\"max_position_embeddings\": 32768, \"max_window_layers\": 24, \"model_type\": \"qwen2\", "
        "\"num_attention_heads\": 14, \"num_hidden_layers\": 24, \"num_key_value_heads\": 2, "
        "\"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 32768, "
        "\"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"use_cache\": true, "
        "\"use_sliding_window\": false, \"vocab_size\": 151936}");
    ck_assert_int_eq(c.arch, PT_ARCH_QWEN2);
    ck_assert(c.attention_bias);
    ck_assert(!c.qk_norm);
    ck_assert_int_eq(c.head_dim, 64);
    ck_assert_int_eq(c.sliding_window, 0);
    ck_assert(c.rms_norm_eps == 1e-6);
    uint64_t n;
    ck_assert_ok(pt_model_config_num_params(&n, &c));
    ck_assert_uint_eq(n, 494032768u); /* Qwen2.5-0.5B */
}
END_TEST

/* Qwen3-0.6B: head_dim decoupled from hidden/heads, q/k norms. */
START_TEST(test_qwen3)
{
    pt_model_config c = parse_ok(
        "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, "
        "\"bos_token_id\": 151643, \"eos_token_id\": 151645, \"head_dim\": 128, "
        "\"hidden_act\": \"silu\", \"hidden_size\": 1024, \"intermediate_size\": 3072, "
        "\"max_position_embeddings\": 40960, \"max_window_layers\": 28, \"model_type\": \"qwen3\", "
        "\"num_attention_heads\": 16, \"num_hidden_layers\": 28, \"num_key_value_heads\": 8, "
        "\"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 1000000, "
        "\"sliding_window\": null, \"tie_word_embeddings\": true, \"use_sliding_window\": false, "
        "\"vocab_size\": 151936}");
    ck_assert_int_eq(c.arch, PT_ARCH_QWEN3);
    ck_assert(c.qk_norm);
    ck_assert(!c.attention_bias);
    ck_assert_int_eq(c.head_dim, 128);
    ck_assert_int_eq(c.num_attention_heads * c.head_dim, 2048);
    ck_assert_int_eq(c.eos_token_id, 151645);
    uint64_t n;
    ck_assert_ok(pt_model_config_num_params(&n, &c));
    ck_assert_uint_eq(n, 596049920u); /* Qwen3-0.6B */
}
END_TEST

START_TEST(test_mistral_defaults)
{
    /* sliding_window absent: transformers' default 4096; null: none. */
#define MISTRAL_BASE                                                                         \
    "{\"model_type\": \"mistral\", \"architectures\": [\"MistralForCausalLM\"], "                 \
    "\"vocab_size\": 1000, \"hidden_size\": 64, \"intermediate_size\": 128, "                    \
    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2%s}"
    char buf[1024];
    snprintf(buf, sizeof buf, MISTRAL_BASE, "");
    pt_model_config c = parse_ok(buf);
    ck_assert_int_eq(c.arch, PT_ARCH_MISTRAL);
    ck_assert_int_eq(c.sliding_window, 4096);
    ck_assert_int_eq(c.max_position_embeddings, 131072);
    ck_assert_int_eq(c.bos_token_id, 1);
    ck_assert_int_eq(c.eos_token_id, 2);
    ck_assert(!c.tie_word_embeddings);
    snprintf(buf, sizeof buf, MISTRAL_BASE, ", \"sliding_window\": null, \"bos_token_id\": null");
    c = parse_ok(buf);
    ck_assert_int_eq(c.sliding_window, 0);
    ck_assert_int_eq(c.bos_token_id, -1);
    snprintf(buf, sizeof buf, MISTRAL_BASE, ", \"pad_token_id\": -1, \"eos_token_id\": 999");
    c = parse_ok(buf);
    ck_assert_int_eq(c.pad_token_id, -1);
    ck_assert_int_eq(c.eos_token_id, 999);
    snprintf(buf, sizeof buf, MISTRAL_BASE, ", \"pad_token_id\": -2");
    ck_assert_int_eq(parse_status(buf), PT_ECONFIG);
    ck_assert(strstr(pt_last_error(), "'pad_token_id' = -2") != NULL);
    snprintf(buf, sizeof buf, MISTRAL_BASE, ", \"sliding_window\": 256");
    c = parse_ok(buf);
    ck_assert_int_eq(c.sliding_window, 256);
}
END_TEST

START_TEST(test_defaults_and_rope_variants)
{
    /* Minimal llama: num_key_value_heads = heads, head_dim = hidden/heads,
     * HF defaults for eps, theta, positions, bos/eos, untied. */
    pt_model_config c = parse_ok("{\"model_type\": \"llama\", \"vocab_size\": 100, "
                                 "\"hidden_size\": 32, \"intermediate_size\": 64, "
                                 "\"num_hidden_layers\": 1, \"num_attention_heads\": 4}");
    ck_assert_int_eq(c.num_key_value_heads, 4);
    ck_assert_int_eq(c.head_dim, 8);
    ck_assert(c.rms_norm_eps == 1e-6);
    ck_assert(c.rope_theta == 10000.0);
    ck_assert_int_eq(c.max_position_embeddings, 2048);
    ck_assert_int_eq(c.bos_token_id, 1);
    ck_assert_int_eq(c.eos_token_id, 2);
    ck_assert(!c.tie_word_embeddings);
    ck_assert(c.initializer_range == 0.02);
    /* linear scaling under the legacy "type" key */
    c = parse_ok("{\"model_type\": \"llama\", \"vocab_size\": 100, \"hidden_size\": 32, "
                 "\"intermediate_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
                 "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.5}}");
    ck_assert_int_eq(c.rope_type, PT_ROPE_LINEAR);
    ck_assert(c.rope_factor == 2.5);
    /* transformers 5 rope_parameters */
    c = parse_ok("{\"model_type\": \"llama\", \"vocab_size\": 100, \"hidden_size\": 32, "
                 "\"intermediate_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
                 "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 50000.0}}");
    ck_assert_int_eq(c.rope_type, PT_ROPE_DEFAULT);
    ck_assert(c.rope_theta == 50000.0);
    /* rope_type and type disagreeing */
    ck_assert_int_eq(parse_status("{\"model_type\": \"llama\", \"vocab_size\": 100, "
                                  "\"hidden_size\": 32, \"intermediate_size\": 64, "
                                  "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
                                  "\"rope_scaling\": {\"type\": \"linear\", \"rope_type\": "
                                  "\"llama3\", \"factor\": 2}}"),
                     PT_ECONFIG);
    ck_assert(strstr(pt_last_error(), "disagree"));
}
END_TEST

START_TEST(test_failed_parse_leaves_cfg)
{
    pt_model_config c = parse_ok(SMOLLM2);
    pt_model_config before = c;
    ck_assert_int_eq(parse_status("{\"model_type\": \"llama\"}"), PT_ECONFIG);
    ck_assert_int_eq(pt_model_config_from_json(&c, "{\"model_type\": 3}", 17), PT_ECONFIG);
    ck_assert(memcmp(&c, &before, sizeof c) == 0);
    /* an un-initialised struct is refused */
    pt_model_config z;
    memset(&z, 0, sizeof z);
    ck_assert_status(pt_model_config_from_json(&z, SMOLLM2, strlen(SMOLLM2)), PT_EINVAL,
                     "pt_model_config_init");
    /* a NUL inside the buffer: the rest is not JSON whitespace */
    char buf[64] = "{\"a\": 1}";
    buf[8] = '\0';
    buf[9] = 'x';
    ck_assert_status(pt_model_config_from_json(&c, buf, 10), PT_EFORMAT, "after the JSON");
}
END_TEST

START_TEST(test_validate_struct)
{
    pt_model_config c = parse_ok(SMOLLM2);
    ck_assert_ok(pt_model_config_validate(&c));
    pt_model_config b = c;
    b.num_key_value_heads = 4;
    ck_assert_status(pt_model_config_validate(&b), PT_ECONFIG, "num_key_value_heads");
    b = c;
    b.attention_bias = true;
    ck_assert_status(pt_model_config_validate(&b), PT_EUNSUPPORTED, "attention_bias");
    b = c;
    b.arch = PT_ARCH_QWEN2;
    ck_assert_status(pt_model_config_validate(&b), PT_ECONFIG, "required for qwen2");
    b = c;
    b.arch = 9;
    ck_assert_status(pt_model_config_validate(&b), PT_EUNSUPPORTED, "arch 9");
    b = c;
    b.rms_norm_eps = NAN;
    ck_assert_status(pt_model_config_validate(&b), PT_ECONFIG, "rms_norm_eps");
    b = c;
    b.rope_type = PT_ROPE_LLAMA3;
    b.rope_factor = 8;
    b.rope_low_freq_factor = 4;
    b.rope_high_freq_factor = 1;
    b.rope_original_max_position_embeddings = 8192;
    ck_assert_status(pt_model_config_validate(&b), PT_ECONFIG, "high_freq_factor");
    b = c;
    b.pad_token_id = 49152;
    ck_assert_status(pt_model_config_validate(&b), PT_ECONFIG, "pad_token_id");
    b = c;
    b.sliding_window = 128;
    ck_assert_status(pt_model_config_validate(&b), PT_EUNSUPPORTED, "sliding_window");
    b = c;
    b.size = 3; /* smaller than any version of the struct */
    ck_assert_status(pt_model_config_validate(&b), PT_EINVAL, "size");
    ck_assert_int_eq(pt_model_config_validate(NULL), PT_EINVAL);
}
END_TEST

/* Every file of the committed corpus gives its status and message. */
/* SMOLLM2 with the text `from` replaced by `to`, parsed: the status. */
static int parse_replaced(const char *from, const char *to)
{
    const char *at = strstr(SMOLLM2, from);
    ck_assert_ptr_nonnull(at);
    char buf[2048];
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - SMOLLM2), SMOLLM2, to, at + strlen(from));
    return parse_status(buf);
}

/* Absurd sizes are PT_ECONFIG naming the field, before anything is
 * allocated (never PT_ENOMEM). */
START_TEST(test_absurd_sizes)
{
    ck_assert_status(parse_replaced("\"hidden_size\": 576", "\"hidden_size\": 1073741824"),
                     PT_ECONFIG, "'hidden_size'");
    ck_assert_status(parse_replaced("\"vocab_size\": 49152", "\"vocab_size\": 2147483647"),
                     PT_ECONFIG, "'vocab_size'");
    ck_assert_status(parse_replaced("\"num_hidden_layers\": 30", "\"num_hidden_layers\": 1e6"),
                     PT_ECONFIG, "'num_hidden_layers'");
    ck_assert_status(parse_replaced("\"intermediate_size\": 1536", "\"intermediate_size\": 1e9"),
                     PT_ECONFIG, "'intermediate_size'");

    /* each field within its own bound, the product far beyond 2^36 */
    pt_model_config c;
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, 4 * 1024 * 1024);
    c.hidden_size = 65536;
    c.intermediate_size = 1024 * 1024;
    c.num_hidden_layers = 1024;
    c.num_attention_heads = 64;
    c.num_key_value_heads = 64;
    c.head_dim = 1024;
    ck_assert_status(pt_model_config_validate(&c), PT_ECONFIG, "parameter count");
    ck_assert_status(pt_model_config_validate(&c), PT_ECONFIG, "'num_hidden_layers' 1024");
    pt_model *m = (pt_model *)1;
    ck_assert_status(pt_model_create(&m, &c, 1), PT_ECONFIG, "exceeds the limit of 2^36");
    ck_assert_ptr_null(m);
    /* just over the bound: the tied embedding alone is 2^20 x 2^16 = 2^36, plus the layers */
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, 1024 * 1024);
    c.hidden_size = 65536;
    c.tie_word_embeddings = true;
    ck_assert_status(pt_model_config_validate(&c), PT_ECONFIG, "'vocab_size' 1048576");
    /* and a config just under it (a 1.4e9-parameter shape) still validates */
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, 151936);
    c.hidden_size = 2048;
    c.intermediate_size = 8960;
    c.num_hidden_layers = 28;
    c.num_attention_heads = 16;
    c.num_key_value_heads = 2;
    c.head_dim = 128;
    ck_assert_ok(pt_model_config_validate(&c));
}
END_TEST

/* A list of token ids (several end-of-sequence ids): every entry is checked
 * against vocab_size, not only the first the config keeps. */
START_TEST(test_token_id_lists_in_range)
{
    ck_assert_status(parse_replaced("\"eos_token_id\": 0", "\"eos_token_id\": [2, 70000]"), PT_ECONFIG,
                     "'eos_token_id'[1] = 70000 is out of range [0, 49151] (the vocab_size is 49152)");
    ck_assert_status(parse_replaced("\"eos_token_id\": 0", "\"eos_token_id\": [0, 5, 49152]"), PT_ECONFIG,
                     "'eos_token_id'[2] = 49152 is out of range [0, 49151]");
    ck_assert_status(parse_replaced("\"eos_token_id\": 0", "\"eos_token_id\": [49152]"), PT_ECONFIG,
                     "'eos_token_id'[0] = 49152 is out of range");
    ck_assert_status(parse_replaced("\"bos_token_id\": 0", "\"bos_token_id\": [1, 99999]"), PT_ECONFIG,
                     "'bos_token_id'[1] = 99999 is out of range");
    ck_assert_status(parse_replaced("\"eos_token_id\": 0", "\"eos_token_id\": 99999"), PT_ECONFIG,
                     "'eos_token_id' = 99999 is out of range [-1, 49151]");
    /* the last id of the vocabulary is fine, and the first entry is the one kept */
    const char *at = strstr(SMOLLM2, "\"eos_token_id\": 0");
    char buf[2048];
    snprintf(buf, sizeof buf, "%.*s\"eos_token_id\": [7, 49151]%s", (int)(at - SMOLLM2), SMOLLM2,
             at + strlen("\"eos_token_id\": 0"));
    pt_model_config c = parse_ok(buf);
    ck_assert_int_eq(c.eos_token_id, 7);
}
END_TEST

START_TEST(test_bad_config_corpus)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/modelio/bad_configs/MANIFEST", PT_TEST_SRCDIR);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        line[strcspn(line, "\n")] = '\0';
        char *file = strtok(line, "\t"), *status = strtok(NULL, "\t"), *frag = strtok(NULL, "");
        ck_assert_msg(file && status && frag, "bad MANIFEST line %d", n + 1);
        snprintf(path, sizeof path, "%s/modelio/bad_configs/%s", PT_TEST_SRCDIR, file);
        char *text = NULL;
        size_t len = 0;
        ck_assert_ok(pt__read_file(&text, &len, path, 1 << 20));
        pt_model_config c;
        pt_model_config_init(&c);
        int st = pt_model_config_from_json(&c, text, len);
        ck_assert_msg(strcmp(pt_status_name(st), status) == 0, "%s: got %s (%s), expected %s",
                      file, pt_status_name(st), pt_last_error(), status);
        ck_assert_msg(strstr(pt_last_error(), frag) != NULL, "%s: message '%s' lacks '%s'", file,
                      pt_last_error(), frag);
        /* the same through the file loader, whose message names the path */
        pt_model_config_init(&c);
        st = pt_model_config_load(&c, path);
        ck_assert_msg(strcmp(pt_status_name(st), status) == 0, "%s via load: %s", file,
                      pt_status_name(st));
        ck_assert_msg(strstr(pt_last_error(), file) != NULL, "%s: path not named: %s", file,
                      pt_last_error());
        pt_free(text);
        n++;
    }
    fclose(f);
    ck_assert_int_ge(n, 15);
}
END_TEST

/* config.json written by the library parses back to the same struct. */
START_TEST(test_config_json_round_trip)
{
    const char *inputs[] = {
        SMOLLM2,
        "{\"model_type\": \"qwen2\", \"vocab_size\": 300, \"hidden_size\": 48, "
        "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 6, "
        "\"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-6, \"rope_theta\": 1000000.0, "
        "\"eos_token_id\": 5, \"pad_token_id\": 7, \"initializer_range\": 0.1}",
        "{\"model_type\": \"qwen3\", \"vocab_size\": 300, \"hidden_size\": 48, \"head_dim\": 16, "
        "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 2, \"tie_word_embeddings\": true}",
        "{\"model_type\": \"mistral\", \"vocab_size\": 300, \"hidden_size\": 48, "
        "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 2, \"sliding_window\": 64}",
        "{\"model_type\": \"mistral\", \"vocab_size\": 300, \"hidden_size\": 48, "
        "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
        "\"sliding_window\": null}",
        "{\"model_type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 48, "
        "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
        "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
        "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}, "
        "\"rms_norm_eps\": 3.3e-7}",
        "{\"model_type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 48, "
        "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
        "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}, \"bos_token_id\": null}",
    };
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
        pt_model_config a = parse_ok(inputs[i]);
        char *json = NULL;
        ck_assert_ok(pt_model_config_to_json(&json, &a));
        pt_model_config b = parse_ok(json);
        ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "config %zu differs after a round trip:\n%s",
                      i, json);
        ck_assert(strstr(json, "\"torch_dtype\": \"float32\""));
        /* mistral's window is written as read: 64, and null (none) as null */
        if (i == 3)
            ck_assert(strstr(json, "\"sliding_window\": 64,"));
        if (i == 4)
            ck_assert(strstr(json, "\"sliding_window\": null,"));
        pt_free(json);
    }
}
END_TEST

/* Every truncation and every single-bit flip of a real config: no crash, a
 * clean status, the struct untouched on failure, and an accepted config
 * always valid. */
START_TEST(test_truncation_and_bitflip_sweep)
{
    size_t n = strlen(SMOLLM2);
    char *buf = malloc(n);
    int ok = 0, failed = 0;
    for (size_t cut = 0; cut <= n; cut++) {
        memcpy(buf, SMOLLM2, n);
        pt_model_config c;
        pt_model_config_init(&c);
        pt_model_config before = c;
        int st = pt_model_config_from_json(&c, buf, cut);
        if (cut == n) {
            ck_assert_int_eq(st, PT_OK);
        } else {
            ck_assert_msg(st == PT_EFORMAT || st == PT_ECONFIG, "cut %zu: %s", cut,
                          pt_status_name(st));
            ck_assert(memcmp(&c, &before, sizeof c) == 0);
        }
    }
    for (size_t i = 0; i < n; i++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(buf, SMOLLM2, n);
            buf[i] ^= (char)(1 << bit);
            pt_model_config c;
            pt_model_config_init(&c);
            pt_model_config before = c;
            int st = pt_model_config_from_json(&c, buf, n);
            if (st == PT_OK) {
                ck_assert_ok(pt_model_config_validate(&c));
                ok++;
            } else {
                ck_assert_msg(st == PT_EFORMAT || st == PT_ECONFIG || st == PT_EUNSUPPORTED,
                              "flip %zu.%d: %s", i, bit, pt_status_name(st));
                ck_assert(pt_last_error()[0] != '\0');
                ck_assert(memcmp(&c, &before, sizeof c) == 0);
                failed++;
            }
        }
    }
    ck_assert_int_gt(ok, 0);     /* e.g. flips inside ignored fields */
    ck_assert_int_gt(failed, 0);
    free(buf);
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_add_test(tc, test_llama_smollm2);
    tcase_add_test(tc, test_llama3_rope);
    tcase_add_test(tc, test_qwen2);
    tcase_add_test(tc, test_qwen3);
    tcase_add_test(tc, test_mistral_defaults);
    tcase_add_test(tc, test_defaults_and_rope_variants);
    tcase_add_test(tc, test_failed_parse_leaves_cfg);
    tcase_add_test(tc, test_validate_struct);
    tcase_add_test(tc, test_absurd_sizes);
    tcase_add_test(tc, test_token_id_lists_in_range);
    tcase_add_test(tc, test_bad_config_corpus);
    tcase_add_test(tc, test_config_json_round_trip);
    tcase_add_test(tc, test_truncation_and_bitflip_sweep);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return pt_test_run(config_suite());
}
