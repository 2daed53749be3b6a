/* pt_model_config_memory_estimate against a hand computation for
 * stories260K's config (hidden 64, intermediate 172, 5 layers, 8 heads and 4
 * KV heads of 8, 512 positions, vocab 512, tied: 260,032 parameters), and
 * pt_model_dir_info_to_json parsed back. */
#include "testutil.h"

#include <cjson/cJSON.h>

static void stories_config(pt_model_config *c)
{
    pt_model_config_init(c);
    c->arch = PT_ARCH_LLAMA;
    c->vocab_size = 512;
    c->hidden_size = 64;
    c->intermediate_size = 172;
    c->num_hidden_layers = 5;
    c->num_attention_heads = 8;
    c->num_key_value_heads = 4;
    c->head_dim = 8;
    c->max_position_embeddings = 512;
    c->tie_word_embeddings = true;
}

START_TEST(test_stories_defaults)
{
    pt_model_config c;
    stories_config(&c);
    pt_memory_estimate e;
    pt_memory_estimate_init(&e);
    ck_assert_ok(pt_model_config_memory_estimate(&e, &c, NULL));
    /* N = 512*64 + 5 * (2*64*64 + 2*64*32 + 3*64*172 + 2*64) + 64 = 260032 */
    ck_assert_int_eq(e.context, 512);      /* min(512, 2048) */
    ck_assert_int_eq(e.kv_cache_slots, 512);
    ck_assert_int_eq(e.seq, 256);          /* min(512, 256) */
    ck_assert_int_eq(e.batch, 4);
    ck_assert_int_eq(e.lora_rank, 16);
    ck_assert_double_eq(e.weights_bytes, 4.0 * 260032);
    ck_assert_double_eq(e.kv_cache_bytes, 2.0 * 5 * 32 * 512 * 4);   /* 655360 */
    ck_assert_double_eq(e.inference_bytes, 1040128.0 + 655360);
    ck_assert_double_eq(e.full_state_bytes, 16.0 * 260032);
    /* per token: 5 * (4*64 + 2*64 + 2*32 + 3*172 + 8) + 2*64 = 4988 values */
    ck_assert_double_eq(e.activation_bytes, 4.0 * 4 * 256 * 4988);     /* 20430848 */
    ck_assert_double_eq(e.full_finetune_bytes, 4160512.0 + 20430848);
    /* LoRA r 16 a layer: q 16*(64+64), k and v 16*(64+32), o 16*(64+64),
     * gate and up 16*(64+172), down 16*(172+64): 18496 */
    ck_assert_double_eq(e.lora_params, 5.0 * 18496);
    ck_assert_double_eq(e.lora_state_bytes, 16.0 * 92480);
    ck_assert_double_eq(e.lora_activation_bytes, 20430848.0 + 4.0 * 1024 * 5 * 7 * 16);
    ck_assert_double_eq(e.lora_bytes, 1040128.0 + 1479680 + 22724608);
}
END_TEST

START_TEST(test_options_and_window)
{
    pt_model_config c;
    stories_config(&c);
    c.arch = PT_ARCH_MISTRAL; /* the architecture with a sliding window */
    c.tie_word_embeddings = false;
    c.sliding_window = 100;
    pt_memory_estimate_options o;
    pt_memory_estimate_options_init(&o);
    o.context = 300;
    o.batch = 2;
    o.seq = 10;
    o.lora_rank = 1;
    pt_memory_estimate e;
    pt_memory_estimate_init(&e);
    ck_assert_ok(pt_model_config_memory_estimate(&e, &c, &o));
    ck_assert_int_eq(e.context, 300);
    ck_assert_int_eq(e.kv_cache_slots, 100); /* a ring of the window */
    ck_assert_double_eq(e.kv_cache_bytes, 2.0 * 5 * 32 * 100 * 4);
    ck_assert_double_eq(e.activation_bytes, 4.0 * 20 * 4988);
    ck_assert_double_eq(e.lora_params, 5.0 * 18496 / 16);
    ck_assert_double_eq(e.lora_activation_bytes, 4.0 * 20 * 4988 + 4.0 * 20 * 5 * 7);
    o.batch = 0;
    ck_assert_status(pt_model_config_memory_estimate(&e, &c, &o), PT_EINVAL, "batch");
    o.batch = 1;
    o.context = -1;
    ck_assert_status(pt_model_config_memory_estimate(&e, &c, &o), PT_EINVAL, "context");
    o.context = 0;
    c.num_key_value_heads = 3; /* does not divide 8 */
    ck_assert_int_ne(pt_model_config_memory_estimate(&e, &c, &o), PT_OK);
    ck_assert_status(pt_model_config_memory_estimate(NULL, &c, &o), PT_EINVAL, "est");
}
END_TEST

/* Versioned structs: an older caller's options take the defaults for the
 * fields it did not have, and its estimate gets only its own bytes. */
START_TEST(test_older_sizes)
{
    pt_model_config c;
    stories_config(&c);
    pt_memory_estimate_options o;
    pt_memory_estimate_options_init(&o);
    o.lora_rank = 1;
    o.size = offsetof(pt_memory_estimate_options, lora_rank);
    pt_memory_estimate e;
    pt_memory_estimate_init(&e);
    ck_assert_ok(pt_model_config_memory_estimate(&e, &c, &o));
    ck_assert_int_eq(e.lora_rank, 16);
    pt_memory_estimate_init(&e);
    e.size = offsetof(pt_memory_estimate, lora_params);
    e.lora_params = -1;
    ck_assert_ok(pt_model_config_memory_estimate(&e, &c, NULL));
    ck_assert_double_eq(e.full_finetune_bytes, 4160512.0 + 20430848);
    ck_assert_double_eq(e.lora_params, -1); /* not the caller's field */
    o.size = 1;
    ck_assert_status(pt_model_config_memory_estimate(&e, &c, &o), PT_EINVAL, "pt_memory_estimate_options_init");
}
END_TEST

static double num(const cJSON *o, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b)
        x = cJSON_GetObjectItemCaseSensitive(x, b);
    ck_assert_msg(cJSON_IsNumber(x), "%s.%s is not a number", a, b ? b : "");
    return x->valuedouble;
}

START_TEST(test_json)
{
    pt_model_dir_info info;
    pt_model_dir_info_init(&info);
    stories_config(&info.config);
    info.num_params = 260032;
    info.num_files = 1;
    info.num_dtypes = 1;
    snprintf(info.dtypes[0].name, sizeof info.dtypes[0].name, "F32");
    info.dtypes[0].tensors = 48;
    info.weights_status = PT_EFORMAT;
    snprintf(info.weights_problem, sizeof info.weights_problem, "a \"bad\"\nfile");
    pt_memory_estimate e;
    pt_memory_estimate_init(&e);
    ck_assert_ok(pt_model_config_memory_estimate(&e, &info.config, NULL));
    char *json = NULL;
    size_t len = 0;
    ck_assert_ok(pt_model_dir_info_to_json(&json, &len, "d\\ir", &info, &e));
    ck_assert_uint_eq(len, strlen(json));
    ck_assert_int_eq(json[len - 1], '\n');
    cJSON *doc = cJSON_Parse(json);
    ck_assert_ptr_nonnull(doc);
    ck_assert_str_eq(cJSON_GetObjectItem(doc, "dir")->valuestring, "d\\ir");
    ck_assert_str_eq(cJSON_GetObjectItem(doc, "architecture")->valuestring, "LlamaForCausalLM");
    ck_assert_str_eq(cJSON_GetObjectItem(doc, "weights_problem")->valuestring, "a \"bad\"\nfile");
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(doc, "weights_ok")));
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(doc, "tokenizer_problem")));
    ck_assert_double_eq(num(doc, "config", "num_key_value_heads"), 4);
    ck_assert_double_eq(num(cJSON_GetObjectItem(doc, "dtypes"), "F32", "tensors"), 48);
    const cJSON *mem = cJSON_GetObjectItem(doc, "memory");
    ck_assert_double_eq(num(mem, "inference", "kv_cache_bytes"), 655360);
    ck_assert_double_eq(num(mem, "full_finetune", "activation_bytes"), 20430848);
    ck_assert_double_eq(num(mem, "lora", "total_bytes"), 25244416);
    ck_assert_double_eq(num(mem, "lora", "adapter_params"), 92480);
    cJSON_Delete(doc);
    pt_free(json);
    ck_assert_status(pt_model_dir_info_to_json(&json, NULL, NULL, &info, &e), PT_EINVAL, "dir");
    ck_assert_ptr_null(json);
}
END_TEST

/* The text of posttrain info for the same info, by hand: 260,032 FP32
 * parameters are 1,040,128 B = 1015.75 KiB; the memory lines' figures are
 * test_json's (655,360 B = 640 KiB of KV cache, ...) in binary units. */
START_TEST(test_text)
{
    pt_model_dir_info info;
    pt_model_dir_info_init(&info);
    stories_config(&info.config);
    info.num_params = 260032;
    info.num_files = 1;
    info.num_tensors = 48;
    info.weight_bytes = 1040128;
    info.num_dtypes = 1;
    snprintf(info.dtypes[0].name, sizeof info.dtypes[0].name, "F32");
    info.dtypes[0].tensors = 48;
    info.dtypes[0].bytes = 1040128;
    info.has_tokenizer = true;
    info.config.bos_token_id = 1;
    info.config.eos_token_id = 2;
    pt_memory_estimate e;
    pt_memory_estimate_init(&e);
    ck_assert_ok(pt_model_config_memory_estimate(&e, &info.config, NULL));
    char *text = NULL;
    size_t len = 0;
    ck_assert_ok(pt_model_dir_info_to_text(&text, &len, "dir", &info, &e));
    ck_assert_uint_eq(len, strlen(text));
    const char *want[] = {
        "model:        dir\n",
        "architecture: llama (LlamaForCausalLM)\n",
        "sizes:        vocab 512, hidden 64, intermediate 172, layers 5\n",
        "attention:    8 heads, 4 kv heads, head_dim 8\n",
        "embeddings:   tied; bos 1, eos 2\n",
        "parameters:   260032 (0.26 M)\n",
        "on disk:      1 file, 48 tensors, 1015.75 KiB: F32 x 48 (1015.75 KiB)\n",
        "weights:      every tensor the config needs, with its shape\n",
        "files:        tokenizer.json yes, generation_config.json no\n",
        "  inference:         1015.75 KiB weights + 640.00 KiB KV cache (1 sequence of 512 tokens) = 1.62 MiB\n",
        "  full fine-tuning:  3.97 MiB weights+grads+AdamW moments (16 B/param) + 19.48 MiB activations "
        "(batch 4 x 256) = 23.45 MiB\n",
        "  LoRA rank 16:      1015.75 KiB frozen weights + 1.41 MiB for 92480 adapter params (16 B/param) + "
        "21.67 MiB activations (batch 4 x 256) = 24.07 MiB\n",
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        ck_assert_msg(strstr(text, want[k]), "no '%s' in:\n%s", want[k], text);
    ck_assert_ptr_null(strstr(text, "format:")); /* not a GGUF file */
    pt_free(text);
    ck_assert_status(pt_model_dir_info_to_text(&text, NULL, "dir", NULL, &e), PT_EINVAL,
                     "pt_model_dir_info_to_text: info is NULL");
    ck_assert_ptr_null(text);
    ck_assert_status(pt_model_dir_info_to_text(NULL, NULL, "dir", &info, &e), PT_EINVAL, "text is NULL");
}
END_TEST

/* The real directory: its inspection's JSON says what the hand computation does. */
START_TEST(test_stories_dir)
{
    const char *data = pt_test_shared_data("memory: stories260K directory");
    if (!data)
        return;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/models/stories260K", data);
    pt_model_dir_info info;
    pt_model_dir_info_init(&info);
    ck_assert_ok(pt_model_dir_inspect(&info, dir));
    ck_assert_uint_eq(info.num_params, 260032);
    pt_memory_estimate e;
    pt_memory_estimate_init(&e);
    ck_assert_ok(pt_model_config_memory_estimate(&e, &info.config, NULL));
    ck_assert_double_eq(e.lora_bytes, 25244416);
    ck_assert_double_eq(e.inference_bytes, 1695488);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("memory");
    TCase *tc = tcase_create("memory");
    tcase_add_test(tc, test_stories_defaults);
    tcase_add_test(tc, test_options_and_window);
    tcase_add_test(tc, test_older_sizes);
    tcase_add_test(tc, test_json);
    tcase_add_test(tc, test_text);
    tcase_add_test(tc, test_stories_dir);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
