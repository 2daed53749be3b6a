/* libFuzzer harness for config.json parsing and validation and, on the same
 * bytes, the JSONL row reader and the model.safetensors.index.json loader.
 * Invariants checked:
 *  - a failure is a negative status with a message, and leaves cfg unchanged;
 *  - an accepted config validates, its parameter count is computable, and the
 *    config.json the library writes for it parses back to the same struct;
 *  - JSONL rows are read to the end without crashing, every error naming a line;
 *  - as an index.json next to two real shards (inputs mentioning weight_map),
 *    pt_model_dir_inspect's verdict on the weights equals what
 *    pt_model_load_dir does. */
#include "core/core.h"
#include "io/jsonl.h"
#include "io/path.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "posttrain/modelio.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A directory with a tiny model's config.json and its tensors split over
 * model-00001-of-00002.safetensors and model-00002-of-00002.safetensors. */
static char g_dir[256];

static void cleanup_dir(void)
{
    static const char *const files[] = { "config.json", "model.safetensors.index.json",
                                         "model-00001-of-00002.safetensors",
                                         "model-00002-of-00002.safetensors" };
    char path[512];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, files[i]);
        unlink(path);
    }
    rmdir(g_dir);
}

static int setup_dir(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/pt_fuzz_index_XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    atexit(cleanup_dir);
    pt_model_config c;
    pt_model_config_init(&c);
    c.vocab_size = 8;
    c.hidden_size = 4;
    c.intermediate_size = 6;
    c.num_hidden_layers = 1;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 2;
    c.max_position_embeddings = 16;
    c.tie_word_embeddings = true;
    pt_model *m = NULL;
    char *json = NULL;
    if (pt_model_create(&m, &c, 1) != PT_OK || pt_model_config_to_json(&json, &c) != PT_OK)
        return -1;
    char *p = pt__path_join(g_dir, "config.json");
    FILE *f = fopen(p, "wb");
    fputs(json, f);
    fclose(f);
    pt_free(p);
    pt_free(json);
    pt_st_write_tensor t[2][32];
    size_t n[2] = { 0, 0 };
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *r = pt__model_tensor(m, i);
        int s = strstr(r->name, "mlp") != NULL;
        pt_st_write_tensor *w = &t[s][n[s]++];
        memset(w, 0, sizeof *w);
        w->name = r->name;
        w->dtype = PT_ST_F32;
        w->ndim = r->ndim;
        w->shape[0] = r->shape[0];
        w->shape[1] = r->ndim == 2 ? r->shape[1] : 0;
        w->data = r->data;
    }
    static const char *const names[2] = { "model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors" };
    for (int s = 0; s < 2; s++) {
        p = pt__path_join(g_dir, names[s]);
        if (pt__st_write(p, t[s], n[s], NULL, 0) != PT_OK)
            return -1;
        pt_free(p);
    }
    pt_model_free(m);
    return 0;
}

static void fuzz_index(const char *buf, size_t size)
{
    static int ready = 0;
    if (!ready) {
        if (setup_dir() != 0)
            abort();
        ready = 1;
    }
    char *p = pt__path_join(g_dir, "model.safetensors.index.json");
    FILE *f = fopen(p, "wb");
    if (size)
        fwrite(buf, 1, size, f);
    fclose(f);
    pt_free(p);
    pt_model_dir_info info;
    pt_model_dir_info_init(&info);
    int st = pt_model_dir_inspect(&info, g_dir);
    pt_model_load_options o;
    pt_model_load_options_init(&o);
    o.load_tokenizer = false;
    pt_model *m = NULL;
    int lst = pt_model_load_dir(&m, g_dir, &o);
    if (st != PT_OK) {
        /* the index itself is bad: the loader must refuse it the same way */
        if (st >= 0 || lst != st || m)
            abort();
        return;
    }
    if ((info.weights_status == PT_OK) != (lst == PT_OK))
        abort();
    if (lst == PT_OK) {
        pt_model_free(m);
    } else if (m || pt_last_error()[0] == '\0') {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_jsonl(const char *buf, size_t size)
{
    pt_jsonl *r = NULL;
    if (pt__jsonl_open_memory(&r, buf, size, "fuzz.jsonl", 4096) != PT_OK)
        abort();
    const cJSON *row;
    int st, guard = 0;
    while ((st = pt__jsonl_next(r, &row)) != 0 && guard++ < 100000) {
        if (st < 0) {
            if (!strstr(pt_last_error(), "fuzz.jsonl line "))
                abort();
            continue;
        }
        int kind = pt__jsonl_row_kind(r, row);
        if (kind == PT_JSONL_IDS) {
            int32_t *ids = NULL;
            uint8_t *mask = NULL;
            size_t n = 0;
            if (pt__jsonl_row_ids(&ids, &mask, &n, r, row, 1000) == PT_OK) {
                for (size_t i = 0; i < n; i++)
                    if (ids[i] < 0 || ids[i] >= 1000 || (mask && mask[i] > 1))
                        abort();
                pt_free(ids);
                pt_free(mask);
            }
        } else if (kind == PT_JSONL_TEXT) {
            const char *s;
            size_t len;
            if (pt__jsonl_row_string(&s, &len, r, row, "text", 1) == PT_OK &&
                !pt__utf8_valid(s, len))
                abort();
        }
    }
    pt__jsonl_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy of exactly `size` bytes so ASan flags any overread. */
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);

    pt_model_config cfg, before;
    pt_model_config_init(&cfg);
    before = cfg;
    int st = pt_model_config_from_json(&cfg, size ? buf : "", size);
    if (st != PT_OK) {
        if (st >= 0 || pt_last_error()[0] == '\0' || memcmp(&cfg, &before, sizeof cfg) != 0)
            abort();
    } else {
        uint64_t n;
        char *json = NULL;
        if (pt_model_config_validate(&cfg) != PT_OK || pt_model_config_num_params(&n, &cfg) != PT_OK)
            abort();
        if (pt_model_config_to_json(&json, &cfg) != PT_OK)
            abort();
        /* The written config.json reads back into the same configuration:
         * a fixed point of write -> read -> write (compared as text, since
         * a struct's padding bytes carry no value). */
        pt_model_config again;
        pt_model_config_init(&again);
        char *json2 = NULL;
        if (pt_model_config_from_json(&again, json, strlen(json)) != PT_OK ||
            pt_model_config_to_json(&json2, &again) != PT_OK || strcmp(json, json2) != 0)
            abort();
        pt_free(json2);
        pt_free(json);
    }
    fuzz_jsonl(buf, size);
    /* the index path does file I/O and builds a model: only for inputs that
     * can be an index at all, so config fuzzing keeps its speed */
    if (size >= 10 && memmem(buf, size, "weight_map", 10))
        fuzz_index(buf, size);
    free(buf);
    return 0;
}
