/* GGUF export against llama.cpp itself: for every digest in
 * tests/modelio/gguf_golden/ (made by make_goldens.py from the files that
 * llama.cpp's convert_hf_to_gguf.py / convert_lora_to_gguf.py wrote), build
 * the same model here, export it with pt_model_export_gguf /
 * pt_lora_export_gguf, and compare key by key and tensor by tensor.  Then
 * check the record of llama.cpp running our export (llamacpp_runs.json):
 * the exported file's sha256 and our greedy generation.  Skips loudly
 * without ../shared/data (the tokenizers and stories260K). */
#include "gguf_golden_cmp.h"
#include "stories.h"
#include "testfs.h"
#include "testutil.h"

#include <fnmatch.h>

#include "io/gguf.h"
#include "io/fileio.h"
#include "io/path.h"
#include "io/sha256.h"
#include "posttrain/gguf.h"
#include "posttrain/lora.h"
#include "posttrain/modelio.h"

#define GOLDEN_DIR PT_TEST_SRCDIR "/modelio/gguf_golden"
#define REF_DIR PT_TEST_SRCDIR "/reference"
#define SEED 20250222u   /* make_goldens.py's SEED */

static const char *g_shared;
static char *g_tmp;

/* make_goldens.py's perturb_1d and perturb_lora_b. */
static float perturb_1d(size_t i, size_t j)
{
    return 1.0f + (float)((int)((i * 31 + j * 7) % 17) - 8) / 64.0f;
}

static float perturb_lora_b(size_t i, size_t j)
{
    return (float)((int)((i * 13 + j * 5) % 23) - 11) / 256.0f;
}

static void copy_file(const char *src_dir, const char *dst_dir, const char *name)
{
    char src[4200], dst[4200];
    snprintf(src, sizeof src, "%s/%s", src_dir, name);
    snprintf(dst, sizeof dst, "%s/%s", dst_dir, name);
    char *buf = NULL;
    size_t len = 0;
    ck_assert_msg(pt__read_file(&buf, &len, src, 1u << 30) == PT_OK, "%s: %s", src, pt_last_error());
    ck_assert_ok(pt__write_file_atomic(dst, buf, len));
    free(buf);
}

static pt_model *load(const char *dir)
{
    pt_model *m = NULL;
    ck_assert_msg(pt_model_load_dir(&m, dir, NULL) == PT_OK, "%s: %s", dir, pt_last_error());
    return m;
}

/* stories260K copied to TMP/stories260K (config, weights, tokenizer; the
 * directory's name is the converter's general.name) and loaded. */
static pt_model *stories(void)
{
    char src[4200], dst[4200];
    snprintf(src, sizeof src, "%s/models/stories260K", g_shared);
    snprintf(dst, sizeof dst, "%s/stories260K", g_tmp);
    if (!pt__is_dir(dst)) {
        ck_assert_ok(pt__mkdir_p(dst));
        const char *files[] = { "config.json", "model.safetensors", "tokenizer.json",
                                "tokenizer_config.json" };
        for (size_t i = 0; i < sizeof files / sizeof *files; i++)
            copy_file(src, dst, files[i]);
    }
    return load(dst);
}

typedef struct synth {
    const char *name, *ref, *tok;
    int vocab, bos, eos;
} synth;

static const synth SYNTH[] = {
    { "tiny_llama3", "llama_tied_gqa", "llama3", 128256, 128000, 128001 },
    { "tiny_qwen2", "qwen2_bias_untied", "qwen3", 151936, 151643, 151645 },
    { "tiny_qwen3", "qwen3_qknorm", "qwen3", 151936, 151643, 151645 },
    { "tiny_mistral", "mistral_sliding", "llama-spm", 32045, 1, 2 },
};

static void set_1d(pt_model *m)
{
    size_t n;
    n = pt_model_tensor_count(m);
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info t;
        pt_tensor_info_init(&t);
        ck_assert_ok(pt_model_tensor_info(&t, m, i));
        if (t.ndim == 1 && !t.adapter)
            for (size_t j = 0; j < t.numel; j++)
                t.data[j] = perturb_1d(i, j);
    }
}

/* make_goldens.py's make_synthetic: a reference config with the tokenizer's
 * vocabulary, seeded weights, perturbed 1-D tensors, saved with the
 * tokenizer to TMP/NAME and loaded back. */
static pt_model *synthetic(const synth *s)
{
    char path[4200], dir[4200], tok[4200];
    snprintf(path, sizeof path, "%s/%s/config.json", REF_DIR, s->ref);
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, s->name);
    snprintf(tok, sizeof tok, "%s/tokenizers/%s", g_shared, s->tok);
    pt_model_config c;
    ck_assert_ok(pt_model_config_init(&c));
    ck_assert_ok(pt_model_config_load(&c, path));
    c.vocab_size = s->vocab;
    c.bos_token_id = s->bos;
    c.eos_token_id = s->eos;
    pt_model *m;
    ck_assert_ok(pt_model_create(&m, &c, SEED));
    set_1d(m);
    pt_model_save_options so;
    ck_assert_ok(pt_model_save_options_init(&so));
    so.tokenizer_dir = tok;
    ck_assert_ok(pt_model_save_dir(m, dir, &so));
    pt_model_free(m);
    return load(dir);
}

/* make_goldens.py's make_lora: rank 4, alpha 8 on q k v o down, A from seed
 * 5, B from perturb_lora_b. */
static void add_lora(pt_model *m)
{
    pt_lora_options lo;
    ck_assert_ok(pt_lora_options_init(&lo));
    lo.rank = 4;
    lo.alpha = 8.0;
    lo.targets = PT_LORA_Q | PT_LORA_K | PT_LORA_V | PT_LORA_O | PT_LORA_DOWN;
    lo.seed = 5;
    ck_assert_ok(pt_model_add_lora(m, &lo));
    size_t n;
    n = pt_model_tensor_count(m);
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info t;
        pt_tensor_info_init(&t);
        ck_assert_ok(pt_model_tensor_info(&t, m, i));
        if (t.adapter && strstr(t.name, ".lora_B."))
            for (size_t j = 0; j < t.numel; j++)
                t.data[j] = perturb_lora_b(i, j);
    }
}

/* make_goldens.py's PEFT directory: add_lora's adapters saved to
 * TMP/stories260K_lora, loaded onto a fresh stories260K with
 * pt_lora_load_peft (whose directory names the adapter, as in the
 * converter). */
static pt_model *stories_lora(void)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/stories260K_lora", g_tmp);
    if (!pt__is_dir(dir)) {
        pt_model *m = stories();
        add_lora(m);
        ck_assert_ok(pt_lora_save_peft(m, dir, "stories260K"));
        pt_model_free(m);
    }
    pt_model *m = stories();
    ck_assert_msg(pt_lora_load_peft(m, dir) == PT_OK, "%s: %s", dir, pt_last_error());
    return m;
}

static pt_model *model_for(const char *input)
{
    if (strcmp(input, "stories260K") == 0)
        return stories();
    if (strcmp(input, "stories260K_lora") == 0)
        return stories_lora();
    for (size_t i = 0; i < sizeof SYNTH / sizeof *SYNTH; i++)
        if (strcmp(input, SYNTH[i].name) == 0)
            return synthetic(&SYNTH[i]);
    ck_abort_msg("unknown input %s", input);
    return NULL;
}

/* The converters whose files the digests describe: llama.cpp upstream
 * (Feb 2025; no Qwen3 yet) and the unsloth fork (Aug 2026), which is the
 * converter the exporter follows where the two differ. */
static const char *const COMMITS[] = { "c392e50", "d32676d" };
static const char *const CASES[] = {
    "stories260K_f32", "stories260K_f16", "tiny_llama3_f32", "tiny_qwen2_f32",
    "tiny_qwen2_f16", "tiny_qwen3_f32", "stories260K_lora_f32", "stories260K_lora_f16",
    "tiny_mistral_f32",
};
#define N_CASES (sizeof CASES / sizeof *CASES)

/* Write our export of the digest's model to `out`. */
static void export_case(const cJSON *dg, const char *out)
{
    const char *input = cJSON_GetObjectItem(dg, "input")->valuestring;
    const char *outtype = cJSON_GetObjectItem(dg, "outtype")->valuestring;
    bool lora = strcmp(cJSON_GetObjectItem(dg, "converter")->valuestring,
                       "convert_lora_to_gguf.py") == 0;
    pt_model *m = model_for(input);
    pt_gguf_export_options o;
    ck_assert_ok(pt_gguf_export_options_init(&o));
    ck_assert_ok(pt_gguf_ftype_from_name(&o.type, outtype));
    if (lora) {
        /* o.name NULL: general.name from the PEFT directory, as the converter */
        ck_assert_ok(pt_lora_export_gguf(m, out, &o));
    } else {
        ck_assert_ok(pt_model_export_gguf(m, out, &o));
    }
    pt_model_free(m);
}

/* The differences found, each checked against the known ones
 * (gguf_golden/COMMIT/KNOWN_DIFFERENCES.json: case -> glob patterns). */
typedef struct found {
    const char *label;
    const cJSON *known;    /* array of patterns, or NULL */
    int unexplained;
    char first[1024];
    bool used[64];
} found;

static void on_diff(void *ctx, const char *msg)
{
    found *f = ctx;
    int i = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, f->known) {
        if (fnmatch(p->valuestring, msg, 0) == 0) {
            f->used[i] = true;
            fprintf(stderr, "%s: known: %s\n", f->label, msg);
            return;
        }
        i++;
    }
    fprintf(stderr, "%s: DIFFERS: %s\n", f->label, msg);
    if (f->unexplained++ == 0)
        snprintf(f->first, sizeof f->first, "%s", msg);
}

static cJSON *known_differences(const char *commit)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", GOLDEN_DIR, commit);
    return pt_test_read_json(dir, "KNOWN_DIFFERENCES.json");
}

/* Export the digest's model as we do and compare; every difference must be
 * a known one and every known one must still occur. */
static void check_case(const char *commit, const char *case_name)
{
    char dir[4200], file[256], out[4200], label[256];
    snprintf(dir, sizeof dir, "%s/%s", GOLDEN_DIR, commit);
    snprintf(file, sizeof file, "%s.digest.json", case_name);
    snprintf(out, sizeof out, "%s/%s.gguf", g_tmp, case_name);
    snprintf(label, sizeof label, "%s/%s", commit, case_name);
    cJSON *dg = pt_test_read_json(dir, file);
    cJSON *known = known_differences(commit);
    found f = { .label = label };
    f.known = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItem(known, "cases"), case_name);
    ck_assert(cJSON_GetArraySize(f.known) <= 64);
    export_case(dg, out);
    pt_gguf *g = NULL;
    ck_assert_msg(pt__gguf_open(&g, out) == PT_OK, "%s: %s", out, pt_last_error());
    int nd = pt_golden_compare(g, dg, on_diff, &f);
    pt__gguf_close(g);
    cJSON_Delete(dg);
    ck_assert_msg(f.unexplained == 0, "%s: %d difference(s) from llama.cpp's converter, %d "
                  "unexplained; first: %s", label, nd, f.unexplained, f.first);
    for (int i = 0; i < cJSON_GetArraySize(f.known); i++)
        ck_assert_msg(f.used[i], "%s: the known difference '%s' no longer occurs (update "
                      "KNOWN_DIFFERENCES.json)", label, cJSON_GetArrayItem(f.known, i)->valuestring);
    cJSON_Delete(known);
    if (nd == 0)
        fprintf(stderr, "%s: identical to the converter's file key by key and tensor by tensor\n",
                label);
}

/* Loop index: commit * N_CASES + case; a digest the converter could not
 * make (Qwen3 before the fork) is absent and skipped. */
START_TEST(test_converter)
{
    if (!g_shared)
        return;
    const char *commit = COMMITS[_i / (int)N_CASES], *c = CASES[_i % (int)N_CASES];
    char path[4200];
    snprintf(path, sizeof path, "%s/%s/%s.digest.json", GOLDEN_DIR, commit, c);
    if (!pt__is_file(path)) {
        fprintf(stderr, "SKIP %s/%s: no digest (that converter does not know the "
                        "architecture)\n", commit, c);
        return;
    }
    check_case(commit, c);
}
END_TEST

static void setup(void)
{
    if (!g_tmp)
        g_tmp = pt_test_tmpdir("pt-gguf-golden-");
}

/* ---- the record of llama.cpp running our files (llamacpp_runs.json) ---- */

static cJSON *g_runs;

static const cJSON *run_named(const char *name)
{
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(g_runs, "runs"))
        if (strcmp(cJSON_GetObjectItem(r, "name")->valuestring, name) == 0)
            return r;
    ck_abort_msg("llamacpp_runs.json has no run %s", name);
    return NULL;
}

static void assert_sha256(const char *path, const cJSON *run, const char *field)
{
    uint8_t dg[32];
    char hex[65];
    ck_assert_ok(pt__sha256_file(path, dg));
    pt__sha256_hex(dg, hex);
    const char *want = cJSON_GetObjectItem(run, field)->valuestring;
    ck_assert_msg(strcmp(hex, want) == 0, "%s: our export's sha256 is %s, llama.cpp ran %s",
                  cJSON_GetObjectItem(run, "name")->valuestring, hex, want);
}

/* Our greedy generation of the record's prompt must be the recorded ids and
 * text, which the record says llama.cpp produced too. */
static void assert_generation(pt_model *m, const cJSON *run)
{
    const char *name = cJSON_GetObjectItem(run, "name")->valuestring;
    ck_assert_msg(cJSON_IsTrue(cJSON_GetObjectItem(run, "same_text")),
                  "%s: the record says llama.cpp's text differs from ours", name);
    const pt_tokenizer *tok = pt_model_tokenizer(m);
    const char *prompt = cJSON_GetObjectItem(g_runs, "prompt")->valuestring;
    int32_t *ids = NULL;
    size_t n = 0;
    ck_assert_ok(pt_tokenizer_encode(&ids, &n, tok, prompt, strlen(prompt), PT_TOK_ADD_SPECIAL));
    int np = 0, ng = 0;
    int32_t *want_p = pt_test_json_ids(cJSON_GetObjectItem(run, "posttrain_prompt_ids"), &np);
    int32_t *want = pt_test_json_ids(cJSON_GetObjectItem(run, "posttrain_ids"), &ng);
    ck_assert_int_eq((int)n, np);
    ck_assert(memcmp(ids, want_p, n * sizeof *ids) == 0);
    pt_generate_options o;
    ck_assert_ok(pt_generate_options_init(&o));
    o.max_new_tokens = (int)cJSON_GetObjectItem(g_runs, "n_predict")->valuedouble;
    o.temperature = 0.0f;
    pt_generator *gen;
    ck_assert_ok(pt_generator_create(&gen, m, 1, (int)n + o.max_new_tokens));
    int32_t *toks = malloc((size_t)o.max_new_tokens * sizeof *toks), nt = 0;
    const int32_t len = (int32_t)n;
    ck_assert_ok(pt_generate(gen, ids, &len, 1, &o, toks, &nt, NULL, NULL));
    ck_assert_msg(nt == ng, "%s: %d tokens generated, the record has %d", name, nt, ng);
    for (int i = 0; i < ng; i++)
        ck_assert_msg(toks[i] == want[i], "%s: token %d is %d, the record has %d", name, i,
                      toks[i], want[i]);
    char *text = NULL;
    ck_assert_ok(pt_tokenizer_decode(&text, NULL, tok, toks, (size_t)nt, PT_TOK_SKIP_SPECIAL));
    ck_assert_str_eq(text, cJSON_GetObjectItem(run, "posttrain_text")->valuestring);
    ck_assert_str_eq(text, cJSON_GetObjectItem(run, "llama_cpp_text")->valuestring);
    pt_free(text);
    pt_generator_free(gen);
    free(toks);
    free(want);
    free(want_p);
    pt_free(ids);
}

/* stories260K exported as f32 / f16 (loop 0 / 1): the file llama.cpp ran. */
START_TEST(test_run_model)
{
    if (!g_shared)
        return;
    const char *type = _i ? "f16" : "f32";
    char name[64], out[4200];
    snprintf(name, sizeof name, "stories260K_%s", type);
    snprintf(out, sizeof out, "%s/run_%s.gguf", g_tmp, name);
    const cJSON *run = run_named(name);
    pt_model *m = stories();
    pt_gguf_export_options o;
    ck_assert_ok(pt_gguf_export_options_init(&o));
    ck_assert_ok(pt_gguf_ftype_from_name(&o.type, type));
    ck_assert_ok(pt_model_export_gguf(m, out, &o));
    assert_sha256(out, run, "gguf_sha256");
    assert_generation(m, run);
    pt_model_free(m);
}
END_TEST

/* The LoRA adapter exported as f32 / f16 over the f32 base. */
START_TEST(test_run_lora)
{
    if (!g_shared)
        return;
    const char *type = _i ? "f16" : "f32";
    char name[64], out[4200];
    snprintf(name, sizeof name, "stories260K_lora_%s", type);
    snprintf(out, sizeof out, "%s/run_%s.gguf", g_tmp, name);
    const cJSON *run = run_named(name);
    pt_model *m = stories_lora();
    pt_gguf_export_options o;
    ck_assert_ok(pt_gguf_export_options_init(&o));
    ck_assert_ok(pt_gguf_ftype_from_name(&o.type, type));
    /* o.name NULL, as `posttrain export --adapter` leaves it: general.name is
     * the PEFT directory's ("stories260K_lora"), as the converter writes */
    ck_assert_ok(pt_lora_export_gguf(m, out, &o));
    assert_sha256(out, run, "lora_sha256");
    assert_generation(m, run);
    pt_model_free(m);
}
END_TEST

/* ---- the record of llama.cpp tokenizing our exports (llamacpp_tokenize.json) ---- */

static cJSON *g_tok;

static void assert_ids(const cJSON *want, const int32_t *ids, size_t n, const char *what, const char *text)
{
    int nw = 0;
    int32_t *w = pt_test_json_ids(want, &nw);
    ck_assert_msg((size_t)nw == n && (n == 0 || memcmp(w, ids, n * sizeof *ids) == 0),
                  "'%s': %s: %zu ids, the record has %d", text, what, n, nw);
    free(w);
}

static bool same_json_ids(const cJSON *a, const cJSON *b)
{
    return cJSON_Compare(a, b, true);
}

/* Our stories260K export with spm_scores `mode` is the file llama.cpp
 * tokenized (sha256); our tokenizer and the tokenizer the importer rebuilds
 * from the `merges` file give the recorded ids for every text; the record
 * says llama.cpp's ids equal them for `merges` on every text and differ for
 * `converter` on " little". */
START_TEST(test_tokenize_record)
{
    if (!g_shared)
        return;
    static const char *const modes[] = { "converter", "merges" };
    const cJSON *exports = cJSON_GetObjectItem(g_tok, "exports");
    pt_model *m = stories(), *back = NULL;
    char out[4200];
    for (int k = 0; k < 2; k++) {
        snprintf(out, sizeof out, "%s/spm_%s.gguf", g_tmp, modes[k]);
        pt_gguf_export_options o;
        ck_assert_ok(pt_gguf_export_options_init(&o));
        ck_assert_ok(pt_gguf_spm_scores_from_name(&o.spm_scores, modes[k]));
        ck_assert_ok(pt_model_export_gguf(m, out, &o));
        const cJSON *e = cJSON_GetObjectItem(exports, modes[k]);
        cJSON_AddItemToObject((cJSON *)e, "name", cJSON_CreateString(modes[k]));
        assert_sha256(out, e, "gguf_sha256");
    }
    back = load(out);   /* the merges file */
    const pt_tokenizer *tok = pt_model_tokenizer(m), *btok = pt_model_tokenizer(back);
    int n = 0, same_merges = 0, same_conv = 0;
    bool little_differs = false;
    const cJSON *row;
    cJSON_ArrayForEach(row, cJSON_GetObjectItem(g_tok, "texts")) {
        const char *text = cJSON_GetObjectItem(row, "text")->valuestring;
        const cJSON *ours = cJSON_GetObjectItem(row, "posttrain_ids");
        int32_t *ids = NULL;
        size_t ni = 0;
        ck_assert_ok(pt_tokenizer_encode(&ids, &ni, tok, text, strlen(text), PT_TOK_ADD_SPECIAL));
        assert_ids(ours, ids, ni, "our tokenizer", text);
        pt_free(ids);
        ck_assert_ok(pt_tokenizer_encode(&ids, &ni, btok, text, strlen(text), PT_TOK_ADD_SPECIAL));
        assert_ids(ours, ids, ni, "the tokenizer imported from the merges file", text);
        pt_free(ids);
        bool sm = same_json_ids(ours, cJSON_GetObjectItem(row, "llama_cpp_ids_merges"));
        bool sc = same_json_ids(ours, cJSON_GetObjectItem(row, "llama_cpp_ids_converter"));
        ck_assert_msg(sm, "'%s': the record says llama.cpp tokenizes the merges file differently", text);
        same_merges += sm;
        same_conv += sc;
        if (strcmp(text, " little") == 0)
            little_differs = !sc;
        n++;
    }
    ck_assert_int_ge(n, 40);
    ck_assert(little_differs);
    const cJSON *sum = cJSON_GetObjectItem(g_tok, "summary");
    ck_assert_int_eq(cJSON_GetObjectItem(sum, "texts")->valueint, n);
    ck_assert_int_eq(cJSON_GetObjectItem(sum, "same_as_posttrain_merges")->valueint, same_merges);
    ck_assert_int_eq(cJSON_GetObjectItem(sum, "same_as_posttrain_converter")->valueint, same_conv);
    ck_assert_int_lt(same_conv, n);
    fprintf(stderr, "llamacpp_tokenize.json: %d texts; llama.cpp = ours on %d with spm_scores "
            "merges, %d with converter\n", n, same_merges, same_conv);
    pt_model_free(back);
    pt_model_free(m);
}
END_TEST

static void runs_setup(void)
{
    setup();
    if (!g_runs)
        g_runs = pt_test_read_json(GOLDEN_DIR, "llamacpp_runs.json");
    if (!g_tok)
        g_tok = pt_test_read_json(GOLDEN_DIR, "llamacpp_tokenize.json");
}

int main(void)
{
    g_shared = pt_test_shared_data("gguf_golden (export vs llama.cpp's converter)");
    Suite *s = suite_create("gguf_golden");
    TCase *tc = tcase_create("converter");
    tcase_set_timeout(tc, 600);
    tcase_add_unchecked_fixture(tc, setup, NULL);
    tcase_add_loop_test(tc, test_converter, 0, (int)(N_CASES * 2));
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("llamacpp_runs");
    tcase_set_timeout(tr, 300);
    tcase_add_unchecked_fixture(tr, runs_setup, NULL);
    tcase_add_loop_test(tr, test_run_model, 0, 2);
    tcase_add_loop_test(tr, test_run_lora, 0, 2);
    tcase_add_test(tr, test_tokenize_record);
    suite_add_tcase(s, tr);

    int rc = pt_test_run(s);
    if (g_tmp)
        pt_test_rm_rf(g_tmp);
    free(g_tmp);
    cJSON_Delete(g_runs);
    cJSON_Delete(g_tok);
    return rc;
}
