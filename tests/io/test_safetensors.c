/* The strict safetensors reader and the writer: conversions, round trips, the
 * real stories260K file, the committed malformed corpus, and a truncation and
 * bit-flip sweep. */
#include "testutil.h"
#include "testfs.h"

#include "core/core.h"
#include "io/fileio.h"
#include "io/safetensors.h"

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

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

START_TEST(test_dtype_table)
{
    static const char *names[] = {"F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL",
                                  "U16", "U32", "U64", "F8_E5M2", "F8_E4M3", "F8_E8M0", "C64", "F4",
                                  "F6_E2M3", "F6_E3M2"};
    static const unsigned bits[] = {32, 16, 16, 64, 64, 32, 16, 8, 8, 8, 16, 32, 64, 8, 8, 8, 64, 4, 6, 6};
    ck_assert_int_eq(PT_ST_DTYPE_COUNT, 20);
    for (int i = 0; i < PT_ST_DTYPE_COUNT; i++) {
        ck_assert_str_eq(pt__st_dtype_name(i), names[i]);
        ck_assert_int_eq(pt__st_dtype_from_name(names[i]), i);
        ck_assert_uint_eq(pt__st_dtype_bits(i), bits[i]);
    }
    ck_assert_ptr_null(pt__st_dtype_name(PT_ST_DTYPE_COUNT));
    ck_assert_ptr_null(pt__st_dtype_name(-1));
    ck_assert_int_eq(pt__st_dtype_from_name("f32"), -1);
    ck_assert_int_eq(pt__st_dtype_from_name("F32 "), -1);
    ck_assert_int_eq(pt__st_dtype_from_name(NULL), -1);
    ck_assert_uint_eq(pt__st_dtype_bits(99), 0);
}
END_TEST

START_TEST(test_convert_known)
{
    /* F16 -> F32 */
    ck_assert_float_eq(pt__f16_to_f32(0x3C00), 1.0f);
    ck_assert_float_eq(pt__f16_to_f32(0xC000), -2.0f);
    ck_assert_float_eq(pt__f16_to_f32(0x3555), 0.333251953125f);
    ck_assert_float_eq(pt__f16_to_f32(0x7BFF), 65504.0f);
    ck_assert_float_eq(pt__f16_to_f32(0x0400), 0x1p-14f);    /* smallest normal */
    ck_assert_float_eq(pt__f16_to_f32(0x0001), 0x1p-24f);    /* smallest subnormal */
    ck_assert_float_eq(pt__f16_to_f32(0x03FF), 1023 * 0x1p-24f);
    ck_assert_float_eq(pt__f16_to_f32(0x8001), -0x1p-24f);
    ck_assert_uint_eq(f32_bits(pt__f16_to_f32(0x8000)), 0x80000000u); /* -0 */
    ck_assert(isinf(pt__f16_to_f32(0x7C00)) && pt__f16_to_f32(0x7C00) > 0);
    ck_assert(isinf(pt__f16_to_f32(0xFC00)) && pt__f16_to_f32(0xFC00) < 0);
    ck_assert(isnan(pt__f16_to_f32(0x7E00)));
    ck_assert(isnan(pt__f16_to_f32(0x7C01))); /* signalling NaN stays NaN */
    /* BF16 -> F32 */
    ck_assert_float_eq(pt__bf16_to_f32(0x3F80), 1.0f);
    ck_assert_float_eq(pt__bf16_to_f32(0xC000), -2.0f);
    ck_assert_float_eq(pt__bf16_to_f32(0x3FC0), 1.5f);
    ck_assert_float_eq(pt__bf16_to_f32(0x0001), 0x1p-133f); /* smallest subnormal */
    ck_assert(isinf(pt__bf16_to_f32(0x7F80)));
    ck_assert(isnan(pt__bf16_to_f32(0x7FC0)));
    ck_assert(isnan(pt__bf16_to_f32(0xFF81)));
    /* F32 -> F16, round to nearest even */
    ck_assert_uint_eq(pt__f32_to_f16(1.0f), 0x3C00);
    ck_assert_uint_eq(pt__f32_to_f16(-2.0f), 0xC000);
    ck_assert_uint_eq(pt__f32_to_f16(65504.0f), 0x7BFF);
    ck_assert_uint_eq(pt__f32_to_f16(65519.0f), 0x7BFF);
    ck_assert_uint_eq(pt__f32_to_f16(65520.0f), 0x7C00);
    ck_assert_uint_eq(pt__f32_to_f16(1e10f), 0x7C00);
    ck_assert_uint_eq(pt__f32_to_f16(-INFINITY), 0xFC00);
    ck_assert_uint_eq(pt__f32_to_f16(0x1p-24f), 0x0001);
    ck_assert_uint_eq(pt__f32_to_f16(0x1p-25f), 0x0000);          /* tie to even: 0 */
    ck_assert_uint_eq(pt__f32_to_f16(0x1.000002p-25f), 0x0001);   /* just above the tie */
    ck_assert_uint_eq(pt__f32_to_f16(3 * 0x1p-25f), 0x0002);      /* 1.5 ulp: tie to even 2 */
    ck_assert_uint_eq(pt__f32_to_f16(1.0f + 0x1p-11f), 0x3C00);   /* tie to even */
    ck_assert_uint_eq(pt__f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
    ck_assert_uint_eq(pt__f32_to_f16(-0.0f), 0x8000);
    ck_assert_uint_eq(pt__f32_to_f16(NAN) & 0x7C00, 0x7C00);
    ck_assert_uint_ne(pt__f32_to_f16(NAN) & 0x03FF, 0);
    /* F32 -> BF16 */
    ck_assert_uint_eq(pt__f32_to_bf16(1.0f), 0x3F80);
    ck_assert_uint_eq(pt__f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);    /* tie to even */
    ck_assert_uint_eq(pt__f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);
    ck_assert_uint_eq(pt__f32_to_bf16(INFINITY), 0x7F80);
    ck_assert_uint_eq(pt__f32_to_bf16(3.4028235e38f), 0x7F80);     /* FLT_MAX rounds up to inf */
    ck_assert(isnan(pt__bf16_to_f32(pt__f32_to_bf16(NAN))));
    uint32_t snan = 0x7F800001u; /* payload only in the low bits: must not become inf */
    float fs;
    memcpy(&fs, &snan, sizeof fs);
    ck_assert(isnan(pt__bf16_to_f32(pt__f32_to_bf16(fs))));
    ck_assert(isnan(pt__f16_to_f32(pt__f32_to_f16(fs))));
}
END_TEST

START_TEST(test_convert_exhaustive)
{
    /* Every 16-bit pattern: to F32 and back is the identity (NaN stays NaN). */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = pt__f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            ck_assert_msg((h & 0x7C00) == 0x7C00 && (h & 0x3FF), "f16 %04x", h);
            ck_assert(isnan(pt__f16_to_f32(pt__f32_to_f16(f))));
        } else {
            ck_assert_msg(pt__f32_to_f16(f) == h, "f16 %04x -> %a -> %04x", h, (double)f,
                          pt__f32_to_f16(f));
        }
        float g = pt__bf16_to_f32((uint16_t)h);
        ck_assert_uint_eq(f32_bits(g), h << 16);
        if (!isnan(g))
            ck_assert_msg(pt__f32_to_bf16(g) == h, "bf16 %04x", h);
    }
}
END_TEST

START_TEST(test_convert_golden)
{
    /* numpy float16 and torch bfloat16 conversions of 4112 float32 values. */
    char path[4096];
    snprintf(path, sizeof path, "%s/io/golden/convert.bin", PT_TEST_SRCDIR);
    size_t len;
    char *buf = read_all(path, &len);
    uint32_t n;
    memcpy(&n, buf, 4);
    ck_assert_uint_eq(len, 4 + (size_t)n * 8);
    ck_assert_uint_gt(n, 4000);
    int f16_mismatch = 0, bf16_mismatch = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t fb;
        uint16_t h, b;
        memcpy(&fb, buf + 4 + 8 * (size_t)i, 4);
        memcpy(&h, buf + 8 + 8 * (size_t)i, 2);
        memcpy(&b, buf + 10 + 8 * (size_t)i, 2);
        float f;
        memcpy(&f, &fb, 4);
        if (pt__f32_to_f16(f) != h) {
            if (f16_mismatch++ < 5)
                fprintf(stderr, "f16: %08x -> %04x, numpy %04x\n", fb, pt__f32_to_f16(f), h);
        }
        if (pt__f32_to_bf16(f) != b) {
            if (bf16_mismatch++ < 5)
                fprintf(stderr, "bf16: %08x -> %04x, torch %04x\n", fb, pt__f32_to_bf16(f), b);
        }
    }
    free(buf);
    ck_assert_int_eq(f16_mismatch, 0);
    ck_assert_int_eq(bf16_mismatch, 0);
}
END_TEST

/* ---- round trip ---------------------------------------------------------- */

START_TEST(test_round_trip)
{
    char *dir = pt_test_tmpdir("pt_st_");
    char path[4096];
    snprintf(path, sizeof path, "%s/rt.safetensors", dir);

    float w_f32[6] = {1.5f, -2.25f, 0.0f, 3.0e-39f /* subnormal */, 1e30f, -0.0f};
    uint16_t w_f16[4] = {0x3C00, 0x0001, 0x7C00, 0xC000};  /* 1, 2^-24, inf, -2 */
    uint16_t w_bf16[3] = {0x3F80, 0xBFC0, 0x0001};         /* 1, -1.5, 2^-133 */
    int64_t w_i64 = -1234567890123LL;
    uint8_t w_bool[5] = {1, 0, 1, 1, 0};
    double w_f64[4] = {3.141592653589793, -1.0, 1e-300, 2.0};
    int8_t w_i8[3] = {-128, 0, 127};
    uint8_t w_f4[2] = {0xAB, 0xCD};
    pt_st_write_tensor ts[] = {
        {.name = "z.f32", .dtype = PT_ST_F32, .ndim = 2, .shape = {2, 3}, .data = w_f32},
        {.name = "b.f16", .dtype = PT_ST_F16, .ndim = 1, .shape = {4}, .data = w_f16},
        {.name = "a.bf16", .dtype = PT_ST_BF16, .ndim = 1, .shape = {3}, .data = w_bf16},
        {.name = "scalar", .dtype = PT_ST_I64, .ndim = 0, .data = &w_i64},
        {.name = "empty", .dtype = PT_ST_U8, .ndim = 2, .shape = {0, 7}, .data = NULL},
        {.name = "mask", .dtype = PT_ST_BOOL, .ndim = 1, .shape = {5}, .data = w_bool},
        {.name = "\xc3\xb1" "ame/\"q\"", .dtype = PT_ST_F64, .ndim = 2, .shape = {2, 2}, .data = w_f64},
        {.name = "i8", .dtype = PT_ST_I8, .ndim = 3, .shape = {1, 3, 1}, .data = w_i8},
        {.name = "packed", .dtype = PT_ST_F4, .ndim = 1, .shape = {4}, .data = w_f4},
    };
    size_t n = sizeof ts / sizeof ts[0];
    const char *meta[] = {"format", "pt", "note", "tab\there \"quoted\" back\\slash \xe2\x82\xac", "empty", ""};
    ck_assert_ok(pt__st_write(path, ts, n, meta, 3));
    ck_assert_int_eq(count_dir_entries(dir), 1); /* no temporary file left */
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 0777, 0644);

    pt_st_file *f = NULL;
    ck_assert_ok(pt__st_open(&f, path));
    ck_assert_uint_eq(pt__st_header_size(f) % 8, 0);
    ck_assert_uint_eq(pt__st_count(f), n);
    ck_assert_uint_eq(pt__st_data_size(f), 24 + 8 + 6 + 8 + 0 + 5 + 32 + 3 + 2);
    ck_assert_uint_eq((uint64_t)sb.st_size, 8 + pt__st_header_size(f) + pt__st_data_size(f));
    /* file order is name order (the writer sorts), bytes are identical */
    const char *prev = "";
    for (size_t i = 0; i < n; i++) {
        const pt_st_tensor *t = pt__st_tensor_at(f, i);
        ck_assert_int_lt(strcmp(prev, t->name), 0);
        prev = t->name;
        const pt_st_write_tensor *w = NULL;
        for (size_t j = 0; j < n; j++)
            if (strcmp(ts[j].name, t->name) == 0)
                w = &ts[j];
        ck_assert_ptr_nonnull(w);
        ck_assert_ptr_eq(pt__st_find(f, w->name), t);
        ck_assert_int_eq(t->dtype, w->dtype);
        ck_assert_int_eq(t->ndim, w->ndim);
        for (int d = 0; d < t->ndim; d++)
            ck_assert_int_eq(t->shape[d], w->shape[d]);
        if (t->nbytes)
            ck_assert_int_eq(memcmp(t->data, w->data, t->nbytes), 0);
    }
    ck_assert_ptr_null(pt__st_tensor_at(f, n));
    ck_assert_ptr_null(pt__st_find(f, "absent"));
    ck_assert_ptr_null(pt__st_find(f, "__metadata__"));
    const pt_st_tensor *sc = pt__st_find(f, "scalar");
    ck_assert_int_eq(sc->ndim, 0);
    ck_assert_uint_eq(sc->numel, 1);
    ck_assert_uint_eq(sc->nbytes, 8);
    const pt_st_tensor *em = pt__st_find(f, "empty");
    ck_assert_uint_eq(em->numel, 0);
    ck_assert_uint_eq(em->nbytes, 0);
    ck_assert_uint_eq(pt__st_find(f, "packed")->nbytes, 2);
    /* metadata */
    ck_assert_uint_eq(pt__st_metadata_count(f), 3);
    ck_assert_str_eq(pt__st_metadata(f, "format"), "pt");
    ck_assert_str_eq(pt__st_metadata(f, "note"), meta[3]);
    ck_assert_str_eq(pt__st_metadata(f, "empty"), "");
    ck_assert_ptr_null(pt__st_metadata(f, "absent"));
    const char *k, *v;
    ck_assert_ok(pt__st_metadata_at(f, 0, &k, &v));
    ck_assert_str_eq(k, "empty"); /* written sorted by key */
    ck_assert_status(pt__st_metadata_at(f, 3, &k, &v), PT_EINVAL, "out of range");
    /* F32 / F16 / BF16 read as float */
    float out[6];
    ck_assert_ok(pt__st_read_f32(pt__st_find(f, "z.f32"), out, 6));
    ck_assert_int_eq(memcmp(out, w_f32, sizeof out), 0);
    ck_assert_ok(pt__st_read_f32(pt__st_find(f, "b.f16"), out, 4));
    ck_assert_float_eq(out[0], 1.0f);
    ck_assert_float_eq(out[1], 0x1p-24f);
    ck_assert(isinf(out[2]));
    ck_assert_float_eq(out[3], -2.0f);
    ck_assert_ok(pt__st_read_f32(pt__st_find(f, "a.bf16"), out, 3));
    ck_assert_float_eq(out[0], 1.0f);
    ck_assert_float_eq(out[1], -1.5f);
    ck_assert_float_eq(out[2], 0x1p-133f);
    ck_assert_status(pt__st_read_f32(pt__st_find(f, "a.bf16"), out, 4), PT_ESHAPE, "tensor 'a.bf16' has 3");
    ck_assert_status(pt__st_read_f32(sc, out, 1), PT_EUNSUPPORTED, "tensor 'scalar' has dtype I64");
    ck_assert_status(pt__st_read_f32(pt__st_find(f, "mask"), out, 5), PT_EUNSUPPORTED, "dtype BOOL");
    ck_assert_status(pt__st_read_f32(NULL, out, 5), PT_EINVAL, "tensor is NULL");

    /* the same bytes through pt__st_open_memory give the same view */
    size_t len;
    char *buf = read_all(path, &len);
    pt_st_file *g = NULL;
    ck_assert_ok(pt__st_open_memory(&g, buf, len));
    ck_assert_uint_eq(pt__st_count(g), n);
    ck_assert_str_eq(pt__st_path(g), "<memory>");
    for (size_t i = 0; i < n; i++) {
        ck_assert_str_eq(pt__st_tensor_at(g, i)->name, pt__st_tensor_at(f, i)->name);
        ck_assert_uint_eq(pt__st_tensor_at(g, i)->offset, pt__st_tensor_at(f, i)->offset);
    }
    pt__st_close(g);
    free(buf);
    pt__st_close(f);

    /* overwrite in place with no tensors and no metadata: "{}" padded */
    ck_assert_ok(pt__st_write(path, NULL, 0, NULL, 0));
    buf = read_all(path, &len);
    ck_assert_uint_eq(len, 16);
    ck_assert_int_eq(memcmp(buf, "\x08\0\0\0\0\0\0\0{}      ", 16), 0);
    free(buf);
    ck_assert_int_eq(count_dir_entries(dir), 1);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(test_writer_bytes_match_reference_layout)
{
    /* The writer's bytes for one tensor equal the committed file the Python
     * generator wrote in the Hugging Face layout. */
    char *dir = pt_test_tmpdir("pt_st_");
    char path[4096], ref[4096];
    snprintf(path, sizeof path, "%s/one.safetensors", dir);
    snprintf(ref, sizeof ref, "%s/io/valid/one_f32.safetensors", PT_TEST_SRCDIR);
    float w[2] = {1.5f, -2.0f};
    pt_st_write_tensor t = {.name = "w", .dtype = PT_ST_F32, .ndim = 1, .shape = {2}, .data = w};
    const char *meta[] = {"format", "pt"};
    ck_assert_ok(pt__st_write(path, &t, 1, meta, 1));
    size_t a_len, b_len;
    char *a = read_all(path, &a_len), *b = read_all(ref, &b_len);
    ck_assert_uint_eq(a_len, b_len);
    ck_assert_int_eq(memcmp(a, b, a_len), 0);
    free(a);
    free(b);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

/* kB of this process's memory resident in the mapping holding p
 * (/proc/self/smaps), or -1 when it cannot tell. */
static long mapping_rss_kb(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    bool in = false;
    long rss = -1;
    uintptr_t a = (uintptr_t)p;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = a >= lo && a < hi;
        else if (in && sscanf(line, "Rss: %ld kB", &rss) == 1)
            break;
    }
    fclose(f);
    return rss;
}

START_TEST(test_read_gives_mapped_pages_back)
{
    /* Reading a tensor of a mapped file drops its pages from the process,
     * so a model load never holds the file and the weights at once: 8 MiB
     * read, under 64 kB of the mapping left resident, the values right
     * (and right again when read a second time). */
    char *dir = pt_test_tmpdir("pt_st_");
    char path[4096];
    snprintf(path, sizeof path, "%s/big.safetensors", dir);
    const size_t n = (size_t)2 << 20;
    float *w = malloc(n * sizeof *w), *r = malloc(n * sizeof *r);
    for (size_t i = 0; i < n; i++)
        w[i] = (float)i * 0.5f;
    pt_st_write_tensor t = {.name = "w", .dtype = PT_ST_F32, .ndim = 1, .shape = {(int64_t)n},
                            .data = w};
    ck_assert_ok(pt__st_write(path, &t, 1, NULL, 0));
    pt_st_file *f;
    ck_assert_ok(pt__st_open(&f, path));
    const pt_st_tensor *x = pt__st_find(f, "w");
    ck_assert(x->mapped);
    for (int pass = 0; pass < 2; pass++) {
        memset(r, 0, n * sizeof *r);
        ck_assert_ok(pt__st_read_f32(x, r, n));
        ck_assert_int_eq(memcmp(r, w, n * sizeof *r), 0);
        long kb = mapping_rss_kb(x->data);
        if (kb < 0)
            printf("read_gives_mapped_pages_back: /proc/self/smaps unreadable: residency not checked\n");
        else
            ck_assert_msg(kb < 64, "pass %d: %ld kB of the mapping still resident", pass, kb);
    }
    pt__st_close(f);
    free(w);
    free(r);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(test_writer_invalid)
{
    char *dir = pt_test_tmpdir("pt_st_");
    char path[4096];
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    float w[4] = {0};
    pt_st_write_tensor t[2] = {
        {.name = "a", .dtype = PT_ST_F32, .ndim = 1, .shape = {2}, .data = w},
        {.name = "a", .dtype = PT_ST_F32, .ndim = 1, .shape = {2}, .data = w + 2},
    };
    ck_assert_status(pt__st_write(path, t, 2, NULL, 0), PT_EINVAL, "duplicate tensor name 'a'");
    t[1].name = "__metadata__";
    ck_assert_status(pt__st_write(path, t, 2, NULL, 0), PT_EINVAL, "'__metadata__' is reserved");
    t[1].name = "b\xff";
    ck_assert_status(pt__st_write(path, t, 2, NULL, 0), PT_EINVAL, "not valid UTF-8");
    t[1].name = NULL;
    ck_assert_status(pt__st_write(path, t, 2, NULL, 0), PT_EINVAL, "tensor 1 has no name");
    t[1].name = "b";
    t[1].dtype = PT_ST_DTYPE_COUNT;
    ck_assert_status(pt__st_write(path, t, 2, NULL, 0), PT_EINVAL, "unknown dtype");
    t[1].dtype = PT_ST_F32;
    t[1].shape[0] = -1;
    ck_assert_status(pt__st_write(path, t, 2, NULL, 0), PT_EINVAL, "invalid dimension -1");
    t[1].shape[0] = 2;
    t[1].ndim = 9;
    ck_assert_status(pt__st_write(path, t, 2, NULL, 0), PT_EINVAL, "rank 9");
    t[1].ndim = 1;
    t[1].data = NULL;
    ck_assert_status(pt__st_write(path, t, 2, NULL, 0), PT_EINVAL, "tensor 'b' has no data");
    t[1].data = w;
    t[1].dtype = PT_ST_F6_E2M3;
    t[1].shape[0] = 3;
    ck_assert_status(pt__st_write(path, t, 2, NULL, 0), PT_EINVAL, "do not fill whole bytes");
    t[1].dtype = PT_ST_F32;
    t[1].shape[0] = 2;
    const char *meta[] = {"k", "1", "k", "2"};
    ck_assert_status(pt__st_write(path, t, 2, meta, 2), PT_EINVAL, "duplicate metadata key 'k'");
    const char *meta_null[] = {"k", NULL};
    ck_assert_status(pt__st_write(path, t, 2, meta_null, 1), PT_EINVAL, "NULL key or value");
    ck_assert_status(pt__st_write(NULL, t, 2, NULL, 0), PT_EINVAL, "path");
    /* none of the failures created anything */
    ck_assert_int_eq(count_dir_entries(dir), 0);
    ck_assert_ok(pt__st_write(path, t, 2, NULL, 0));
    ck_assert_int_eq(count_dir_entries(dir), 1);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

/* ---- the real model ------------------------------------------------------ */

START_TEST(test_stories260k)
{
    const char *data = pt_test_shared_data("io/stories260K");
    if (!data)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/models/stories260K/model.safetensors", data);
    pt_st_file *f = NULL;
    ck_assert_ok(pt__st_open(&f, path));
    ck_assert_uint_eq(pt__st_count(f), 47);
    ck_assert_uint_eq(pt__st_header_size(f), 4856);
    ck_assert_uint_eq(pt__st_data_size(f), 1040128); /* 260,032 floats */
    ck_assert_str_eq(pt__st_metadata(f, "format"), "pt");
    ck_assert_uint_eq(pt__st_metadata_count(f), 1);
    for (size_t i = 0; i < pt__st_count(f); i++)
        ck_assert_int_eq(pt__st_tensor_at(f, i)->dtype, PT_ST_F32);
    ck_assert_str_eq(pt__st_tensor_at(f, 0)->name, "model.embed_tokens.weight");
    const pt_st_tensor *e = pt__st_find(f, "model.embed_tokens.weight");
    ck_assert_int_eq(e->ndim, 2);
    ck_assert_int_eq(e->shape[0], 512);
    ck_assert_int_eq(e->shape[1], 64);
    const pt_st_tensor *k = pt__st_find(f, "model.layers.0.self_attn.k_proj.weight");
    ck_assert_ptr_nonnull(k);
    ck_assert_int_eq(k->shape[0], 32);
    ck_assert_int_eq(k->shape[1], 64);
    ck_assert_uint_eq(k->offset, 263680);
    ck_assert_ptr_nonnull(pt__st_find(f, "model.layers.4.mlp.down_proj.weight"));
    ck_assert_ptr_null(pt__st_find(f, "lm_head.weight")); /* tied embeddings */
    float *w = malloc(512 * 64 * sizeof *w);
    ck_assert_ok(pt__st_read_f32(e, w, 512 * 64));
    /* values from numpy over the same file */
    ck_assert_float_eq(w[0], -0.29474878311157227f);
    ck_assert_float_eq(w[1], 0.5618956089019775f);
    ck_assert_float_eq(w[511 * 64 + 63], -0.4240326f);
    double sum = 0;
    for (int i = 0; i < 512 * 64; i++)
        sum += w[i];
    ck_assert_double_eq_tol(sum, -752.3677446640068, 1e-9);
    const pt_st_tensor *nw = pt__st_find(f, "model.norm.weight");
    ck_assert_int_eq(nw->ndim, 1);
    ck_assert_ok(pt__st_read_f32(nw, w, 64));
    ck_assert_float_eq(w[0], 2.4583089351654053f);
    free(w);
    pt__st_close(f);
}
END_TEST

/* ---- malformed and valid corpora ----------------------------------------- */

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
    snprintf(path, sizeof path, "%s/io/malformed/EXPECTED.tsv", PT_TEST_SRCDIR);
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
        snprintf(path, sizeof path, "%s/io/malformed/%s", PT_TEST_SRCDIR, file);
        pt_st_file *f = (pt_st_file *)(uintptr_t)1;
        pt_clear_error();
        int st = pt__st_open(&f, path);
        ck_assert_msg(st == expected, "%s: got %s (%s), expected %s", file, pt_status_name(st),
                      pt_last_error(), status);
        ck_assert_ptr_null(f);
        ck_assert_msg(strstr(pt_last_error(), frag) != NULL, "%s: message '%s' lacks '%s'", file,
                      pt_last_error(), frag);
        ck_assert_msg(strstr(pt_last_error(), file) != NULL, "%s: message '%s' does not name the file",
                      file, pt_last_error());
        /* the same bytes from memory fail the same way */
        size_t blen;
        char *bytes = read_all(path, &blen);
        ck_assert_int_eq(pt__st_open_memory(&f, blen ? bytes : NULL, blen), expected);
        ck_assert_ptr_null(f);
        ck_assert_msg(strstr(pt_last_error(), frag) != NULL, "%s (memory): '%s'", file, pt_last_error());
        ck_assert(strncmp(pt_last_error(), "<memory>: ", 10) == 0);
        free(bytes);
        checked++;
    }
    free(tsv);
    ck_assert_int_ge(checked, 50);
    fprintf(stderr, "io: %d malformed files rejected with the expected status and message\n", checked);
}
END_TEST

START_TEST(test_valid_corpus)
{
    char path[4096];
    pt_st_file *f;
    snprintf(path, sizeof path, "%s/io/valid/empty_object.safetensors", PT_TEST_SRCDIR);
    ck_assert_ok(pt__st_open(&f, path));
    ck_assert_uint_eq(pt__st_count(f), 0);
    ck_assert_uint_eq(pt__st_metadata_count(f), 0);
    pt__st_close(f);

    snprintf(path, sizeof path, "%s/io/valid/mixed.safetensors", PT_TEST_SRCDIR);
    ck_assert_ok(pt__st_open(&f, path));
    ck_assert_uint_eq(pt__st_count(f), 5);
    float out[4];
    ck_assert_ok(pt__st_read_f32(pt__st_find(f, "a"), out, 2));
    ck_assert_float_eq(out[0], 1.0f);
    ck_assert_float_eq(out[1], -1.0f);
    const pt_st_tensor *b = pt__st_find(f, "b");
    ck_assert_int_eq(b->dtype, PT_ST_F16);
    ck_assert_ok(pt__st_read_f32(b, out, 4));
    ck_assert_float_eq(out[0], 1.0f);
    ck_assert_float_eq(out[1], -2.0f);
    ck_assert_float_eq(out[2], 0x1p-24f);
    ck_assert(isinf(out[3]));
    const pt_st_tensor *c = pt__st_find(f, "c");
    int64_t iv;
    memcpy(&iv, c->data, 8);
    ck_assert_int_eq(iv, -7);
    ck_assert_uint_eq(pt__st_find(f, "d")->numel, 0);
    ck_assert_status(pt__st_read_f32(pt__st_find(f, "d"), NULL, 0), PT_EUNSUPPORTED, "tensor 'd' has dtype U8");
    ck_assert_uint_eq(pt__st_find(f, "e")->nbytes, 2);
    pt__st_close(f);

    /* more metadata keys than members; escapes decoded; UTF-8 kept */
    snprintf(path, sizeof path, "%s/io/valid/metadata_only.safetensors", PT_TEST_SRCDIR);
    ck_assert_ok(pt__st_open(&f, path));
    ck_assert_uint_eq(pt__st_count(f), 0);
    ck_assert_uint_eq(pt__st_metadata_count(f), 4);
    ck_assert_str_eq(pt__st_metadata(f, "c"), "\xc3\xa9\n");
    ck_assert_str_eq(pt__st_metadata(f, "\xc3\xa9"), "x");
    const char *k3, *v3;
    ck_assert_ok(pt__st_metadata_at(f, 3, &k3, &v3));
    ck_assert_str_eq(k3, "\xc3\xa9");
    pt__st_close(f);

    /* unpadded header, keys in another order, entries listed out of offset order */
    snprintf(path, sizeof path, "%s/io/valid/unpadded.safetensors", PT_TEST_SRCDIR);
    ck_assert_ok(pt__st_open(&f, path));
    ck_assert_str_eq(pt__st_tensor_at(f, 0)->name, "z");
    ck_assert_str_eq(pt__st_tensor_at(f, 1)->name, "y");
    ck_assert_ok(pt__st_read_f32(pt__st_tensor_at(f, 0), out, 1));
    ck_assert_float_eq(out[0], 3.0f);
    pt__st_close(f);
}
END_TEST

START_TEST(test_open_errors)
{
    pt_st_file *f = (pt_st_file *)(uintptr_t)1;
    ck_assert_status(pt__st_open(&f, "/nonexistent/dir/x.safetensors"), PT_ENOTFOUND,
                     "/nonexistent/dir/x.safetensors");
    ck_assert_ptr_null(f);
    ck_assert_status(pt__st_open(&f, PT_TEST_SRCDIR), PT_EIO, "not a regular file");
    /* a FIFO must not block the open */
    char *dir = pt_test_tmpdir("pt_st_");
    char fifo[4200];
    snprintf(fifo, sizeof fifo, "%s/fifo.safetensors", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_status(pt__st_open(&f, fifo), PT_EIO, "not a regular file");
    pt_test_rm_rf(dir);
    free(dir);
    ck_assert_status(pt__st_open(NULL, "x"), PT_EINVAL, "out is NULL");
    ck_assert_status(pt__st_open(&f, NULL), PT_EINVAL, "path is NULL");
    ck_assert_status(pt__st_open_memory(&f, NULL, 5), PT_EINVAL, "buffer is NULL");
    pt__st_close(NULL);
    ck_assert_uint_eq(pt__st_count(NULL), 0);
    ck_assert_ptr_null(pt__st_find(NULL, "x"));
}
END_TEST

/* ---- sweep ----------------------------------------------------------------- */

/* A successfully opened file must be self-consistent. */
static void check_consistent(const pt_st_file *f, const uint8_t *buf, size_t len)
{
    uint64_t expect = 0;
    for (size_t i = 0; i < pt__st_count(f); i++) {
        const pt_st_tensor *t = pt__st_tensor_at(f, i);
        ck_assert_uint_eq(t->offset, expect);
        expect += t->nbytes;
        const uint8_t *d = t->data;
        ck_assert(d >= buf + 8 + pt__st_header_size(f) && d + t->nbytes <= buf + len);
        size_t numel = 1;
        for (int k = 0; k < t->ndim; k++)
            numel *= (size_t)t->shape[k];
        ck_assert_uint_eq(numel, t->numel);
        ck_assert_uint_eq((uint64_t)numel * pt__st_dtype_bits(t->dtype), (uint64_t)t->nbytes * 8);
        ck_assert_ptr_eq(pt__st_find(f, t->name), t);
        if (t->dtype == PT_ST_F32 || t->dtype == PT_ST_F16 || t->dtype == PT_ST_BF16) {
            float *out = malloc((numel ? numel : 1) * sizeof *out);
            ck_assert_ok(pt__st_read_f32(t, out, numel));
            free(out);
        }
    }
    ck_assert_uint_eq(expect, pt__st_data_size(f));
    ck_assert_uint_eq(8 + pt__st_header_size(f) + pt__st_data_size(f), len);
}

static const char *const sweep_files[] = {"mixed", "one_f32", "metadata_only", "unpadded"};

START_TEST(test_sweep)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/io/valid/%s.safetensors", PT_TEST_SRCDIR, sweep_files[_i]);
    size_t len;
    char *orig = read_all(path, &len);
    uint8_t *buf = malloc(len);
    pt_st_file *f;
    /* every truncation fails cleanly; the full length loads */
    int truncated = 0;
    for (size_t cut = 0; cut <= len; cut++) {
        /* a fresh allocation of exactly `cut` bytes, so ASan sees any overread */
        uint8_t *p = malloc(cut ? cut : 1);
        memcpy(p, orig, cut);
        int st = pt__st_open_memory(&f, cut ? p : NULL, cut);
        if (cut < len) {
            ck_assert_msg(st < 0, "truncated at %zu loaded", cut);
            ck_assert_ptr_null(f);
            ck_assert(pt_last_error()[0] != '\0');
            truncated++;
        } else {
            ck_assert_ok(st);
            check_consistent(f, p, cut);
            pt__st_close(f);
        }
        free(p);
    }
    /* every bit of the length prefix and the header flipped */
    uint64_t n;
    memcpy(&n, orig, 8);
    size_t hdr_end = 8 + (size_t)n;
    int failed = 0, loaded = 0;
    for (size_t byte = 0; byte < hdr_end; byte++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(buf, orig, len);
            buf[byte] ^= (uint8_t)(1u << bit);
            int st = pt__st_open_memory(&f, buf, len);
            if (st == PT_OK) {
                check_consistent(f, buf, len);
                pt__st_close(f);
                loaded++;
            } else {
                ck_assert_msg(st < 0 && st >= PT_EINTERNAL && st != PT_EINTERNAL,
                              "flip %zu:%d gave %d", byte, bit, st);
                ck_assert_ptr_null(f);
                failed++;
            }
        }
    }
    fprintf(stderr, "io sweep %s: %d truncations failed cleanly; %zu header bit flips: %d rejected, "
                    "%d loaded consistently\n", sweep_files[_i], truncated, hdr_end * 8, failed, loaded);
    ck_assert_int_eq(truncated, (int)len);
    ck_assert_int_gt(failed, 0);
    free(buf);
    free(orig);
}
END_TEST

static Suite *io_suite(void)
{
    Suite *s = suite_create("io_safetensors");
    TCase *tc = tcase_create("safetensors");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_dtype_table);
    tcase_add_test(tc, test_convert_known);
    tcase_add_test(tc, test_convert_exhaustive);
    tcase_add_test(tc, test_convert_golden);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_writer_bytes_match_reference_layout);
    tcase_add_test(tc, test_writer_invalid);
    tcase_add_test(tc, test_stories260k);
    tcase_add_test(tc, test_malformed_corpus);
    tcase_add_test(tc, test_valid_corpus);
    tcase_add_test(tc, test_open_errors);
    tcase_add_test(tc, test_read_gives_mapped_pages_back);
    tcase_add_loop_test(tc, test_sweep, 0, (int)(sizeof sweep_files / sizeof sweep_files[0]));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return pt_test_run(io_suite());
}
