/* Durable writes (temp + fsync + rename + directory fsync), errno mapping,
 * failure paths (full disk, read-only file system, missing directory) and
 * SHA-256. */
#include "testutil.h"
#include "testfs.h"

#include "core/core.h"
#include "io/fileio.h"
#include "io/jsonl.h"
#include "io/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <unistd.h>

/* Names in dir other than `keep`, joined; "" if none. */
static void other_entries(const char *dir, const char *keep, char *out, size_t cap)
{
    out[0] = '\0';
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
            (keep && strcmp(e->d_name, keep) == 0))
            continue;
        strncat(out, e->d_name, cap - strlen(out) - 2);
        strncat(out, " ", cap - strlen(out) - 1);
    }
    closedir(d);
}

static void assert_file_is(const char *path, const void *content, size_t len)
{
    char *buf = NULL;
    size_t got = 0;
    ck_assert_ok(pt__read_file(&buf, &got, path, (size_t)1 << 24));
    ck_assert_uint_eq(got, len);
    ck_assert_int_eq(memcmp(buf, content, len), 0);
    free(buf);
}

static void hex_of(const void *data, size_t len, char hex[65])
{
    uint8_t d[32];
    pt__sha256(data, len, d);
    pt__sha256_hex(d, hex);
}

START_TEST(test_sha256_vectors)
{
    char hex[65];
    hex_of("", 0, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hex_of("abc", 3, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(m448, strlen(m448), hex);
    ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                       "klmnopqrlmnopqrsmnopqrstnopqrstu";
    hex_of(m896, strlen(m896), hex);
    ck_assert_str_eq(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    /* one million 'a', fed in uneven pieces */
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    pt_sha256_ctx c;
    pt__sha256_init(&c);
    size_t done = 0, step = 1;
    while (done < 1000000) {
        size_t k = step > 1000000 - done ? 1000000 - done : step;
        pt__sha256_update(&c, a + done, k);
        done += k;
        step = step * 3 % 997 + 1;
    }
    uint8_t d[32];
    pt__sha256_final(&c, d);
    pt__sha256_hex(d, hex);
    ck_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* every length 0..200 around block boundaries: incremental == one shot */
    for (size_t len = 0; len <= 200; len++) {
        uint8_t one[32], inc[32];
        pt__sha256(a, len, one);
        pt__sha256_init(&c);
        for (size_t i = 0; i < len; i++)
            pt__sha256_update(&c, a + i, 1);
        pt__sha256_final(&c, inc);
        ck_assert_int_eq(memcmp(one, inc, 32), 0);
    }
    free(a);
}
END_TEST

START_TEST(test_atomic_write)
{
    char *dir = pt_test_tmpdir("pt_fio_");
    char path[4096], others[1024];
    snprintf(path, sizeof path, "%s/out.bin", dir);
    ck_assert_ok(pt__write_file_atomic(path, "hello", 5));
    assert_file_is(path, "hello", 5);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 0777, 0644);
    /* replace */
    ck_assert_ok(pt__write_file_atomic(path, "abc", 3));
    assert_file_is(path, "abc", 3);
    uint8_t dg[32];
    char hex[65];
    ck_assert_ok(pt__sha256_file(path, dg));
    pt__sha256_hex(dg, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    /* empty file */
    ck_assert_ok(pt__write_file_atomic(path, NULL, 0));
    assert_file_is(path, "", 0);
    other_entries(dir, "out.bin", others, sizeof others);
    ck_assert_str_eq(others, "");
    /* streaming writer, aborted: nothing changes, no temp file */
    pt_atomic_file af;
    ck_assert_ok(pt__atomic_open(&af, path));
    ck_assert_ok(pt__atomic_write(&af, "partial", 7));
    other_entries(dir, "out.bin", others, sizeof others);
    ck_assert_msg(strstr(others, ".out.bin.tmp.") != NULL, "temp file is '%s'", others);
    pt__atomic_abort(&af);
    pt__atomic_abort(&af); /* idempotent */
    other_entries(dir, "out.bin", others, sizeof others);
    ck_assert_str_eq(others, "");
    assert_file_is(path, "", 0);
    /* a relative path (no slash) works too */
    char cwd[4096];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(dir), 0);
    ck_assert_ok(pt__write_file_atomic("rel.bin", "xyz", 3));
    ck_assert_int_eq(chdir(cwd), 0);
    snprintf(path, sizeof path, "%s/rel.bin", dir);
    assert_file_is(path, "xyz", 3);
    /* file checksums: streaming a large file equals hashing its bytes */
    size_t big = 300000;
    uint8_t *buf = malloc(big);
    for (size_t i = 0; i < big; i++)
        buf[i] = (uint8_t)(i * 2654435761u >> 13);
    snprintf(path, sizeof path, "%s/big.bin", dir);
    ck_assert_ok(pt__write_file_atomic(path, buf, big));
    uint8_t d1[32], d2[32];
    pt__sha256(buf, big, d1);
    ck_assert_ok(pt__sha256_file(path, d2));
    ck_assert_int_eq(memcmp(d1, d2, 32), 0);
    free(buf);
    snprintf(path, sizeof path, "%s/absent.bin", dir);
    ck_assert_status(pt__sha256_file(path, d2), PT_ENOTFOUND, "absent.bin");
    ck_assert_status(pt__sha256_file(dir, d2), PT_EIO, "not a regular file");
    ck_assert_ok(pt__fsync_dir(dir));
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(test_errno_mapping)
{
    ck_assert_status(pt__io_errno(ENOSPC, "write", "/x/y.bin"), PT_ENOSPC, "write /x/y.bin: ");
    ck_assert_status(pt__io_errno(EDQUOT, "write", "/x/y.bin"), PT_ENOSPC, "/x/y.bin");
    ck_assert_status(pt__io_errno(EIO, "fsync", "/x/y.bin"), PT_EIO, "fsync /x/y.bin");
    ck_assert_status(pt__io_errno(EACCES, "open", "/x/y.bin"), PT_EIO, "Permission denied");
    ck_assert_status(pt__io_errno(EROFS, "open", "/x/y.bin"), PT_EIO, "Read-only file system");
}
END_TEST

START_TEST(test_write_failures)
{
    char *dir = pt_test_tmpdir("pt_fio_");
    char path[4096], others[1024];
    /* directory that does not exist */
    snprintf(path, sizeof path, "%s/missing/out.bin", dir);
    ck_assert_status(pt__write_file_atomic(path, "x", 1), PT_EIO, path);
    ck_assert_status(pt__st_write(path, NULL, 0, NULL, 0), PT_EIO, path);
    /* final name is a non-empty directory: rename fails, the directory survives */
    snprintf(path, sizeof path, "%s/taken", dir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    char inner[4200];
    snprintf(inner, sizeof inner, "%s/keep", path);
    ck_assert_ok(pt__write_file_atomic(inner, "k", 1));
    ck_assert_status(pt__write_file_atomic(path, "x", 1), PT_EIO, "rename");
    assert_file_is(inner, "k", 1);
    other_entries(dir, "taken", others, sizeof others);
    ck_assert_msg(others[0] == '\0', "left behind: %s", others);
    unlink(inner);
    rmdir(path);
    /* path naming a directory */
    ck_assert_status(pt__write_file_atomic("/tmp/", "x", 1), PT_EINVAL, "names a directory");
    /* as a non-root user a 0555 directory is unwritable */
    if (geteuid() != 0) {
        ck_assert_int_eq(chmod(dir, 0555), 0);
        snprintf(path, sizeof path, "%s/out.bin", dir);
        ck_assert_status(pt__write_file_atomic(path, "x", 1), PT_EIO, path);
        chmod(dir, 0755);
    }
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

/* The tmpfs mounted by the test, unmounted by the checked teardown even if
 * an assertion fails half way. */
static char *g_mounted;

static void unmount_teardown(void)
{
    if (g_mounted) {
        umount2(g_mounted, MNT_DETACH);
        rmdir(g_mounted);
        free(g_mounted);
        g_mounted = NULL;
    }
}

/* Mount a tiny tmpfs (root only); false (and a loud skip) if not possible. */
static bool mount_small_tmpfs(const char *dir, const char *opts)
{
    if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0) {
        fprintf(stderr, "SKIP io/tmpfs: cannot mount a tmpfs at %s (%s); the errno mapping is "
                        "tested directly\n", dir, strerror(errno));
        return false;
    }
    g_mounted = strdup(dir);
    return true;
}

START_TEST(test_full_disk_and_read_only)
{
    char *dir = pt_test_tmpdir("pt_fio_");
    if (!mount_small_tmpfs(dir, "size=64k,mode=0755")) {
        rmdir(dir);
        free(dir);
        return;
    }
    char path[4096], others[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    /* a previous, valid file under the final name */
    float small[4] = {1, 2, 3, 4};
    pt_st_write_tensor t = {.name = "w", .dtype = PT_ST_F32, .ndim = 1, .shape = {4}, .data = small};
    ck_assert_ok(pt__st_write(path, &t, 1, NULL, 0));
    char *before = NULL;
    size_t before_len = 0;
    ck_assert_ok(pt__read_file(&before, &before_len, path, 1 << 20));

    /* 256 KiB does not fit in 64 KiB: PT_ENOSPC naming the file */
    size_t n = 65536;
    float *big = calloc(n, sizeof *big);
    pt_st_write_tensor tb = {.name = "w", .dtype = PT_ST_F32, .ndim = 1, .shape = {(int64_t)n}, .data = big};
    ck_assert_status(pt__st_write(path, &tb, 1, NULL, 0), PT_ENOSPC, "model.safetensors");
    ck_assert_status(pt__write_file_atomic(path, big, n * sizeof *big), PT_ENOSPC, "No space left");
    free(big);
    assert_file_is(path, before, before_len);
    other_entries(dir, "model.safetensors", others, sizeof others);
    ck_assert_msg(others[0] == '\0', "left behind: %s", others);
    pt_st_file *f;
    ck_assert_ok(pt__st_open(&f, path));
    ck_assert_uint_eq(pt__st_find(f, "w")->numel, 4);
    pt__st_close(f);

    /* read-only file system: an unwritable directory, even for root */
    ck_assert_int_eq(mount(NULL, dir, NULL, MS_REMOUNT | MS_RDONLY, "size=64k"), 0);
    ck_assert_status(pt__st_write(path, &t, 1, NULL, 0), PT_EIO, path);
    ck_assert_status(pt__write_file_atomic(path, "x", 1), PT_EIO, "Read-only file system");
    assert_file_is(path, before, before_len);
    other_entries(dir, "model.safetensors", others, sizeof others);
    ck_assert_msg(others[0] == '\0', "left behind: %s", others);
    free(before);
    free(dir);
    unmount_teardown();
}
END_TEST

/* pt__read_file (io/fileio.h): the bytes, NUL-terminated, and its refusals. */
START_TEST(test_read_file)
{
    char path[] = "/tmp/pt_test_read_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "hello\0world", 11), 11);
    close(fd);
    char *buf;
    size_t n;
    ck_assert_ok(pt__read_file(&buf, &n, path, 100));
    ck_assert_uint_eq(n, 11);
    ck_assert_int_eq(memcmp(buf, "hello\0world", 12), 0);
    free(buf);
    ck_assert_status(pt__read_file(&buf, &n, path, 10), PT_ERANGE, "over the limit");
    ck_assert_ptr_null(buf);
    unlink(path);
    ck_assert_status(pt__read_file(&buf, &n, path, 100), PT_ENOTFOUND, path);
    ck_assert_ptr_null(buf);
    ck_assert_status(pt__read_file(&buf, &n, "/tmp", 100), PT_EIO,
                     "/tmp is not a regular file (it is a directory)");
    ck_assert_ptr_null(buf);
}
END_TEST

/* pt__map_file (io/fileio.h, the GGUF and safetensors readers' open): the
 * file's bytes, an empty file as no mapping, and the refusals of
 * pt__open_regular. */
START_TEST(test_map_file)
{
    char path[] = "/tmp/pt_test_map_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    const uint8_t *base = (const uint8_t *)"x";
    size_t len = 7;
    ck_assert_ok(pt__map_file(&base, &len, path, "gguf "));
    ck_assert_ptr_null(base);
    ck_assert_uint_eq(len, 0);
    fd = open(path, O_WRONLY | O_TRUNC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "hello\0world", 11), 11);
    close(fd);
    ck_assert_ok(pt__map_file(&base, &len, path, ""));
    ck_assert_ptr_nonnull(base);
    ck_assert_uint_eq(len, 11);
    ck_assert_int_eq(memcmp(base, "hello\0world", 11), 0);
    ck_assert_int_eq(munmap((void *)base, len), 0);
    unlink(path);
    ck_assert_status(pt__map_file(&base, &len, path, ""), PT_ENOTFOUND, path);
    ck_assert_ptr_null(base);
    ck_assert_status(pt__map_file(&base, &len, "/tmp", "gguf "), PT_EIO,
                     "/tmp is not a regular file (it is a directory)");
    ck_assert_ptr_null(base);
    ck_assert_uint_eq(len, 0);
}
END_TEST

/* A FIFO where the library expects a file (a config.json, a tokenizer, a
 * data file) never blocks: pt__read_file and every loader built on it refuse
 * it at once, and a JSONL reader opens it without waiting for a writer. */
START_TEST(test_fifo_never_blocks)
{
    alarm(20); /* a regression hangs: fail it well before the suite's timeout */
    char *dir = pt_test_tmpdir("pt_fifo_");
    char cfg[4096], data[4096], *buf = NULL;
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(data, sizeof data, "%s/data.jsonl", dir);
    ck_assert_int_eq(mkfifo(cfg, 0600), 0);
    ck_assert_int_eq(mkfifo(data, 0600), 0);
    size_t n = 0;
    char want[4200];
    snprintf(want, sizeof want, "%s is not a regular file (it is a FIFO)", cfg);
    ck_assert_status(pt__read_file(&buf, &n, cfg, 1 << 20), PT_EIO, want);
    ck_assert_ptr_null(buf);
    pt_model_config c;
    ck_assert_ok(pt_model_config_init(&c));
    ck_assert_status(pt_model_config_load(&c, dir), PT_EIO, want);
    pt_model *m = NULL;
    ck_assert_status(pt_model_load_dir(&m, dir, NULL), PT_EIO, want);
    ck_assert_ptr_null(m);
    pt_model_dir_info info;
    ck_assert_ok(pt_model_dir_info_init(&info));
    ck_assert_status(pt_model_dir_inspect(&info, dir), PT_EIO, want);
    pt_tokenizer *tok = NULL;
    ck_assert_int_ne(pt_tokenizer_load(&tok, cfg), PT_OK); /* the FIFO as a tokenizer.json */
    ck_assert_ptr_null(tok);
    /* a data file: opened without a writer, it reads as empty */
    pt_jsonl *r = NULL;
    ck_assert_ok(pt__jsonl_open(&r, data, 0));
    const cJSON *row = NULL;
    ck_assert_int_eq(pt__jsonl_next(r, &row), 0);
    pt__jsonl_close(r);
    alarm(0);
    ck_assert_int_eq(pt_test_rm_rf(dir), 0);
    free(dir);
}
END_TEST

/* The public JSONL reader over a descriptor: a pipe's row is returned as
 * soon as its line is written (not when 64 KiB or the end arrive), the
 * caller's descriptor stays open after pt_jsonl_reader_free, a closed one is
 * PT_EINVAL; and the integer-array getter. */
START_TEST(test_jsonl_reader_fd)
{
    alarm(20); /* a reader that waits for more than the line hangs: fail it */
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pt_jsonl_reader *r = NULL;
    ck_assert_ok(pt_jsonl_reader_open_fd(&r, p[0], "pipe", 0));
    const char *row1 = "{\"ids\": [-2147483648, 0, 2147483647], \"s\": \"x\"}\n\n";
    ck_assert_int_eq(write(p[1], row1, strlen(row1)), (ssize_t)strlen(row1));
    ck_assert_int_eq(pt_jsonl_reader_next(r), 1); /* the write end is still open */
    int32_t *ids = NULL;
    size_t n = 0, line = 0;
    ck_assert_ok(pt_jsonl_reader_int_array(&ids, &n, r, "ids", true));
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(ids[0], INT32_MIN);
    ck_assert_int_eq(ids[1], 0);
    ck_assert_int_eq(ids[2], INT32_MAX);
    pt_free(ids);
    ck_assert_ok(pt_jsonl_reader_int_array(&ids, &n, r, "absent", false));
    ck_assert(ids == NULL && n == 0);
    ck_assert_status(pt_jsonl_reader_int_array(&ids, &n, r, "absent", true), PT_ENOTFOUND,
                     "pipe line 1: the row has no \"absent\"");
    ck_assert_status(pt_jsonl_reader_int_array(&ids, &n, r, "s", true), PT_EFORMAT,
                     "pipe line 1: \"s\" must be an array of integers");
    const char *rest = "{\"ids\": [1, 2147483648]}\n{\"ids\": [1.5]}\n";
    ck_assert_int_eq(write(p[1], rest, strlen(rest)), (ssize_t)strlen(rest));
    close(p[1]);
    ck_assert_int_eq(pt_jsonl_reader_next(r), 1);
    line = pt_jsonl_reader_line_number(r);
    ck_assert_uint_eq(line, 3); /* the blank line 2 is counted, not returned */
    ck_assert_status(pt_jsonl_reader_int_array(&ids, &n, r, "ids", true), PT_ERANGE,
                     "pipe line 3: \"ids\"[1] = 2147483648 is out of range [-2147483648, 2147483648)");
    ck_assert_ptr_null(ids);
    ck_assert_int_eq(pt_jsonl_reader_next(r), 1);
    ck_assert_status(pt_jsonl_reader_int_array(&ids, &n, r, "ids", true), PT_EFORMAT,
                     "pipe line 4: \"ids\"[0] is not an integer");
    ck_assert_int_eq(pt_jsonl_reader_next(r), 0);
    pt_jsonl_reader_free(r);
    ck_assert_int_ne(fcntl(p[0], F_GETFD), -1); /* the caller's descriptor is still open */
    close(p[0]);
    ck_assert_status(pt_jsonl_reader_open_fd(&r, p[0], "closed", 0), PT_EINVAL, "closed: cannot read descriptor");
    ck_assert_ptr_null(r);
    ck_assert_status(pt_jsonl_reader_open_fd(&r, -1, NULL, 0), PT_EINVAL, "fd");
    alarm(0);
}
END_TEST

static Suite *fileio_suite(void)
{
    Suite *s = suite_create("io_fileio");
    TCase *tc = tcase_create("fileio");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_sha256_vectors);
    tcase_add_test(tc, test_atomic_write);
    tcase_add_test(tc, test_errno_mapping);
    tcase_add_test(tc, test_write_failures);
    tcase_add_test(tc, test_read_file);
    tcase_add_test(tc, test_map_file);
    tcase_add_test(tc, test_fifo_never_blocks);
    tcase_add_test(tc, test_jsonl_reader_fd);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("tmpfs");
    tcase_add_checked_fixture(tm, NULL, unmount_teardown);
    tcase_add_test(tm, test_full_disk_and_read_only);
    suite_add_tcase(s, tm);
    return s;
}

int main(void)
{
    return pt_test_run(fileio_suite());
}
