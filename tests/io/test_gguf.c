/* The GGUF v3 container: type tables, round trips of every metadata type
 * and tensor type with exact bytes, the typed getters, the writer's
 * refusals and durability, the committed malformed corpus, and a
 * truncation sweep. */
#include "testutil.h"
#include "testfs.h"

#include "core/core.h"
#include "io/fileio.h"
#include "io/gguf.h"

#include <dirent.h>
#include <math.h>
#include <unistd.h>

static char *read_all(const char *path, size_t *len)
{
    char *buf = NULL;
    int st = pt__read_file(&buf, len, path, (size_t)1 << 30);
    ck_assert_msg(st == PT_OK, "reading %s: %s", path, pt_last_error());
    return buf;
}

static int count_dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

static uint16_t u16_at(const void *p, size_t i)
{
    const uint8_t *b = (const uint8_t *)p + 2 * i;
    return (uint16_t)(b[0] | b[1] << 8);
}

static uint64_t u64_at(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

/* ---- type tables ------------------------------------------------------------ */

START_TEST(test_type_tables)
{
    /* ggml.h numbers, ggml-common.h block sizes */
    static const struct { int type; const char *name; uint64_t be, bb; } known[] = {
        {0, "F32", 1, 4},        {1, "F16", 1, 2},        {2, "Q4_0", 32, 18},
        {3, "Q4_1", 32, 20},     {6, "Q5_0", 32, 22},     {7, "Q5_1", 32, 24},
        {8, "Q8_0", 32, 34},     {9, "Q8_1", 32, 36},     {10, "Q2_K", 256, 84},
        {11, "Q3_K", 256, 110},  {12, "Q4_K", 256, 144},  {13, "Q5_K", 256, 176},
        {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292},  {16, "IQ2_XXS", 256, 66},
        {17, "IQ2_XS", 256, 74}, {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
        {20, "IQ4_NL", 32, 18},  {21, "IQ3_S", 256, 110}, {22, "IQ2_S", 256, 82},
        {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},       {25, "I16", 1, 2},
        {26, "I32", 1, 4},       {27, "I64", 1, 8},       {28, "F64", 1, 8},
        {29, "IQ1_M", 256, 56},  {30, "BF16", 1, 2},      {34, "TQ1_0", 256, 54},
        {35, "TQ2_0", 256, 66},  {39, "MXFP4", 32, 17},
    };
    int n_known = 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        uint64_t be = 0, bb = 0;
        ck_assert(pt__ggml_type_block(known[i].type, &be, &bb));
        ck_assert_str_eq(pt__ggml_type_name(known[i].type), known[i].name);
        ck_assert_uint_eq(be, known[i].be);
        ck_assert_uint_eq(bb, known[i].bb);
    }
    for (int t = -1; t <= PT_GGML_TYPE_END + 1; t++)
        n_known += pt__ggml_type_block(t, NULL, NULL);
    ck_assert_int_eq(n_known, (int)(sizeof known / sizeof known[0]));
    /* removed numbers: 4, 5 (Q4_2, Q4_3), 31..33, 36..38 (repacked layouts) */
    static const int removed[] = {4, 5, 31, 32, 33, 36, 37, 38, 40, -1};
    for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++) {
        ck_assert(!pt__ggml_type_block(removed[i], NULL, NULL));
        ck_assert_ptr_null(pt__ggml_type_name(removed[i]));
    }
    ck_assert(pt__ggml_type_is_float(PT_GGML_BF16) && !pt__ggml_type_is_float(PT_GGML_F64));
    static const char *gnames[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                   "bool", "string", "array", "uint64", "int64", "float64"};
    static const size_t gsizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    for (int t = 0; t < PT_GGUF_TYPE_COUNT; t++) {
        ck_assert_str_eq(pt__gguf_type_name(t), gnames[t]);
        ck_assert_uint_eq(pt__gguf_type_size(t), gsizes[t]);
    }
    ck_assert_ptr_null(pt__gguf_type_name(13));
    ck_assert_uint_eq(pt__gguf_type_size(13), 0);
}
END_TEST

/* ---- round trip ------------------------------------------------------------- */

/* Values that test F32 -> F16 / BF16 rounding (numpy astype agrees). */
static const float round_src[8] = {
    1.0f,
    1.0f + 0x1p-11f,       /* F16 tie: even 0x3C00; BF16 exact-ish: 0x3F80 */
    1.0f + 3 * 0x1p-11f,   /* F16 tie: even 0x3C02 */
    0.1f,                  /* F16 0x2E66, BF16 0x3DCD */
    65520.0f,              /* F16 overflows to inf 0x7C00 */
    0x1p-25f,              /* F16 subnormal tie to 0 */
    -2.0f,
    1.0f + 0x1p-8f,        /* BF16 tie: even 0x3F80 */
};
static const uint16_t round_f16[8] = {0x3C00, 0x3C00, 0x3C02, 0x2E66, 0x7C00, 0x0000, 0xC000, 0x3C04};
static const uint16_t round_bf16[8] = {0x3F80, 0x3F80, 0x3F80, 0x3DCD, 0x4780, 0x3300, 0xC000, 0x3F80};

static const char *const arr_strs[3] = {"", "a\0b", "\xff\xfe tok"};
static const size_t arr_lens[3] = {0, 3, 7};

static void build_full(pt_gguf_writer *w, const float *f32, const uint8_t *q4)
{
    ck_assert_ok(pt__gguf_set_str(w, "general.architecture", "llama"));
    ck_assert_ok(pt__gguf_set_u8(w, "k.u8", 200));
    ck_assert_ok(pt__gguf_set_u32(w, "k.u32", 4000000000u));
    ck_assert_ok(pt__gguf_set_i32(w, "k.i32", -123456));
    ck_assert_ok(pt__gguf_set_u64(w, "k.u64", UINT64_MAX));
    ck_assert_ok(pt__gguf_set_f32(w, "k.f32", 1e-5f));
    ck_assert_ok(pt__gguf_set_bool(w, "k.bool", true));
    ck_assert_ok(pt__gguf_set_str_n(w, "k.bytes", "x\0\xff", 3));
    ck_assert_ok(pt__gguf_set_str(w, "k.\xc3\xa9", ""));
    /* arrays of every element type but string/array */
    uint8_t a_u8[2] = {0, 255};
    int8_t a_i8[2] = {-128, 127};
    uint16_t a_u16[2] = {1, 65535};
    int16_t a_i16[2] = {-32768, 7};
    uint32_t a_u32[2] = {0, 0xdeadbeef};
    int32_t a_i32[3] = {-1, 0, INT32_MAX};
    float a_f32[2] = {-0.0f, 3.5f};
    uint8_t a_bool[3] = {1, 0, 1};
    uint64_t a_u64[1] = {0x0102030405060708ull};
    int64_t a_i64[2] = {INT64_MIN, 5};
    double a_f64[2] = {0.1, -1e300};
    ck_assert_ok(pt__gguf_set_arr(w, "a.u8", PT_GGUF_UINT8, a_u8, 2));
    ck_assert_ok(pt__gguf_set_arr(w, "a.i8", PT_GGUF_INT8, a_i8, 2));
    ck_assert_ok(pt__gguf_set_arr(w, "a.u16", PT_GGUF_UINT16, a_u16, 2));
    ck_assert_ok(pt__gguf_set_arr(w, "a.i16", PT_GGUF_INT16, a_i16, 2));
    ck_assert_ok(pt__gguf_set_arr(w, "a.u32", PT_GGUF_UINT32, a_u32, 2));
    ck_assert_ok(pt__gguf_set_arr(w, "a.i32", PT_GGUF_INT32, a_i32, 3));
    ck_assert_ok(pt__gguf_set_arr(w, "a.f32", PT_GGUF_FLOAT32, a_f32, 2));
    ck_assert_ok(pt__gguf_set_arr(w, "a.bool", PT_GGUF_BOOL, a_bool, 3));
    ck_assert_ok(pt__gguf_set_arr(w, "a.u64", PT_GGUF_UINT64, a_u64, 1));
    ck_assert_ok(pt__gguf_set_arr(w, "a.i64", PT_GGUF_INT64, a_i64, 2));
    ck_assert_ok(pt__gguf_set_arr(w, "a.f64", PT_GGUF_FLOAT64, a_f64, 2));
    ck_assert_ok(pt__gguf_set_arr(w, "a.empty", PT_GGUF_INT32, NULL, 0));
    ck_assert_ok(pt__gguf_set_arr_str(w, "a.str", arr_strs, arr_lens, 3));
    const char *plain[2] = {"<s>", "</s>"};
    ck_assert_ok(pt__gguf_set_arr_str(w, "a.plain", plain, NULL, 2));
    /* tensors: ne[0] fastest */
    uint64_t ne3[1] = {3}, ne8[1] = {8}, ne24[2] = {4, 2}, neq[2] = {32, 2};
    ck_assert_ok(pt__gguf_add_tensor_f32(w, "t.f32", 1, ne3, PT_GGML_F32, f32));
    ck_assert_ok(pt__gguf_add_tensor_f32(w, "t.f16", 1, ne8, PT_GGML_F16, round_src));
    ck_assert_ok(pt__gguf_add_tensor_f32(w, "t.bf16", 1, ne8, PT_GGML_BF16, round_src));
    ck_assert_ok(pt__gguf_add_tensor_f32(w, "t.2d", 2, ne24, PT_GGML_F32, round_src));
    ck_assert_ok(pt__gguf_add_tensor_raw(w, "t.q8", 2, neq, PT_GGML_Q8_0, q4, 68));
}

static void check_kv(const pt_gguf *g)
{
    ck_assert_uint_eq(pt__gguf_version(g), 3);
    ck_assert_uint_eq(pt__gguf_alignment(g), 32);
    ck_assert_uint_eq(pt__gguf_kv_count(g), 23);
    /* insertion order */
    ck_assert_str_eq(pt__gguf_kv_at(g, 0)->key, "general.architecture");
    ck_assert_str_eq(pt__gguf_kv_at(g, 8)->key, "k.\xc3\xa9");
    ck_assert_str_eq(pt__gguf_kv_at(g, 22)->key, "a.plain");
    ck_assert_ptr_null(pt__gguf_kv_at(g, 23));
    const pt_gguf_kv *kv = pt__gguf_find_kv(g, "k.u8");
    ck_assert_int_eq(kv->type, PT_GGUF_UINT8);
    ck_assert_uint_eq(*(const uint8_t *)kv->data, 200);
    kv = pt__gguf_find_kv(g, "k.i32");
    ck_assert_int_eq(kv->type, PT_GGUF_INT32);
    ck_assert_int_eq(*(const int32_t *)kv->data, -123456);
    kv = pt__gguf_find_kv(g, "k.u64");
    ck_assert_int_eq(kv->type, PT_GGUF_UINT64);
    ck_assert(*(const uint64_t *)kv->data == UINT64_MAX);
    kv = pt__gguf_find_kv(g, "k.f32");
    ck_assert_int_eq(kv->type, PT_GGUF_FLOAT32);
    ck_assert(*(const float *)kv->data == 1e-5f);
    kv = pt__gguf_find_kv(g, "k.bool");
    ck_assert_int_eq(kv->type, PT_GGUF_BOOL);
    ck_assert_uint_eq(*(const uint8_t *)kv->data, 1);
    pt_gguf_str s;
    ck_assert_ok(pt__gguf_get_str(g, "k.bytes", &s));
    ck_assert_uint_eq(s.len, 3);
    ck_assert(memcmp(s.ptr, "x\0\xff", 3) == 0);
    ck_assert_ok(pt__gguf_get_str(g, "k.\xc3\xa9", &s));
    ck_assert_uint_eq(s.len, 0);
    ck_assert_ok(pt__gguf_get_str(g, "general.architecture", &s));
    ck_assert(s.len == 5 && memcmp(s.ptr, "llama", 5) == 0);
    const void *d;
    uint64_t n;
    ck_assert_ok(pt__gguf_get_arr(g, "a.i8", PT_GGUF_INT8, &d, &n));
    ck_assert(n == 2 && ((const int8_t *)d)[0] == -128 && ((const int8_t *)d)[1] == 127);
    ck_assert_ok(pt__gguf_get_arr(g, "a.u16", PT_GGUF_UINT16, &d, &n));
    ck_assert(n == 2 && ((const uint16_t *)d)[1] == 65535);
    ck_assert_ok(pt__gguf_get_arr(g, "a.i16", PT_GGUF_INT16, &d, &n));
    ck_assert(n == 2 && ((const int16_t *)d)[0] == -32768 && ((const int16_t *)d)[1] == 7);
    ck_assert_ok(pt__gguf_get_arr(g, "a.u32", PT_GGUF_UINT32, &d, &n));
    ck_assert(n == 2 && ((const uint32_t *)d)[1] == 0xdeadbeef);
    ck_assert_ok(pt__gguf_get_arr(g, "a.i32", PT_GGUF_INT32, &d, &n));
    ck_assert(n == 3 && ((const int32_t *)d)[0] == -1 && ((const int32_t *)d)[2] == INT32_MAX);
    ck_assert_ok(pt__gguf_get_arr(g, "a.f32", PT_GGUF_FLOAT32, &d, &n));
    ck_assert(n == 2 && signbit(((const float *)d)[0]) && ((const float *)d)[1] == 3.5f);
    ck_assert_ok(pt__gguf_get_arr(g, "a.bool", PT_GGUF_BOOL, &d, &n));
    ck_assert(n == 3 && memcmp(d, "\1\0\1", 3) == 0);
    ck_assert_ok(pt__gguf_get_arr(g, "a.u8", PT_GGUF_UINT8, &d, &n));
    ck_assert(n == 2 && memcmp(d, "\0\xff", 2) == 0);
    ck_assert_ok(pt__gguf_get_arr(g, "a.u64", PT_GGUF_UINT64, &d, &n));
    ck_assert(n == 1 && ((const uint64_t *)d)[0] == 0x0102030405060708ull);
    ck_assert_ok(pt__gguf_get_arr(g, "a.i64", PT_GGUF_INT64, &d, &n));
    ck_assert(n == 2 && ((const int64_t *)d)[0] == INT64_MIN && ((const int64_t *)d)[1] == 5);
    ck_assert_ok(pt__gguf_get_arr(g, "a.f64", PT_GGUF_FLOAT64, &d, &n));
    ck_assert(n == 2 && ((const double *)d)[0] == 0.1 && ((const double *)d)[1] == -1e300);
    ck_assert_ok(pt__gguf_get_arr(g, "a.empty", PT_GGUF_INT32, &d, &n));
    ck_assert_uint_eq(n, 0);
    ck_assert_ok(pt__gguf_get_arr(g, "a.str", PT_GGUF_STRING, &d, &n));
    ck_assert_uint_eq(n, 3);
    const pt_gguf_str *ss = d;
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(ss[i].len, arr_lens[i]);
        ck_assert(memcmp(ss[i].ptr, arr_strs[i], arr_lens[i]) == 0);
    }
    ck_assert_ok(pt__gguf_get_arr(g, "a.plain", PT_GGUF_STRING, &d, &n));
    ss = d;
    ck_assert(n == 2 && ss[1].len == 4 && memcmp(ss[1].ptr, "</s>", 4) == 0);
}

static void check_tensors(const pt_gguf *g, const float *f32, const uint8_t *q8)
{
    ck_assert_uint_eq(pt__gguf_tensor_count(g), 5);
    /* offsets: 12 bytes -> 32, 16 -> 64, 16 -> 96, 32 -> 128, 68 */
    static const uint64_t offsets[5] = {0, 32, 64, 96, 128};
    static const uint64_t nbytes[5] = {12, 16, 16, 32, 68};
    static const char *names[5] = {"t.f32", "t.f16", "t.bf16", "t.2d", "t.q8"};
    ck_assert_uint_eq(pt__gguf_data_offset(g) % 32, 0);
    for (int i = 0; i < 5; i++) {
        const pt_gguf_tensor *t = pt__gguf_tensor_at(g, (size_t)i);
        ck_assert_str_eq(t->name, names[i]);
        ck_assert_ptr_eq(pt__gguf_find_tensor(g, names[i]), t);
        ck_assert_uint_eq(t->offset, offsets[i]);
        ck_assert_uint_eq(t->nbytes, nbytes[i]);
    }
    float out[8];
    const pt_gguf_tensor *t = pt__gguf_find_tensor(g, "t.f32");
    ck_assert(t->ndim == 1 && t->ne[0] == 3 && t->ne[1] == 1 && t->ne[3] == 1 && t->numel == 3);
    ck_assert_ok(pt__gguf_read_f32(t, out, 3));
    ck_assert(memcmp(out, f32, 12) == 0);
    t = pt__gguf_find_tensor(g, "t.f16");
    ck_assert_int_eq(t->type, PT_GGML_F16);
    for (int i = 0; i < 8; i++)
        ck_assert_uint_eq(u16_at(t->data, (size_t)i), round_f16[i]);
    ck_assert_ok(pt__gguf_read_f32(t, out, 8));
    ck_assert(out[0] == 1.0f && out[2] == 1.0f + 2 * 0x1p-10f && out[3] == 0.0999755859375f);
    ck_assert(isinf(out[4]) && out[5] == 0.0f && out[6] == -2.0f);
    t = pt__gguf_find_tensor(g, "t.bf16");
    ck_assert_int_eq(t->type, PT_GGML_BF16);
    for (int i = 0; i < 8; i++)
        ck_assert_uint_eq(u16_at(t->data, (size_t)i), round_bf16[i]);
    ck_assert_ok(pt__gguf_read_f32(t, out, 8));
    ck_assert(out[3] == 0.10009765625f && out[4] == 65536.0f && out[5] == 0x1p-25f);
    t = pt__gguf_find_tensor(g, "t.2d");
    ck_assert(t->ndim == 2 && t->ne[0] == 4 && t->ne[1] == 2 && t->numel == 8);
    ck_assert_ok(pt__gguf_read_f32(t, out, 8));
    ck_assert(memcmp(out, round_src, 32) == 0);
    t = pt__gguf_find_tensor(g, "t.q8");
    ck_assert(t->type == PT_GGML_Q8_0 && t->numel == 64);
    ck_assert(memcmp(t->data, q8, 68) == 0);
    ck_assert_status(pt__gguf_read_f32(t, out, 64), PT_EUNSUPPORTED,
                     "tensor t.q8 has type Q8_0: quantised GGUF tensors cannot be trained");
    ck_assert_status(pt__gguf_read_f32(pt__gguf_find_tensor(g, "t.f32"), out, 4), PT_ESHAPE,
                     "has 3 elements, the caller expects 4");
    ck_assert_ptr_null(pt__gguf_find_tensor(g, "nope"));
    ck_assert_ptr_null(pt__gguf_tensor_at(g, 5));
}

START_TEST(test_round_trip)
{
    char *dir = pt_test_tmpdir("pt_gguf_");
    char path[4200];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    float f32[3] = {1.5f, -0.0f, 3.4028235e38f};
    uint8_t q8[68];
    for (int i = 0; i < 68; i++)
        q8[i] = (uint8_t)(i * 37);
    pt_gguf_writer *w;
    ck_assert_ok(pt__gguf_writer_new(&w));
    build_full(w, f32, q8);
    ck_assert_ok(pt__gguf_write(w, path));
    /* written twice gives the same bytes */
    char path2[4200];
    snprintf(path2, sizeof path2, "%s/m2.gguf", dir);
    ck_assert_ok(pt__gguf_write(w, path2));
    pt__gguf_writer_free(w);
    ck_assert_int_eq(count_dir_entries(dir), 2); /* no temporary left */
    size_t len, len2;
    char *bytes = read_all(path, &len);
    char *bytes2 = read_all(path2, &len2);
    ck_assert(len == len2 && memcmp(bytes, bytes2, len) == 0);
    /* header: magic, version 3, 5 tensors, 23 pairs, first key */
    ck_assert(memcmp(bytes, "GGUF\3\0\0\0", 8) == 0);
    ck_assert_uint_eq(u64_at((const uint8_t *)bytes + 8), 5);
    ck_assert_uint_eq(u64_at((const uint8_t *)bytes + 16), 23);
    ck_assert_uint_eq(u64_at((const uint8_t *)bytes + 24), 20);
    ck_assert(memcmp(bytes + 32, "general.architecture\x08\0\0\0\x05\0\0\0\0\0\0\0llama", 33) == 0);
    pt_gguf *g;
    ck_assert_ok(pt__gguf_open(&g, path));
    ck_assert_str_eq(pt__gguf_path(g), path);
    /* the data section ends with the last tensor padded to 32 */
    ck_assert_uint_eq(len, pt__gguf_data_offset(g) + 128 + 96);
    check_kv(g);
    check_tensors(g, f32, q8);
    for (size_t i = 0; i < pt__gguf_tensor_count(g); i++)
        ck_assert_uint_eq((uintptr_t)pt__gguf_tensor_at(g, i)->data % 32, 0); /* mmap is aligned */
    pt__gguf_close(g);
    /* the same bytes from memory */
    ck_assert_ok(pt__gguf_open_memory(&g, bytes, len));
    ck_assert_ptr_null(pt__gguf_path(g));
    check_kv(g);
    check_tensors(g, f32, q8);
    pt__gguf_close(g);
    free(bytes);
    free(bytes2);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

/* ---- typed getters ------------------------------------------------------------ */

START_TEST(test_getters)
{
    char *dir = pt_test_tmpdir("pt_gguf_");
    char path[4200];
    snprintf(path, sizeof path, "%s/g.gguf", dir);
    pt_gguf_writer *w;
    ck_assert_ok(pt__gguf_writer_new(&w));
    ck_assert_ok(pt__gguf_set_u8(w, "u8", 255));
    ck_assert_ok(pt__gguf_set_i32(w, "neg", -5));
    ck_assert_ok(pt__gguf_set_i32(w, "i32", 77));
    ck_assert_ok(pt__gguf_set_u32(w, "u32max", UINT32_MAX));
    ck_assert_ok(pt__gguf_set_u64(w, "big", (uint64_t)1 << 40));
    ck_assert_ok(pt__gguf_set_u64(w, "huge", UINT64_MAX));
    ck_assert_ok(pt__gguf_set_f32(w, "eps", 1e-6f));
    ck_assert_ok(pt__gguf_set_bool(w, "flag", false));
    ck_assert_ok(pt__gguf_set_str(w, "name", "x"));
    int64_t i64v[2] = {INT64_MIN, INT64_MAX};
    ck_assert_ok(pt__gguf_set_arr(w, "arr", PT_GGUF_INT64, i64v, 2));
    ck_assert_ok(pt__gguf_write(w, path));
    pt__gguf_writer_free(w);
    pt_gguf *g;
    ck_assert_ok(pt__gguf_open(&g, path));
    uint32_t u = 0;
    int64_t i = 0;
    uint64_t u64 = 0;
    float f = 0;
    bool b = true;
    pt_gguf_str s;
    const void *d;
    uint64_t n;
    /* any integer type whose value fits */
    ck_assert_ok(pt__gguf_get_u32(g, "u8", &u));
    ck_assert_uint_eq(u, 255);
    ck_assert_ok(pt__gguf_get_u32(g, "i32", &u));
    ck_assert_uint_eq(u, 77);
    ck_assert_ok(pt__gguf_get_u32(g, "u32max", &u));
    ck_assert_uint_eq(u, UINT32_MAX);
    ck_assert_ok(pt__gguf_get_i64(g, "neg", &i));
    ck_assert_int_eq(i, -5);
    ck_assert_ok(pt__gguf_get_i64(g, "big", &i));
    ck_assert_int_eq(i, (int64_t)1 << 40);
    ck_assert_ok(pt__gguf_get_u64(g, "huge", &u64));
    ck_assert(u64 == UINT64_MAX);
    /* range */
    u = 9;
    ck_assert_status(pt__gguf_get_u32(g, "neg", &u), PT_ERANGE, "neg: value -5 (int32) is out of range for uint32");
    ck_assert_uint_eq(u, 9);
    ck_assert_status(pt__gguf_get_u32(g, "big", &u), PT_ERANGE, "big: value 1099511627776 (uint64) is out of range for uint32");
    ck_assert_status(pt__gguf_get_i64(g, "huge", &i), PT_ERANGE, "out of range for int64");
    ck_assert_status(pt__gguf_get_u64(g, "neg", &u64), PT_ERANGE, "out of range for uint64");
    /* wrong type */
    ck_assert_status(pt__gguf_get_u32(g, "name", &u), PT_EFORMAT, "name: expected uint32, found string");
    ck_assert_status(pt__gguf_get_u32(g, "eps", &u), PT_EFORMAT, "eps: expected uint32, found float32");
    ck_assert_status(pt__gguf_get_u32(g, "flag", &u), PT_EFORMAT, "expected uint32, found bool");
    ck_assert_status(pt__gguf_get_i64(g, "arr", &i), PT_EFORMAT, "arr: expected int64, found array of int64");
    ck_assert_status(pt__gguf_get_f32(g, "i32", &f), PT_EFORMAT, "i32: expected float32, found int32");
    ck_assert_status(pt__gguf_get_bool(g, "u8", &b), PT_EFORMAT, "u8: expected bool, found uint8");
    ck_assert_status(pt__gguf_get_str(g, "u8", &s), PT_EFORMAT, "u8: expected string, found uint8");
    ck_assert_status(pt__gguf_get_arr(g, "arr", PT_GGUF_INT32, &d, &n), PT_EFORMAT,
                     "arr: expected array of int32, found array of int64");
    ck_assert_status(pt__gguf_get_arr(g, "name", PT_GGUF_STRING, &d, &n), PT_EFORMAT,
                     "name: expected array of string, found string");
    ck_assert_status(pt__gguf_get_arr(g, "arr", PT_GGUF_ARRAY, &d, &n), PT_EINVAL, "elem_type");
    /* missing */
    ck_assert_status(pt__gguf_get_u32(g, "llama.block_count", &u), PT_ENOTFOUND, "llama.block_count: missing");
    ck_assert_status(pt__gguf_get_f32(g, "nope", &f), PT_ENOTFOUND, "nope: missing");
    ck_assert_status(pt__gguf_get_str(g, "nope", &s), PT_ENOTFOUND, "nope: missing");
    ck_assert_status(pt__gguf_get_arr(g, "nope", PT_GGUF_INT64, &d, &n), PT_ENOTFOUND, "nope: missing");
    ck_assert_status(pt__gguf_get_u32(NULL, "u8", &u), PT_EINVAL, NULL);
    ck_assert_status(pt__gguf_get_u32(g, NULL, &u), PT_EINVAL, NULL);
    ck_assert_status(pt__gguf_get_u32(g, "u8", NULL), PT_EINVAL, NULL);
    ck_assert_ptr_null(pt__gguf_find_kv(g, NULL));
    ck_assert_ptr_null(pt__gguf_find_kv(NULL, "u8"));
    /* right types */
    ck_assert_ok(pt__gguf_get_f32(g, "eps", &f));
    ck_assert(f == 1e-6f);
    ck_assert_ok(pt__gguf_get_bool(g, "flag", &b));
    ck_assert(!b);
    ck_assert_ok(pt__gguf_get_arr(g, "arr", PT_GGUF_INT64, &d, &n));
    ck_assert(n == 2 && ((const int64_t *)d)[0] == INT64_MIN);
    pt__gguf_close(g);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

/* The generator's valid files: version 2, alignment 64 with FLOAT64 through
 * get_f32, a quantised tensor, a header-only file. */
START_TEST(test_valid_corpus)
{
    char path[4096];
    pt_gguf *g;
    float out[8];
    snprintf(path, sizeof path, "%s/io/gguf_valid/version2.gguf", PT_TEST_SRCDIR);
    ck_assert_ok(pt__gguf_open(&g, path));
    ck_assert_uint_eq(pt__gguf_version(g), 2);
    ck_assert_ok(pt__gguf_read_f32(pt__gguf_find_tensor(g, "w"), out, 8));
    ck_assert(out[0] == 0.0f && out[7] == 7.0f);
    pt__gguf_close(g);

    snprintf(path, sizeof path, "%s/io/gguf_valid/align64.gguf", PT_TEST_SRCDIR);
    ck_assert_ok(pt__gguf_open(&g, path));
    ck_assert_uint_eq(pt__gguf_alignment(g), 64);
    ck_assert_uint_eq(pt__gguf_data_offset(g) % 64, 0);
    ck_assert_ok(pt__gguf_get_f32(g, "f", &out[0]));
    ck_assert(out[0] == 0.5f);
    ck_assert_ok(pt__gguf_read_f32(pt__gguf_find_tensor(g, "a"), out, 4));
    ck_assert(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0x1p-24f && isinf(out[3]));
    const pt_gguf_tensor *b = pt__gguf_find_tensor(g, "b");
    ck_assert(b->offset == 64 && b->ndim == 2 && b->numel == 4);
    ck_assert_ok(pt__gguf_read_f32(b, out, 4));
    ck_assert(out[0] == 1.0f && out[1] == -1.0f && out[2] == 2.0f && out[3] == 0.0f);
    pt__gguf_close(g);

    snprintf(path, sizeof path, "%s/io/gguf_valid/quantised.gguf", PT_TEST_SRCDIR);
    ck_assert_ok(pt__gguf_open(&g, path));
    const pt_gguf_tensor *q = pt__gguf_find_tensor(g, "blk.0.ffn_down.weight");
    ck_assert(q->type == PT_GGML_Q4_K && q->numel == 256 && q->nbytes == 144);
    ck_assert_status(pt__gguf_read_f32(q, out, 256), PT_EUNSUPPORTED,
                     "tensor blk.0.ffn_down.weight has type Q4_K: quantised GGUF tensors cannot be "
                     "trained; convert the model to F32, F16 or BF16");
    ck_assert_ok(pt__gguf_read_f32(pt__gguf_find_tensor(g, "n"), out, 8));
    ck_assert(out[3] == 3.0f);
    pt__gguf_close(g);

    snprintf(path, sizeof path, "%s/io/gguf_valid/no_tensors.gguf", PT_TEST_SRCDIR);
    ck_assert_ok(pt__gguf_open(&g, path));
    uint32_t a;
    ck_assert_ok(pt__gguf_get_u32(g, "a", &a));
    ck_assert_uint_eq(a, 7);
    ck_assert_uint_eq(pt__gguf_tensor_count(g), 0);
    pt__gguf_close(g);
}
END_TEST

/* ---- the writer's refusals and durability --------------------------------- */

START_TEST(test_writer_invalid)
{
    pt_gguf_writer *w;
    ck_assert_ok(pt__gguf_writer_new(&w));
    float v[256] = {0};
    uint64_t ne[4] = {4, 1, 1, 1};
    ck_assert_ok(pt__gguf_set_u32(w, "a", 1));
    ck_assert_status(pt__gguf_set_u32(w, "a", 2), PT_EINVAL, "key 'a' was already added");
    ck_assert_status(pt__gguf_set_str(w, "a", "x"), PT_EINVAL, "key 'a' was already added");
    ck_assert_status(pt__gguf_set_arr(w, "a", PT_GGUF_UINT8, "x", 1), PT_EINVAL, "already added");
    ck_assert_status(pt__gguf_set_u32(w, "", 2), PT_EINVAL, "key is empty");
    ck_assert_status(pt__gguf_set_u32(w, NULL, 2), PT_EINVAL, "key is NULL");
    ck_assert_status(pt__gguf_set_u32(w, "bad\xff", 2), PT_EINVAL, "not valid UTF-8");
    ck_assert_status(pt__gguf_set_str(w, "s", NULL), PT_EINVAL, "v is NULL");
    ck_assert_status(pt__gguf_set_arr(w, "x", PT_GGUF_STRING, v, 1), PT_EINVAL, "not a numeric or bool type");
    ck_assert_status(pt__gguf_set_arr(w, "x", PT_GGUF_ARRAY, v, 1), PT_EINVAL, "not a numeric or bool type");
    ck_assert_status(pt__gguf_set_arr(w, "x", PT_GGUF_UINT8, NULL, 1), PT_EINVAL, "data is NULL");
    ck_assert_status(pt__gguf_set_arr(w, "x", PT_GGUF_BOOL, "\2", 1), PT_EINVAL, "not 0 or 1");
    ck_assert_status(pt__gguf_set_arr(w, "x", PT_GGUF_UINT8, v, PT_GGUF_MAX_ARRAY + 1), PT_ERANGE, "limit");
    const char *strs[2] = {"a", NULL};
    ck_assert_status(pt__gguf_set_arr_str(w, "x", strs, NULL, 2), PT_EINVAL, "string 1 is NULL");
    ck_assert_status(pt__gguf_set_u32(w, "general.alignment", 3), PT_EINVAL, "not a nonzero power of two");
    ck_assert_status(pt__gguf_set_u64(w, "general.alignment", 32), PT_EINVAL, "pt__gguf_set_u32");
    ck_assert_status(pt__gguf_set_str(w, "general.alignment", "32"), PT_EINVAL, "pt__gguf_set_u32");
    ck_assert_ok(pt__gguf_add_tensor_f32(w, "t", 1, ne, PT_GGML_F32, v));
    ck_assert_status(pt__gguf_add_tensor_f32(w, "t", 1, ne, PT_GGML_F16, v), PT_EINVAL,
                     "tensor 't' was already added");
    ck_assert_status(pt__gguf_add_tensor_raw(w, "t", 1, ne, PT_GGML_F32, v, 16), PT_EINVAL, "already added");
    ck_assert_status(pt__gguf_add_tensor_f32(w, "q", 1, ne, PT_GGML_Q4_K, v), PT_EINVAL,
                     "type Q4_K cannot be written from F32");
    ck_assert_status(pt__gguf_add_tensor_f32(w, "q", 1, ne, 31, v), PT_EINVAL, "type unknown");
    ck_assert_status(pt__gguf_add_tensor_f32(w, "q", 0, ne, PT_GGML_F32, v), PT_EINVAL, "ndim 0");
    ck_assert_status(pt__gguf_add_tensor_f32(w, "q", 5, ne, PT_GGML_F32, v), PT_EINVAL, "ndim 5");
    uint64_t ne0[2] = {4, 0};
    ck_assert_status(pt__gguf_add_tensor_f32(w, "q", 2, ne0, PT_GGML_F32, v), PT_ESHAPE, "ne[1] = 0");
    uint64_t neov[3] = {(uint64_t)1 << 32, (uint64_t)1 << 32, 16};
    ck_assert_status(pt__gguf_add_tensor_f32(w, "q", 3, neov, PT_GGML_F32, v), PT_ESHAPE, "overflow");
    ck_assert_status(pt__gguf_add_tensor_f32(w, "q", 1, ne, PT_GGML_F32, NULL), PT_EINVAL, "src is NULL");
    ck_assert_status(pt__gguf_add_tensor_f32(w, "", 1, ne, PT_GGML_F32, v), PT_EINVAL, "has 0 bytes");
    char longname[80];
    memset(longname, 'n', 64);
    longname[64] = '\0';
    ck_assert_status(pt__gguf_add_tensor_f32(w, longname, 1, ne, PT_GGML_F32, v), PT_EINVAL,
                     "has 64 bytes (1 to 63: llama.cpp's limit)");
    longname[63] = '\0';
    ck_assert_ok(pt__gguf_add_tensor_f32(w, longname, 1, ne, PT_GGML_F32, v));
    ck_assert_status(pt__gguf_add_tensor_raw(w, "r", 1, ne, PT_GGML_F32, v, 15), PT_ESHAPE,
                     "15 bytes given, its shape and type F32 need 16");
    uint64_t neq[1] = {100};
    ck_assert_status(pt__gguf_add_tensor_raw(w, "r", 1, neq, PT_GGML_Q4_K, v, 144), PT_ESHAPE,
                     "ne[0] = 100 is not a multiple of the Q4_K block size 256");
    ck_assert_status(pt__gguf_add_tensor_raw(w, "r", 1, ne, PT_GGML_F32, NULL, 16), PT_EINVAL, "bytes is NULL");
    /* after all the refusals: the name "r" is still free */
    ck_assert_ok(pt__gguf_add_tensor_raw(w, "r", 1, ne, PT_GGML_F32, v, 16));
    ck_assert_status(pt__gguf_write(w, NULL), PT_EINVAL, "path is NULL");
    ck_assert_status(pt__gguf_write(NULL, "x"), PT_EINVAL, "w is NULL");
    pt__gguf_writer_free(w);
    pt__gguf_writer_free(NULL);
    ck_assert_status(pt__gguf_writer_new(NULL), PT_EINVAL, "out is NULL");
}
END_TEST

START_TEST(test_writer_alignment)
{
    /* general.alignment set by the caller is written and used */
    char *dir = pt_test_tmpdir("pt_gguf_");
    char path[4200];
    snprintf(path, sizeof path, "%s/a.gguf", dir);
    pt_gguf_writer *w;
    ck_assert_ok(pt__gguf_writer_new(&w));
    ck_assert_ok(pt__gguf_set_u32(w, "general.alignment", 128));
    float v[3] = {1, 2, 3};
    uint64_t ne[1] = {3};
    ck_assert_ok(pt__gguf_add_tensor_f32(w, "a", 1, ne, PT_GGML_F32, v));
    ck_assert_ok(pt__gguf_add_tensor_f32(w, "b", 1, ne, PT_GGML_BF16, v));
    ck_assert_ok(pt__gguf_write(w, path));
    pt__gguf_writer_free(w);
    pt_gguf *g;
    ck_assert_ok(pt__gguf_open(&g, path));
    ck_assert_uint_eq(pt__gguf_alignment(g), 128);
    ck_assert_uint_eq(pt__gguf_data_offset(g), 128);
    ck_assert_uint_eq(pt__gguf_find_tensor(g, "b")->offset, 128);
    float out[3];
    ck_assert_ok(pt__gguf_read_f32(pt__gguf_find_tensor(g, "b"), out, 3));
    ck_assert(out[0] == 1 && out[1] == 2 && out[2] == 3);
    pt__gguf_close(g);
    /* an empty writer: a valid header-only file */
    ck_assert_ok(pt__gguf_writer_new(&w));
    ck_assert_ok(pt__gguf_write(w, path));
    pt__gguf_writer_free(w);
    size_t len;
    char *bytes = read_all(path, &len);
    ck_assert_uint_eq(len, 32);
    ck_assert(memcmp(bytes, "GGUF\3\0\0\0", 8) == 0);
    free(bytes);
    ck_assert_ok(pt__gguf_open(&g, path));
    ck_assert_uint_eq(pt__gguf_kv_count(g) + pt__gguf_tensor_count(g), 0);
    pt__gguf_close(g);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(test_write_failure_leaves_nothing)
{
    char *dir = pt_test_tmpdir("pt_gguf_");
    char path[4200];
    pt_gguf_writer *w;
    ck_assert_ok(pt__gguf_writer_new(&w));
    float v[4] = {1, 2, 3, 4};
    uint64_t ne[1] = {4};
    ck_assert_ok(pt__gguf_set_str(w, "general.name", "x"));
    ck_assert_ok(pt__gguf_add_tensor_f32(w, "t", 1, ne, PT_GGML_F16, v));
    /* a directory that does not exist */
    snprintf(path, sizeof path, "%s/missing/m.gguf", dir);
    int st = pt__gguf_write(w, path);
    ck_assert_msg(st == PT_EIO || st == PT_ENOTFOUND, "got %s", pt_status_name(st));
    ck_assert(strstr(pt_last_error(), path) != NULL);
    ck_assert_int_eq(access(path, F_OK), -1);
    ck_assert_int_eq(count_dir_entries(dir), 0);
    /* a read-only directory (skipped when running as root, who may write anyway) */
    char ro[4200];
    snprintf(ro, sizeof ro, "%s/ro", dir);
    ck_assert_int_eq(mkdir(ro, 0555), 0);
    snprintf(path, sizeof path, "%s/m.gguf", ro);
    if (geteuid() != 0) {
        ck_assert_status(pt__gguf_write(w, path), PT_EIO, "m.gguf");
        ck_assert_int_eq(count_dir_entries(ro), 0);
    } else {
        fprintf(stderr, "SKIP read-only directory check: running as root\n");
    }
    /* a parent that is a file, not a directory (fails for root too) */
    char file[4200];
    snprintf(file, sizeof file, "%s/plain", dir);
    ck_assert_ok(pt__write_file_atomic(file, "x", 1));
    snprintf(path, sizeof path, "%s/plain/m.gguf", dir);
    ck_assert_status(pt__gguf_write(w, path), PT_EIO, "gguf ");
    ck_assert_int_eq(count_dir_entries(dir), 2);
    /* an existing file is replaced only by a complete one */
    snprintf(path, sizeof path, "%s/keep.gguf", dir);
    ck_assert_ok(pt__write_file_atomic(path, "old", 3));
    snprintf(ro, sizeof ro, "%s/keep.gguf/", dir);
    ck_assert_status(pt__gguf_write(w, ro), PT_EINVAL, "names a directory");
    size_t len;
    char *old = read_all(path, &len);
    ck_assert(len == 3 && memcmp(old, "old", 3) == 0);
    free(old);
    pt__gguf_writer_free(w);
    chmod(ro, 0755);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

/* ---- malformed corpus ---------------------------------------------------------- */

static int status_from_name(const char *name)
{
    for (int s = PT_OK; s >= PT_EINTERNAL; s--)
        if (strcmp(pt_status_name(s), name) == 0)
            return s;
    return 1;
}

START_TEST(test_malformed_corpus)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/io/gguf_malformed/EXPECTED.tsv", PT_TEST_SRCDIR);
    size_t len;
    char *tsv = read_all(path, &len);
    int checked = 0;
    char *save = NULL;
    for (char *line = strtok_r(tsv, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#')
            continue;
        char *file = line, *status = strchr(file, '\t');
        ck_assert_ptr_nonnull(status);
        *status++ = '\0';
        char *frag = strchr(status, '\t');
        ck_assert_ptr_nonnull(frag);
        *frag++ = '\0';
        int expected = status_from_name(status);
        ck_assert_msg(expected < 0, "bad status %s in EXPECTED.tsv", status);
        snprintf(path, sizeof path, "%s/io/gguf_malformed/%s", PT_TEST_SRCDIR, file);
        pt_gguf *g = (pt_gguf *)(uintptr_t)1;
        pt_clear_error();
        int st = pt__gguf_open(&g, path);
        ck_assert_msg(st == expected, "%s: got %s (%s), expected %s", file, pt_status_name(st),
                      pt_last_error(), status);
        ck_assert_ptr_null(g);
        ck_assert_msg(strstr(pt_last_error(), frag) != NULL, "%s: message '%s' lacks '%s'", file,
                      pt_last_error(), frag);
        char prefix[4200];
        snprintf(prefix, sizeof prefix, "gguf %s: ", path);
        ck_assert_msg(strncmp(pt_last_error(), prefix, strlen(prefix)) == 0,
                      "%s: message '%s' does not start with '%s'", file, pt_last_error(), prefix);
        size_t blen;
        char *bytes = read_all(path, &blen);
        ck_assert_int_eq(pt__gguf_open_memory(&g, blen ? bytes : NULL, blen), expected);
        ck_assert_ptr_null(g);
        ck_assert_msg(strstr(pt_last_error(), frag) != NULL, "%s (memory): '%s'", file, pt_last_error());
        ck_assert(strncmp(pt_last_error(), "gguf <memory>: ", 15) == 0);
        free(bytes);
        checked++;
    }
    free(tsv);
    ck_assert_int_ge(checked, 60);
    fprintf(stderr, "io: %d malformed GGUF files rejected with the expected status and message\n",
            checked);
}
END_TEST

START_TEST(test_open_errors)
{
    pt_gguf *g = (pt_gguf *)(uintptr_t)1;
    ck_assert_status(pt__gguf_open(&g, "/nonexistent/dir/x.gguf"), PT_ENOTFOUND, "/nonexistent/dir/x.gguf");
    ck_assert_ptr_null(g);
    ck_assert_status(pt__gguf_open(&g, PT_TEST_SRCDIR), PT_EIO, "not a regular file");
    ck_assert_status(pt__gguf_open(NULL, "x"), PT_EINVAL, "out is NULL");
    ck_assert_status(pt__gguf_open(&g, NULL), PT_EINVAL, "path is NULL");
    ck_assert_status(pt__gguf_open_memory(&g, NULL, 5), PT_EINVAL, "buf is NULL");
    ck_assert_status(pt__gguf_open_memory(&g, NULL, 0), PT_EFORMAT, "the magic needs 4 bytes");
    ck_assert_status(pt__gguf_read_f32(NULL, NULL, 0), PT_EINVAL, NULL);
    pt__gguf_close(NULL);
    ck_assert_uint_eq(pt__gguf_kv_count(NULL), 0);
    ck_assert_uint_eq(pt__gguf_tensor_count(NULL), 0);
    ck_assert_ptr_null(pt__gguf_find_tensor(NULL, "x"));
    ck_assert_ptr_null(pt__gguf_kv_at(NULL, 0));
}
END_TEST

/* ---- truncation sweep -------------------------------------------------------- */

/* An opened file must be self-consistent and every float tensor readable. */
static void check_consistent(const pt_gguf *g, const uint8_t *buf, size_t len)
{
    for (size_t i = 0; i < pt__gguf_kv_count(g); i++)
        ck_assert_ptr_eq(pt__gguf_find_kv(g, pt__gguf_kv_at(g, i)->key), pt__gguf_kv_at(g, i));
    for (size_t i = 0; i < pt__gguf_tensor_count(g); i++) {
        const pt_gguf_tensor *t = pt__gguf_tensor_at(g, i);
        ck_assert_ptr_eq(pt__gguf_find_tensor(g, t->name), t);
        const uint8_t *d = t->data;
        ck_assert(d >= buf + pt__gguf_data_offset(g) && d + t->nbytes <= buf + len);
        ck_assert_uint_eq(t->offset % pt__gguf_alignment(g), 0);
        if (pt__ggml_type_is_float(t->type)) {
            float *out = malloc(t->numel * sizeof *out);
            ck_assert_ok(pt__gguf_read_f32(t, out, t->numel));
            free(out);
        }
    }
}

static const char *const sweep_files[] = {"gguf_valid/version2.gguf", "gguf_valid/align64.gguf",
                                          "gguf_valid/quantised.gguf", "written"};

START_TEST(test_sweep)
{
    size_t len;
    char *orig;
    char path[4200];
    char *dir = NULL;
    if (strcmp(sweep_files[_i], "written") == 0) {
        dir = pt_test_tmpdir("pt_gguf_");
        snprintf(path, sizeof path, "%s/m.gguf", dir);
        float f32[3] = {1.5f, -0.0f, 3.0f};
        uint8_t q8[68] = {0};
        pt_gguf_writer *w;
        ck_assert_ok(pt__gguf_writer_new(&w));
        build_full(w, f32, q8);
        ck_assert_ok(pt__gguf_write(w, path));
        pt__gguf_writer_free(w);
    } else {
        snprintf(path, sizeof path, "%s/io/%s", PT_TEST_SRCDIR, sweep_files[_i]);
    }
    orig = read_all(path, &len);
    pt_gguf *g;
    /* the shortest file that loads ends with the last tensor's data (the
     * padding after it is not needed) */
    ck_assert_ok(pt__gguf_open_memory(&g, orig, len));
    size_t min_len = pt__gguf_tensor_count(g) ? 0 : len;
    for (size_t i = 0; i < pt__gguf_tensor_count(g); i++) {
        const pt_gguf_tensor *t = pt__gguf_tensor_at(g, i);
        size_t end = (size_t)(pt__gguf_data_offset(g) + t->offset + t->nbytes);
        min_len = end > min_len ? end : min_len;
    }
    pt__gguf_close(g);
    int truncated = 0;
    for (size_t cut = 0; cut <= len; cut++) {
        /* exactly `cut` bytes, so ASan sees any overread */
        uint8_t *p = malloc(cut ? cut : 1);
        memcpy(p, orig, cut);
        int st = pt__gguf_open_memory(&g, cut ? p : NULL, cut);
        if (cut < min_len) {
            ck_assert_msg(st < 0 && st != PT_EINTERNAL, "truncated at %zu gave %d", cut, st);
            ck_assert_ptr_null(g);
            ck_assert(pt_last_error()[0] != '\0');
            truncated++;
        } else {
            ck_assert_ok(st);
            check_consistent(g, p, cut);
            pt__gguf_close(g);
        }
        free(p);
    }
    /* every bit of the header flipped: rejected or consistent */
    uint8_t *buf = malloc(len);
    ck_assert_ok(pt__gguf_open_memory(&g, orig, len));
    size_t hdr_end = (size_t)pt__gguf_data_offset(g);
    pt__gguf_close(g);
    int failed = 0, loaded = 0;
    for (size_t byte = 0; byte < hdr_end; byte++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(buf, orig, len);
            buf[byte] ^= (uint8_t)(1u << bit);
            int st = pt__gguf_open_memory(&g, buf, len);
            if (st == PT_OK) {
                check_consistent(g, buf, len);
                pt__gguf_close(g);
                loaded++;
            } else {
                ck_assert_msg(st < 0 && st != PT_EINTERNAL, "flip %zu:%d gave %d", byte, bit, st);
                ck_assert_ptr_null(g);
                failed++;
            }
        }
    fprintf(stderr, "gguf sweep %s: %d truncations failed cleanly; %zu header bit flips: %d "
                    "rejected, %d loaded consistently\n", sweep_files[_i], truncated, hdr_end * 8,
            failed, loaded);
    ck_assert_int_eq(truncated, (int)min_len);
    ck_assert_int_gt(failed, 0);
    free(buf);
    free(orig);
    if (dir) {
        pt_test_rm_rf(dir);
        free(dir);
    }
}
END_TEST

static Suite *gguf_suite(void)
{
    Suite *s = suite_create("io_gguf");
    TCase *tc = tcase_create("gguf");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_type_tables);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_getters);
    tcase_add_test(tc, test_valid_corpus);
    tcase_add_test(tc, test_writer_invalid);
    tcase_add_test(tc, test_writer_alignment);
    tcase_add_test(tc, test_write_failure_leaves_nothing);
    tcase_add_test(tc, test_malformed_corpus);
    tcase_add_test(tc, test_open_errors);
    tcase_add_loop_test(tc, test_sweep, 0, (int)(sizeof sweep_files / sizeof sweep_files[0]));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return pt_test_run(gguf_suite());
}
