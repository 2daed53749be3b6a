/* libFuzzer harness for config.json parsing and validation (and, on the same
 * bytes, the JSONL row reader).  Invariants checked:
 *  - a failure is a negative status with a message, and leaves cfg unchanged;
 *  - an accepted config validates, its parameter count is computable, and the
 *    config.json the library writes for it parses back to the same struct;
 *  - JSONL rows are read to the end without crashing, every error naming a line. */
#include "core/core.h"
#include "modelio/jsonl.h"
#include "posttrain/modelio.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_jsonl(const char *buf, size_t size)
{
    pt_jsonl *r = NULL;
    if (pt_jsonl_open_memory(&r, buf, size, "fuzz.jsonl", 4096) != PT_OK)
        abort();
    const cJSON *row;
    int st, guard = 0;
    while ((st = pt_jsonl_next(r, &row)) != 0 && guard++ < 100000) {
        if (st < 0) {
            if (!strstr(pt_last_error(), "fuzz.jsonl line "))
                abort();
            continue;
        }
        int kind = pt_jsonl_row_kind(r, row);
        if (kind == PT_JSONL_IDS) {
            int32_t *ids = NULL;
            uint8_t *mask = NULL;
            size_t n = 0;
            if (pt_jsonl_row_ids(&ids, &mask, &n, r, row, 1000) == PT_OK) {
                for (size_t i = 0; i < n; i++)
                    if (ids[i] < 0 || ids[i] >= 1000 || (mask && mask[i] > 1))
                        abort();
                pt_free(ids);
                pt_free(mask);
            }
        } else if (kind == PT_JSONL_TEXT) {
            const char *s;
            size_t len;
            if (pt_jsonl_row_string(&s, &len, r, row, "text", 1) == PT_OK &&
                !pt_utf8_valid(s, len))
                abort();
        }
    }
    pt_jsonl_close(r);
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
        pt_model_config again;
        pt_model_config_init(&again);
        if (pt_model_config_from_json(&again, json, strlen(json)) != PT_OK ||
            memcmp(&again, &cfg, sizeof cfg) != 0)
            abort();
        pt_free(json);
    }
    fuzz_jsonl(buf, size);
    free(buf);
    return 0;
}
