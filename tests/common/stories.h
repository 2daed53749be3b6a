/* Reading the stories260K model and its reference JSON files
 * (../shared/data/models/stories260K/reference/) in the suites that check
 * the real model: the parity suite and the generation suite. */
#ifndef PT_TEST_STORIES_H
#define PT_TEST_STORIES_H

#include "testutil.h"

#include "core/core.h"
#include "io/fileio.h"
#include "posttrain/modelio.h"

#include <cjson/cJSON.h>

/* dir/rel parsed as JSON (the test fails if it cannot be read or parsed). */
static inline cJSON *pt_test_read_json(const char *dir, const char *rel)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    char *text = NULL;
    size_t len = 0;
    ck_assert_msg(pt__read_file(&text, &len, path, 16u << 20) == PT_OK, "%s: %s", path,
                  pt_last_error());
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    ck_assert_msg(j != NULL, "%s: not valid JSON", path);
    return j;
}

/* A JSON array of integers as a malloc'ed int32 array. */
static inline int32_t *pt_test_json_ids(const cJSON *arr, int *n)
{
    ck_assert(cJSON_IsArray(arr));
    *n = cJSON_GetArraySize(arr);
    int32_t *ids = malloc((size_t)*n * sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        ck_assert(cJSON_IsNumber(e));
        ids[i++] = (int32_t)e->valuedouble;
    }
    return ids;
}

/* The model through the library's directory loader, tokenizer left out. */
static inline pt_model *pt_test_load_stories(const char *dir)
{
    pt_model_load_options lo;
    ck_assert_ok(pt_model_load_options_init(&lo));
    lo.load_tokenizer = false;
    pt_model *m = NULL;
    ck_assert_msg(pt_model_load_dir(&m, dir, &lo) == PT_OK, "loading %s: %s", dir, pt_last_error());
    return m;
}

#endif
