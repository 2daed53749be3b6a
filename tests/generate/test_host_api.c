/* What the CLI's commands needed around the library, now in it for every
 * host: generate's pt_model_stop_ids and pt_ids_parse, tokenize's
 * pt_json_quote, version's pt_dist_mpi_info, main's pt_dist_launcher_rank,
 * export's pt_checkpoint_host_model and pt_gguf_file_counts, info's pt_arch_class_name and eval's
 * pt_eval_result_to_json and _to_text. */
#include "testutil.h"
#include "testfs.h"

#include <math.h>

#ifdef PT_HAVE_MPI
#include <mpi.h>
#endif

/* A tiny llama with vocabulary 512 and eos_token_id eos; with the
 * stories260K tokenizer (its "</s>" is id 2) when tok_dir is not NULL, by a
 * save and load through a temporary directory. */
static pt_model *model_with_eos(int eos, const char *tok_dir)
{
    pt_model_config c;
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, 512);
    c.eos_token_id = eos;
    pt_model *m = NULL;
    ck_assert_ok(pt_model_create(&m, &c, 1));
    if (!tok_dir)
        return m;
    char *dir = pt_test_tmpdir("pt_host_api_");
    pt_model_save_options so;
    ck_assert_ok(pt_model_save_options_init(&so));
    so.tokenizer_dir = tok_dir;
    ck_assert_ok(pt_model_save_dir(m, dir, &so));
    pt_model_free(m);
    m = NULL;
    ck_assert_ok(pt_model_load_dir(&m, dir, NULL));
    ck_assert_ptr_nonnull(pt_model_tokenizer(m));
    ck_assert_int_eq(pt_tokenizer_eos_id(pt_model_tokenizer(m)), 2);
    pt_test_rm_rf(dir);
    free(dir);
    return m;
}

/* pt_model_stop_ids of a model with eos_token_id eos: want[0 .. n_want). */
static void check_stop_ids(int eos, const char *tok_dir, const int32_t *want, int n_want)
{
    pt_model *m = model_with_eos(eos, tok_dir);
    int32_t ids[2] = { -7, -7 };
    int n = -1;
    ck_assert_ok(pt_model_stop_ids(ids, &n, m));
    ck_assert_int_eq(n, n_want);
    for (int i = 0; i < n_want; i++)
        ck_assert_int_eq(ids[i], want[i]);
    pt_model_free(m);
}

START_TEST(test_stop_ids)
{
    /* no tokenizer: the config's eos alone, or nothing */
    check_stop_ids(7, NULL, (const int32_t[]){ 7 }, 1);
    check_stop_ids(-1, NULL, NULL, 0);
    const char *shared = pt_test_shared_data("host_api stop ids with a tokenizer");
    if (shared) {
        char tok[4200];
        snprintf(tok, sizeof tok, "%s/models/stories260K", shared);
        /* the config's eos first, then the tokenizer's "</s>" (id 2) */
        check_stop_ids(7, tok, (const int32_t[]){ 7, 2 }, 2);
        /* the same id once */
        check_stop_ids(2, tok, (const int32_t[]){ 2 }, 1);
        /* no config eos: the tokenizer's */
        check_stop_ids(-1, tok, (const int32_t[]){ 2 }, 1);
    }
    int32_t ids[2];
    int n = 5;
    ck_assert_status(pt_model_stop_ids(ids, &n, NULL), PT_EINVAL, "pt_model_stop_ids");
    ck_assert_int_eq(n, 0);
    ck_assert_status(pt_model_stop_ids(NULL, &n, NULL), PT_EINVAL, NULL);
    ck_assert_status(pt_model_stop_ids(ids, NULL, NULL), PT_EINVAL, NULL);
}
END_TEST

/* pt_ids_parse(s) must give want[0 .. n_want). */
static void check_ids(const char *s, const int32_t *want, size_t n_want)
{
    int32_t *ids = NULL;
    size_t n = 0;
    ck_assert_ok(pt_ids_parse(&ids, &n, s));
    ck_assert_uint_eq(n, n_want);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(ids[i], want[i]);
    pt_free(ids);
}

START_TEST(test_ids_parse)
{
    check_ids("1,2 3\t-4\n2147483647", (const int32_t[]){ 1, 2, 3, -4, INT32_MAX }, 5);
    check_ids(",, 7 ,", (const int32_t[]){ 7 }, 1);
    check_ids("-2147483648", (const int32_t[]){ INT32_MIN }, 1);
    check_ids("+5,007", (const int32_t[]){ 5, 7 }, 2);
    static const char *const bad[] = { "", " , \t\n", "1,x", "2147483648", "-2147483649", "1;2",
                                       "1.5", "3-4", "99999999999999999999" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t *ids = (int32_t *)&ids;
        size_t n = 9;
        ck_assert_status(pt_ids_parse(&ids, &n, bad[i]), PT_EINVAL, "pt_ids_parse");
        ck_assert_ptr_null(ids);
        ck_assert_uint_eq(n, 0);
    }
    int32_t *ids;
    size_t n;
    ck_assert_status(pt_ids_parse(&ids, &n, NULL), PT_EINVAL, NULL);
    ck_assert_status(pt_ids_parse(NULL, &n, "1"), PT_EINVAL, NULL);
    ck_assert_status(pt_ids_parse(&ids, NULL, "1"), PT_EINVAL, NULL);
}
END_TEST

/* pt_json_quote(s[0..n), flags) must be want. */
static void check_quote(const char *s, size_t n, unsigned flags, const char *want)
{
    char *out = NULL;
    size_t len = 0;
    ck_assert_ok(pt_json_quote(&out, &len, s, n, flags));
    ck_assert_str_eq(out, want);
    ck_assert_uint_eq(len, strlen(want));
    pt_free(out);
}

START_TEST(test_json_quote)
{
    /* by hand, and as Python's json.dumps(s, ensure_ascii=False) writes it
     * for PT_JSON_SHORT_ESCAPES */
    const char in[] = "a\"b\\\n\t\x01\x7f\xc3\xa9";
    check_quote(in, sizeof in - 1, 0, "\"a\\\"b\\\\\\u000a\\u0009\\u0001\x7f\xc3\xa9\"");
    check_quote(in, sizeof in - 1, PT_JSON_SHORT_ESCAPES, "\"a\\\"b\\\\\\n\\t\\u0001\x7f\xc3\xa9\"");
    check_quote(in, sizeof in - 1, PT_JSON_SHORT_ESCAPES | PT_JSON_ESCAPE_DEL,
                "\"a\\\"b\\\\\\n\\t\\u0001\\u007f\xc3\xa9\"");
    check_quote("x\0y", 3, 0, "\"x\\u0000y\"");
    check_quote(NULL, 0, 0, "\"\"");
    char *out = (char *)&out;
    ck_assert_ok(pt_json_quote(&out, NULL, "\b\f\r", 3, PT_JSON_SHORT_ESCAPES));
    ck_assert_str_eq(out, "\"\\b\\f\\r\"");
    pt_free(out);
    size_t len = 3;
    ck_assert_status(pt_json_quote(&out, &len, NULL, 1, 0), PT_EINVAL, "pt_json_quote");
    ck_assert_ptr_null(out);
    ck_assert_uint_eq(len, 0);
    ck_assert_status(pt_json_quote(&out, &len, "a", 1, 4u), PT_EINVAL, "unknown");
    ck_assert_status(pt_json_quote(NULL, &len, "a", 1, 0), PT_EINVAL, NULL);
}
END_TEST

START_TEST(test_mpi_info)
{
    const char *v = pt_dist_mpi_info();
#ifdef PT_HAVE_MPI
    /* the MPI library's own string, first line, trailing ", " cut */
    char ref[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    ck_assert_int_eq(MPI_Get_library_version(ref, &len), MPI_SUCCESS);
    ref[strcspn(ref, "\r\n")] = '\0';
    ck_assert_ptr_nonnull(v);
    ck_assert(pt_dist_has_mpi());
    size_t n = strlen(v);
    ck_assert_uint_gt(n, 0);
    ck_assert_int_eq(strncmp(v, ref, n), 0);
    ck_assert_str_eq(ref + n + strspn(ref + n, ", "), "");
    ck_assert(v[n - 1] != ',' && v[n - 1] != ' ');
#else
    ck_assert_ptr_null(v);
    ck_assert(!pt_dist_has_mpi());
    fprintf(stderr, "host_api: built without MPI: only the NULL of pt_dist_mpi_info checked\n");
#endif
}
END_TEST

START_TEST(test_launcher_rank)
{
    static const char *const keys[] = { "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK" };
    char *saved[3];
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(keys[i]);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(keys[i]);
    }
    ck_assert_int_eq(pt_dist_launcher_rank(), 0);
    setenv("PMI_RANK", "5", 1);
    ck_assert_int_eq(pt_dist_launcher_rank(), 5);
    setenv("PMIX_RANK", "4", 1);
    ck_assert_int_eq(pt_dist_launcher_rank(), 4);
    setenv("OMPI_COMM_WORLD_RANK", "2", 1); /* Open MPI's first */
    ck_assert_int_eq(pt_dist_launcher_rank(), 2);
    for (int i = 0; i < 3; i++) {
        if (saved[i])
            setenv(keys[i], saved[i], 1);
        else
            unsetenv(keys[i]);
        free(saved[i]);
    }
}
END_TEST

START_TEST(test_checkpoint_host_model)
{
    char *model = (char *)&model;
    bool lora_run = true;
    pt_lora_options lo;
    /* as posttrain sft writes it for a LoRA run: PT_LORA_Q | PT_LORA_V is 5 */
    ck_assert_ok(pt_checkpoint_host_model(&model, &lo, &lora_run, "{\"step\": 3, \"model\": \"/m/base\", "
                                          "\"lora\": {\"rank\": 8, \"alpha\": 16.5, \"targets\": 5}}"));
    ck_assert_str_eq(model, "/m/base");
    ck_assert(lora_run);
    ck_assert_uint_eq(lo.size, sizeof lo);
    ck_assert_int_eq(lo.rank, 8);
    ck_assert_double_eq(lo.alpha, 16.5);
    ck_assert_uint_eq(lo.targets, PT_LORA_Q | PT_LORA_V);
    pt_free(model);
    /* a full fine-tune; a checkpoint of a host that records neither */
    ck_assert_ok(pt_checkpoint_host_model(&model, &lo, &lora_run, "{\"model\": \"d\"}"));
    ck_assert_str_eq(model, "d");
    ck_assert(!lora_run);
    pt_free(model);
    static const char *const nothing[] = { "{}", "{\"model\": 3}", "[1]", "\"x\"" };
    for (size_t i = 0; i < sizeof nothing / sizeof nothing[0]; i++) {
        ck_assert_ok(pt_checkpoint_host_model(&model, &lo, &lora_run, nothing[i]));
        ck_assert_ptr_null(model);
        ck_assert(!lora_run);
    }
    static const char *const bad[] = { "{\"lora\": {\"rank\": 8, \"alpha\": 16}}", "{\"lora\": null}",
                                       "{\"lora\": {\"rank\": \"8\", \"alpha\": 1, \"targets\": 1}}" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_status(pt_checkpoint_host_model(&model, &lo, &lora_run, bad[i]), PT_EFORMAT, "\"lora\" lacks");
        ck_assert_ptr_null(model);
        ck_assert(!lora_run);
    }
    ck_assert_status(pt_checkpoint_host_model(&model, &lo, &lora_run, "{"), PT_EFORMAT, "not JSON");
    ck_assert_status(pt_checkpoint_host_model(&model, &lo, &lora_run, NULL), PT_EINVAL, NULL);
    ck_assert_status(pt_checkpoint_host_model(&model, NULL, &lora_run, "{}"), PT_EINVAL, NULL);
}
END_TEST

START_TEST(test_arch_class_name)
{
    /* config.json's "architectures" of Hugging Face models of each family */
    ck_assert_str_eq(pt_arch_class_name(PT_ARCH_LLAMA), "LlamaForCausalLM");
    ck_assert_str_eq(pt_arch_class_name(PT_ARCH_QWEN2), "Qwen2ForCausalLM");
    ck_assert_str_eq(pt_arch_class_name(PT_ARCH_QWEN3), "Qwen3ForCausalLM");
    ck_assert_str_eq(pt_arch_class_name(PT_ARCH_MISTRAL), "MistralForCausalLM");
    ck_assert_ptr_null(pt_arch_class_name(PT_ARCH_MISTRAL + 1));
    ck_assert_ptr_null(pt_arch_class_name(-1));
}
END_TEST

START_TEST(test_eval_result_to_json)
{
    double loss[] = { 1.0, NAN, 0.1 };
    int64_t tokens[] = { 1, 0, 2 };
    pt_eval_result r = { .loss = 1.0 / 3.0, .tokens = 3, .n_rows = 3, .row_loss = loss, .row_tokens = tokens };
    char *json = NULL;
    size_t len = 0;
    ck_assert_ok(pt_eval_result_to_json(&json, &len, &r));
    /* %.17g by hand: 1/3 and 0.1 to 17 significant digits */
    const char *want = "{\"loss\": 0.33333333333333331, \"tokens\": 3, \"rows\": [{\"loss\": 1, \"tokens\": 1}, "
                       "{\"loss\": null, \"tokens\": 0}, {\"loss\": 0.10000000000000001, \"tokens\": 2}]}";
    ck_assert_str_eq(json, want);
    ck_assert_uint_eq(len, strlen(want));
    pt_free(json);
    r.n_rows = 0;
    r.loss = INFINITY;
    ck_assert_ok(pt_eval_result_to_json(&json, NULL, &r));
    ck_assert_str_eq(json, "{\"loss\": null, \"tokens\": 3, \"rows\": []}");
    pt_free(json);
    r.n_rows = 2;
    r.row_loss = NULL;
    ck_assert_status(pt_eval_result_to_json(&json, &len, &r), PT_EINVAL, "row arrays");
    ck_assert_ptr_null(json);
    ck_assert_status(pt_eval_result_to_json(&json, &len, NULL), PT_EINVAL, NULL);
}
END_TEST

/* eval's text by hand: 1/3 and 0.1 to six decimals, e^(1/3) = 1.39561... */
START_TEST(test_eval_result_to_text)
{
    double loss[] = { 1.0, NAN, 0.1 };
    int64_t tokens[] = { 1, 0, 2 };
    pt_eval_result r = { .loss = 1.0 / 3.0, .tokens = 3, .n_rows = 3, .row_loss = loss, .row_tokens = tokens };
    char *text = NULL;
    size_t len = 0;
    ck_assert_ok(pt_eval_result_to_text(&text, &len, &r));
    const char *want = "row 1: loss 1.000000 nats/token over 1 tokens\n"
                       "row 2: no tokens to predict\n"
                       "row 3: loss 0.100000 nats/token over 2 tokens\n"
                       "overall: loss 0.333333 nats/token over 3 tokens in 3 rows (perplexity 1.3956)\n";
    ck_assert_str_eq(text, want);
    ck_assert_uint_eq(len, strlen(want));
    pt_free(text);
    r.n_rows = 2;
    r.row_tokens = NULL;
    ck_assert_status(pt_eval_result_to_text(&text, &len, &r), PT_EINVAL, "row arrays");
    ck_assert_ptr_null(text);
}
END_TEST

/* bytes into dir/name; the path (static). */
static const char *write_bytes(const char *dir, const char *name, const void *p, size_t n)
{
    static char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

START_TEST(test_gguf_file_counts)
{
    char *dir = pt_test_tmpdir("pt_host_gguf_");
    /* by hand: GGUF v3, no tensors, one key general.architecture = "llama" */
    static const unsigned char one_kv[] = {
        'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
        20, 0, 0, 0, 0, 0, 0, 0, 'g', 'e', 'n', 'e', 'r', 'a', 'l', '.', 'a', 'r', 'c', 'h', 'i', 't',
        'e', 'c', 't', 'u', 'r', 'e', 8, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 'l', 'l', 'a', 'm', 'a' };
    int version = -1;
    int64_t nt = -1, nkv = -1;
    ck_assert_ok(pt_gguf_file_counts(&version, &nt, &nkv, write_bytes(dir, "kv.gguf", one_kv, sizeof one_kv)));
    ck_assert_int_eq(version, 3);
    ck_assert_int_eq(nt, 0);
    ck_assert_int_eq(nkv, 1);
    ck_assert_status(pt_gguf_file_counts(&version, &nt, &nkv, write_bytes(dir, "bad.gguf", "GGUF\3", 5)),
                     PT_EFORMAT, NULL);
    ck_assert_int_eq(nt, 0);
    ck_assert_status(pt_gguf_file_counts(&version, &nt, &nkv, NULL), PT_EINVAL, NULL);
    /* stories260K as GGUF: 5 layers of 9 tensors, token_embd and output_norm
     * (tied: no output.weight), as llama.cpp's converter writes it */
    const char *shared = pt_test_shared_data("host_api gguf counts of stories260K");
    if (shared) {
        char src[4200], out[4300];
        snprintf(src, sizeof src, "%s/models/stories260K", shared);
        snprintf(out, sizeof out, "%s/stories.gguf", dir);
        pt_model *m = NULL;
        ck_assert_ok(pt_model_load_dir(&m, src, NULL));
        ck_assert_ok(pt_model_export_gguf(m, out, NULL));
        pt_model_free(m);
        ck_assert_ok(pt_gguf_file_counts(&version, &nt, &nkv, out));
        ck_assert_int_eq(version, 3);
        ck_assert_int_eq(nt, 47);
        ck_assert_int_gt(nkv, 10);
    }
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("host_api");
    TCase *tc = tcase_create("host_api");
    tcase_add_test(tc, test_stop_ids);
    tcase_add_test(tc, test_ids_parse);
    tcase_add_test(tc, test_json_quote);
    tcase_add_test(tc, test_mpi_info);
    tcase_add_test(tc, test_launcher_rank);
    tcase_add_test(tc, test_checkpoint_host_model);
    tcase_add_test(tc, test_arch_class_name);
    tcase_add_test(tc, test_eval_result_to_json);
    tcase_add_test(tc, test_eval_result_to_text);
    tcase_add_test(tc, test_gguf_file_counts);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
