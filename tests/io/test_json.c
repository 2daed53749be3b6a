/* io/json: typed getters (types, ranges, presence, null as absent, duplicate
 * keys, messages naming file, path and key) and the writers (string escapes,
 * shortest round-tripping doubles). */
#include "testutil.h"
#include "testfs.h"

#include "core/core.h"
#include "core/strbuf.h"
#include "io/fileio.h"
#include "io/json.h"
#include "io/safetensors.h"

#include <float.h>
#include <math.h>

/* ---- writers -------------------------------------------------------------- */

/* The JSON text of s[0..n) under flags, in a static buffer. */
static const char *escaped(const char *s, size_t n, unsigned flags)
{
    static char out[512];
    pt_strbuf b = PT_STRBUF_INIT;
    ck_assert_ok(pt__json_put_string_ex(&b, s, n, flags));
    ck_assert_uint_lt(b.len, sizeof out);
    memcpy(out, b.p, b.len + 1);
    pt__strbuf_free(&b);
    return out;
}

START_TEST(test_put_string)
{
    /* quotes, backslash, every control character as \u00xx, DEL and UTF-8 kept */
    const char in[] = "a\"b\\c\n\r\t\x01\x1f\x7f \xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80/";
    ck_assert_str_eq(escaped(in, sizeof in - 1, 0),
                     "\"a\\\"b\\\\c\\u000a\\u000d\\u0009\\u0001\\u001f\x7f \xc3\xa9 \xe6\x97\xa5 "
                     "\xf0\x9f\x98\x80/\"");
    /* the length is honoured: an inner NUL is escaped, bytes after n ignored */
    ck_assert_str_eq(escaped("a\0b!", 3, 0), "\"a\\u0000b\"");
    ck_assert_str_eq(escaped("", 0, 0), "\"\"");
    ck_assert_str_eq(escaped(NULL, 0, 0), "\"\"");
    /* Python's json.dumps(ensure_ascii=False) and the tokenize CLI's form */
    ck_assert_str_eq(escaped("\n\r\t\b\f\x0b\"\\\x7f", 9, PT_JSON_SHORT_ESCAPES),
                     "\"\\n\\r\\t\\b\\f\\u000b\\\"\\\\\x7f\"");
    ck_assert_str_eq(escaped("\n\x7f", 2, PT_JSON_SHORT_ESCAPES | PT_JSON_ESCAPE_DEL),
                     "\"\\n\\u007f\"");

    /* every byte 0x01..0xff reads back through cJSON as itself */
    char all[255];
    for (int i = 0; i < 255; i++)
        all[i] = (char)(i + 1);
    for (unsigned flags = 0; flags < 4; flags++) {
        pt_strbuf b = PT_STRBUF_INIT;
        ck_assert_ok(pt__json_put_string_ex(&b, all, sizeof all, flags));
        cJSON *j = cJSON_Parse(b.p);
        ck_assert_ptr_nonnull(j);
        ck_assert(cJSON_IsString(j));
        ck_assert_uint_eq(strlen(j->valuestring), sizeof all);
        ck_assert_int_eq(memcmp(j->valuestring, all, sizeof all), 0);
        cJSON_Delete(j);
        pt__strbuf_free(&b);
    }
    ck_assert_status(pt__json_put_string(NULL, "x", 1), PT_EINVAL, "pt__json_put_string_ex: b is NULL");
}
END_TEST

/* The safetensors writer's header holds names and metadata exactly as
 * pt__json_put_string writes them. */
START_TEST(test_put_string_matches_safetensors)
{
    char *dir = pt_test_tmpdir("pt_json_");
    char *path = pt__path_join(dir, "s.safetensors");
    ck_assert_ptr_nonnull(path);
    const char *name = "w\x01\"q\"\\\xc3\xb1\x1f";
    const char *kv[] = {"k\ny", "v\t\"\xe2\x82\xac\""};
    float x = 1.0f;
    pt_st_write_tensor t = {.name = name, .dtype = PT_ST_F32, .ndim = 1, .shape = {1}, .data = &x};
    ck_assert_ok(pt__st_write(path, &t, 1, kv, 1));

    pt_strbuf want = PT_STRBUF_INIT;
    pt__strbuf_puts(&want, "{\"__metadata__\":{");
    pt__json_put_string(&want, kv[0], strlen(kv[0]));
    pt__strbuf_putc(&want, ':');
    pt__json_put_string(&want, kv[1], strlen(kv[1]));
    pt__strbuf_puts(&want, "},");
    pt__json_put_string(&want, name, strlen(name));
    ck_assert_ok(pt__strbuf_puts(&want, ":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"));

    char *buf = NULL;
    size_t len = 0;
    ck_assert_ok(pt__read_file(&buf, &len, path, 1 << 20));
    ck_assert_uint_ge(len, 8 + want.len);
    ck_assert_int_eq(memcmp(buf + 8, want.p, want.len), 0);
    for (size_t i = 8 + want.len; i < len - 4; i++)
        ck_assert_int_eq(buf[i], ' ');
    free(buf);
    pt__strbuf_free(&want);
    free(path);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

static const char *dbl(double v)
{
    static char out[64];
    pt_strbuf b = PT_STRBUF_INIT;
    ck_assert_ok(pt__json_put_double(&b, v));
    snprintf(out, sizeof out, "%s", b.p);
    pt__strbuf_free(&b);
    return out;
}

START_TEST(test_put_double)
{
    ck_assert_str_eq(dbl(0.02), "0.02");
    ck_assert_str_eq(dbl(1e-6), "1e-06");
    ck_assert_str_eq(dbl(1e-5), "1e-05");
    ck_assert_str_eq(dbl(10000.0), "10000.0");
    ck_assert_str_eq(dbl(500000.0), "500000.0");
    ck_assert_str_eq(dbl(1.0), "1.0");
    ck_assert_str_eq(dbl(0.0), "0.0");
    ck_assert_str_eq(dbl(-0.0), "-0.0");
    ck_assert_str_eq(dbl(-2.5), "-2.5");
    ck_assert_str_eq(dbl(0.1 + 0.2), "0.30000000000000004");
    ck_assert_str_eq(dbl(1.0 + DBL_EPSILON), "1.0000000000000002");
    ck_assert_str_eq(dbl(1e300), "1e+300");
    ck_assert_str_eq(dbl(1e16), "1e+16");
    ck_assert_str_eq(dbl(DBL_MAX), "1.7976931348623157e+308");
    ck_assert_str_eq(dbl(5e-324), "4.94065645841247e-324");
    ck_assert_str_eq(dbl((double)1e-6f), "9.999999974752427e-07");

    /* doubles across the range read back exactly, and always as floats */
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 20000; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        double v;
        memcpy(&v, &s, sizeof v);
        if (!isfinite(v))
            continue;
        const char *t = dbl(v);
        ck_assert_msg(strtod(t, NULL) == v, "%s does not read back as %a", t, v);
        ck_assert_msg(strpbrk(t, ".e") != NULL, "%s reads back as an integer", t);
    }
    ck_assert_status(pt__json_put_double(NULL, 1.0), PT_EINVAL, "pt__json_put_double: b is NULL");
}
END_TEST

/* ---- getters -------------------------------------------------------------- */

static const char DOC[] =
    "{\"n\": 7, \"neg\": -1, \"frac\": 1.5, \"big\": 1e400, \"huge\": 9007199254740992,"
    " \"s\": \"hi\", \"t\": true, \"f\": false, \"nul\": null, \"o\": {\"x\": 1},"
    " \"a\": [1, 2], \"dup\": 1, \"dup\": 2}";

static cJSON *doc(void)
{
    cJSON *j = cJSON_Parse(DOC);
    ck_assert_ptr_nonnull(j);
    return j;
}

START_TEST(test_get_int)
{
    cJSON *j = doc();
    const pt_json_ctx cfg = {.file = "config.json", .status = PT_ECONFIG};
    const pt_json_ctx rope = {.file = "config.json", .path = "rope_scaling", .status = PT_ECONFIG};
    int v = 0;
    bool have = false;
    ck_assert_ok(pt__json_get_int(&v, &have, j, &cfg, "n", true, 1, 10));
    ck_assert_int_eq(v, 7);
    ck_assert(have);
    ck_assert_ok(pt__json_get_int(&v, &have, j, &cfg, "neg", true, -1, 10));
    ck_assert_int_eq(v, -1);
    /* absent or null: the value stays, not present, an error only when required */
    v = 42;
    ck_assert_ok(pt__json_get_int(&v, &have, j, &cfg, "missing", false, 0, 10));
    ck_assert_int_eq(v, 42);
    ck_assert(!have);
    ck_assert_ok(pt__json_get_int(&v, &have, j, &cfg, "nul", false, 0, 10));
    ck_assert_int_eq(v, 42);
    ck_assert(!have);
    ck_assert_status(pt__json_get_int(&v, NULL, j, &cfg, "missing", true, 0, 10), PT_ECONFIG,
                     "config.json: required field 'missing' is missing");
    ck_assert_status(pt__json_get_int(&v, NULL, j, &rope, "nul", true, 0, 10), PT_ECONFIG,
                     "config.json: required field 'rope_scaling.nul' is missing");
    /* range, type, fraction, infinity; present is still reported */
    have = false;
    ck_assert_status(pt__json_get_int(&v, &have, j, &cfg, "n", true, 8, 65536), PT_ECONFIG,
                     "config.json: 'n' = 7 is out of range [8, 65536]");
    ck_assert(have);
    ck_assert_status(pt__json_get_int(&v, NULL, j, &rope, "neg", true, 0, 3), PT_ECONFIG,
                     "config.json: 'rope_scaling.neg' = -1 is out of range [0, 3]");
    ck_assert_status(pt__json_get_int(&v, NULL, j, &cfg, "s", true, 0, 3), PT_ECONFIG,
                     "config.json: 's' must be an integer, got a string");
    ck_assert_status(pt__json_get_int(&v, NULL, j, &cfg, "frac", true, 0, 3), PT_ECONFIG,
                     "config.json: 'frac' must be an integer, got 1.5");
    ck_assert_status(pt__json_get_int(&v, NULL, j, &cfg, "big", true, 0, 3), PT_ECONFIG,
                     "'big' must be an integer, got inf");
    ck_assert_int_eq(v, 42); /* a rejected value leaves *out alone */
    ck_assert_status(pt__json_get_int(&v, NULL, j, &cfg, "huge", true, 0, INT32_MAX), PT_ECONFIG,
                     "'huge' = 9007199254740992 is out of range [0, 2147483647]");
    int64_t w = 0;
    ck_assert_ok(pt__json_get_i64(&w, NULL, j, &cfg, "huge", true, 0, INT64_C(1) << 53));
    ck_assert_int_eq(w, INT64_C(1) << 53);
    ck_assert_status(pt__json_get_int(NULL, NULL, j, &cfg, "n", true, 0, 3), PT_EINVAL,
                     "pt__json_get_int: out is NULL");
    cJSON_Delete(j);
}
END_TEST

START_TEST(test_get_other_types)
{
    cJSON *j = doc();
    const pt_json_ctx tok = {.file = "tokenizer.json", .path = "model", .first_wins = true};
    double d = 0;
    bool b = false, have = true;
    ck_assert_ok(pt__json_get_double(&d, &have, j, &tok, "frac", true));
    ck_assert(d == 1.5 && have);
    ck_assert_ok(pt__json_get_double(&d, NULL, j, &tok, "n", true));
    ck_assert(d == 7.0);
    ck_assert_status(pt__json_get_double(&d, NULL, j, &tok, "big", true), PT_EFORMAT,
                     "tokenizer.json: 'model.big' must be finite");
    ck_assert_status(pt__json_get_double(&d, NULL, j, &tok, "t", true), PT_EFORMAT,
                     "tokenizer.json: 'model.t' must be a number, got a boolean");

    ck_assert_ok(pt__json_get_bool(&b, &have, j, &tok, "t", false));
    ck_assert(b && have);
    ck_assert_ok(pt__json_get_bool(&b, NULL, j, &tok, "f", true));
    ck_assert(!b);
    b = true;
    ck_assert_ok(pt__json_get_bool(&b, &have, j, &tok, "nul", false));
    ck_assert(b && !have);
    ck_assert_status(pt__json_get_bool(&b, NULL, j, &tok, "s", false), PT_EFORMAT,
                     "tokenizer.json: 'model.s' must be true or false, got a string");

    const char *s = "old";
    ck_assert_ok(pt__json_get_string(&s, j, &tok, "s", true));
    ck_assert_str_eq(s, "hi");
    ck_assert_ok(pt__json_get_string(&s, j, &tok, "nul", false));
    ck_assert_ptr_null(s);
    ck_assert_status(pt__json_get_string(&s, j, &tok, "absent", true), PT_EFORMAT,
                     "tokenizer.json: required field 'model.absent' is missing");
    ck_assert_status(pt__json_get_string(&s, j, &tok, "o", true), PT_EFORMAT,
                     "'model.o' must be a string, got an object");
    ck_assert_ptr_null(s);

    const cJSON *o = NULL, *a = NULL;
    ck_assert_ok(pt__json_get_object(&o, j, &tok, "o", true));
    ck_assert_ptr_nonnull(o);
    ck_assert_ok(pt__json_get_array(&a, j, &tok, "a", true));
    ck_assert_int_eq(cJSON_GetArraySize(a), 2);
    ck_assert_ok(pt__json_get_object(&o, j, &tok, "nul", false));
    ck_assert_ptr_null(o);
    ck_assert_status(pt__json_get_object(&o, j, &tok, "a", true), PT_EFORMAT,
                     "'model.a' must be an object, got an array");
    ck_assert_status(pt__json_get_array(&a, j, &tok, "o", true), PT_EFORMAT,
                     "'model.o' must be an array, got an object");
    ck_assert_ptr_null(a);

    /* a NULL context: no prefix, PT_EFORMAT */
    ck_assert_status(pt__json_get_bool(&b, NULL, j, NULL, "n", true), PT_EFORMAT,
                     "'n' must be true or false, got a number");
    cJSON_Delete(j);
}
END_TEST

START_TEST(test_duplicates_and_lookup)
{
    cJSON *j = doc();
    const pt_json_ctx strict = {.file = "config.json", .status = PT_ECONFIG};
    const pt_json_ctx first = {.file = "tokenizer.json", .first_wins = true};
    int v = 0;
    /* a duplicate is PT_EFORMAT whatever the context's status */
    ck_assert_status(pt__json_get_int(&v, NULL, j, &strict, "dup", false, 0, 9), PT_EFORMAT,
                     "config.json: duplicate key 'dup'");
    ck_assert_ok(pt__json_get_int(&v, NULL, j, &first, "dup", false, 0, 9));
    ck_assert_int_eq(v, 1);

    const cJSON *it = (const cJSON *)1;
    ck_assert_ok(pt__json_field(&it, j, &strict, "nul"));
    ck_assert_ptr_null(it);
    ck_assert_ok(pt__json_field(&it, j, &strict, "o"));
    ck_assert(cJSON_IsObject(it));
    ck_assert_ok(pt__json_field(&it, NULL, &strict, "o"));
    ck_assert_ptr_null(it);
    ck_assert(pt__json_has_key(j, "nul"));
    ck_assert(!pt__json_has_key(j, "absent"));

    ck_assert_str_eq(pt__json_type_name(cJSON_GetObjectItem(j, "a")), "an array");
    ck_assert_str_eq(pt__json_type_name(cJSON_GetObjectItem(j, "nul")), "null");
    ck_assert_str_eq(pt__json_type_name(cJSON_GetObjectItem(j, "f")), "a boolean");
    cJSON_Delete(j);
}
END_TEST

START_TEST(test_print_exact)
{
    /* pt__json_print writes every double so that it reads back exactly
     * (cJSON_Print gives 2.00000428900239 for 2.0000042890023906: a
     * checkpoint's host data came back one ulp off), integers as integers,
     * strings escaped, and its text parses back to the same tree. */
    const char *src = "{\"a\":2.0000042890023906,\"b\":[1,-3,0.1,1e-300,true,false,null],"
                      "\"s\":\"x\\\"y\\n\\u00e9\",\"o\":{},\"e\":[],\"big\":12345678901234}";
    cJSON *t = cJSON_Parse(src);
    ck_assert_ptr_nonnull(t);
    for (int f = 0; f < 2; f++) {
        char *text = pt__json_print(t, f == 1);
        ck_assert_ptr_nonnull(text);
        cJSON *back = cJSON_Parse(text);
        ck_assert_msg(back != NULL, "%s", text);
        ck_assert(cJSON_Compare(t, back, true));
        double a = cJSON_GetObjectItem(back, "a")->valuedouble;
        ck_assert_msg(a == 2.0000042890023906, "%.17g", a);
        ck_assert_ptr_nonnull(strstr(text, "12345678901234"));
        if (f == 0)
            ck_assert_ptr_null(strchr(text, '\n'));
        else
            ck_assert_ptr_nonnull(strstr(text, "\n\t\"a\":\t"));
        cJSON_Delete(back);
        free(text);
    }
    char *cj = cJSON_PrintUnformatted(t);
    cJSON *lossy = cJSON_Parse(cj);
    printf("print_exact: cJSON_PrintUnformatted gives %.17g for 2.0000042890023906\n",
           cJSON_GetObjectItem(lossy, "a")->valuedouble);
    cJSON_Delete(lossy);
    free(cj);
    cJSON_Delete(t);
}
END_TEST

static Suite *json_suite(void)
{
    Suite *s = suite_create("io_json");
    TCase *tc = tcase_create("json");
    tcase_add_test(tc, test_put_string);
    tcase_add_test(tc, test_put_string_matches_safetensors);
    tcase_add_test(tc, test_put_double);
    tcase_add_test(tc, test_get_int);
    tcase_add_test(tc, test_get_other_types);
    tcase_add_test(tc, test_duplicates_and_lookup);
    tcase_add_test(tc, test_print_exact);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return pt_test_run(json_suite());
}
