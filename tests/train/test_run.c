/* The run layer (include/posttrain/run.h): the lock, leftovers, start
 * modes, overlap checks, retention, the state's round trip through a
 * checkpoint, metrics trimming on resume, kind checks, a failed metrics
 * write, older CLI host JSON and the checkpoint interval. */
#include "testutil.h"
#include "testfs.h"
#include "run_testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char *g_tmp;

static void path_of(char *out, size_t n, const char *rel)
{
    snprintf(out, n, "%s/%s", g_tmp, rel);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static bool exists(const char *dir, const char *rel)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    struct stat st;
    return lstat(p, &st) == 0;
}

static void setup(void)
{
    g_tmp = pt_test_tmpdir("pt_run_");
}

static void teardown(void)
{
    pt_test_rm_rf(g_tmp);
    free(g_tmp);
}

static void opts_for(pt_run_options *o, const char *dir, const char *kind, int start)
{
    ck_assert_ok(pt_run_options_init(o));
    o->dir = dir;
    o->kind = kind;
    o->start = start;
}

START_TEST(test_lock)
{
    char dir[4096], dir2[4096], metrics[4096];
    path_of(dir, sizeof dir, "run");
    path_of(dir2, sizeof dir2, "run2");
    path_of(metrics, sizeof metrics, "shared.jsonl");
    pt_run_options o;
    opts_for(&o, dir, "sft", PT_RUN_NEW);
    o.metrics = metrics;
    pt_run *a = NULL, *b = NULL;
    ck_assert_ok(pt_run_open(&a, &o));
    ck_assert_status(pt_run_open(&b, &o), PT_EBUSY, "is in use by another posttrain run");
    ck_assert_ptr_null(b);
    o.dir = dir2; /* another directory, the same metrics file */
    ck_assert_status(pt_run_open(&b, &o), PT_EBUSY, "the metrics file");
    pt_run_close(a);
    ck_assert_ok(pt_run_open(&b, &o));
    pt_run_close(b);
    /* no row was written: the empty metrics file the run created is gone */
    ck_assert(!exists(g_tmp, "shared.jsonl"));
}
END_TEST

START_TEST(test_leftovers)
{
    char dir[4096], p[4096];
    path_of(dir, sizeof dir, "run");
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/checkpoints", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/checkpoints/step-00000002", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/checkpoints/step-00000003.tmp-999999", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/checkpoints/step-00000003.tmp-999999/model.safetensors", dir);
    write_text(p, "partial");
    snprintf(p, sizeof p, "%s/.metrics.jsonl.tmp.12345", dir);
    write_text(p, "{\"step\": 1}\n");
    snprintf(p, sizeof p, "%s/adapter", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/adapter/.adapter_config.json.tmp.ab12", dir);
    write_text(p, "{");
    pt_run_options o;
    opts_for(&o, dir, "sft", PT_RUN_RESUME_AUTO);
    pt_run *r;
    ck_assert_ok(pt_run_open(&r, &o));
    ck_assert(!exists(dir, "checkpoints/step-00000003.tmp-999999"));
    ck_assert(!exists(dir, ".metrics.jsonl.tmp.12345"));
    ck_assert(!exists(dir, "adapter/.adapter_config.json.tmp.ab12"));
    ck_assert(exists(dir, "checkpoints/step-00000002"));
    snprintf(p, sizeof p, "%s/checkpoints/step-00000002", dir);
    ck_assert_str_eq(pt_run_resume_dir(r), p);
    pt_run_close(r);
}
END_TEST

START_TEST(test_start_modes)
{
    char dir[4096], p[4096];
    path_of(dir, sizeof dir, "run");
    pt_run_options o;
    pt_run *r;
    /* auto on nothing: a fresh start */
    opts_for(&o, dir, "grpo", PT_RUN_RESUME_AUTO);
    ck_assert_ok(pt_run_open(&r, &o));
    ck_assert_ptr_null(pt_run_resume_dir(r));
    ck_assert_ok(pt_run_log(r, "{\"step\": 1}"));
    pt_run_close(r);
    /* new on a used directory: refused, naming what it holds, nothing changed */
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    char before[4096];
    snprintf(before, sizeof before, "%s", read_text(p));
    opts_for(&o, dir, "grpo", PT_RUN_NEW);
    ck_assert_status(pt_run_open(&r, &o), PT_EEXIST, "already holds a run");
    ck_assert_msg(strstr(pt_last_error(), p) != NULL, "%s", pt_last_error());
    ck_assert_str_eq(read_text(p), before);
    /* auto on a run without checkpoints */
    opts_for(&o, dir, "grpo", PT_RUN_RESUME_AUTO);
    ck_assert_status(pt_run_open(&r, &o), PT_ENOTFOUND, "no checkpoint");
    /* auto picks the highest step, not the newest name */
    snprintf(p, sizeof p, "%s/checkpoints", dir);
    mkdir(p, 0755);
    const char *names[] = { "step-00000004", "step-00000010", "step-00000009" };
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/checkpoints/%s", dir, names[i]);
        mkdir(p, 0755);
    }
    ck_assert_ok(pt_run_open(&r, &o));
    snprintf(p, sizeof p, "%s/checkpoints/step-00000010", dir);
    ck_assert_str_eq(pt_run_resume_dir(r), p);
    pt_run_close(r);
    /* from: the given directory, the metrics kept */
    snprintf(p, sizeof p, "%s/checkpoints/step-00000004", dir);
    opts_for(&o, dir, "grpo", PT_RUN_RESUME_FROM);
    o.resume_from = p;
    ck_assert_ok(pt_run_open(&r, &o));
    ck_assert_str_eq(pt_run_resume_dir(r), p);
    pt_run_close(r);
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    ck_assert_str_eq(read_text(p), before);
    /* overwrite: checkpoints and adapter gone, metrics emptied */
    snprintf(p, sizeof p, "%s/adapter", dir);
    mkdir(p, 0755);
    opts_for(&o, dir, "grpo", PT_RUN_OVERWRITE);
    ck_assert_ok(pt_run_open(&r, &o));
    ck_assert_ptr_null(pt_run_resume_dir(r));
    ck_assert(!exists(dir, "checkpoints"));
    ck_assert(!exists(dir, "adapter"));
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    ck_assert_str_eq(read_text(p), "");
    pt_run_close(r);
    /* bad options */
    opts_for(&o, dir, "Bad Kind", PT_RUN_NEW);
    ck_assert_status(pt_run_open(&r, &o), PT_EINVAL, "kind");
    opts_for(&o, dir, "sft", PT_RUN_RESUME_FROM);
    ck_assert_status(pt_run_open(&r, &o), PT_EINVAL, "resume_from");
    int v = -1;
    ck_assert_ok(pt_run_start_from_name(&v, "auto"));
    ck_assert_int_eq(v, PT_RUN_RESUME_AUTO);
    ck_assert_str_eq(pt_run_start_name(PT_RUN_OVERWRITE), "overwrite");
}
END_TEST

START_TEST(test_overlap)
{
    char dir[4096], model[4096], data[4096], p[4096];
    path_of(model, sizeof model, "model");
    path_of(data, sizeof data, "data.jsonl");
    mkdir(model, 0755);
    snprintf(p, sizeof p, "%s/model.safetensors", model);
    write_text(p, "x");
    write_text(data, "{}\n");
    pt_run_input in[2] = { { "--model", model, true }, { "--data", data, false } };
    pt_run_options o;
    pt_run *r = NULL;
    opts_for(&o, model, "sft", PT_RUN_NEW);
    o.inputs = in;
    o.n_inputs = 2;
    ck_assert_status(pt_run_open(&r, &o), PT_EINVAL, "is the same file as --model");
    snprintf(dir, sizeof dir, "%s/sub", model);
    o.dir = dir;
    ck_assert_status(pt_run_open(&r, &o), PT_EINVAL, "is inside --model");
    ck_assert(!exists(model, "sub"));
    path_of(dir, sizeof dir, "out");
    o.dir = dir;
    o.metrics = data;
    ck_assert_status(pt_run_open(&r, &o), PT_EINVAL, "--metrics");
    ck_assert_msg(strstr(pt_last_error(), "is the same file as --data"), "%s", pt_last_error());
    /* a tree input: a file linked from it is refused as an output too */
    char linkdir[4096], target[4096];
    path_of(linkdir, sizeof linkdir, "hfcache");
    path_of(target, sizeof target, "blob");
    mkdir(linkdir, 0755);
    write_text(target, "w");
    snprintf(p, sizeof p, "%s/model.safetensors", linkdir);
    ck_assert_int_eq(symlink(target, p), 0);
    pt_run_input tree = { "--model", linkdir, true };
    o.inputs = &tree;
    o.n_inputs = 1;
    o.metrics = target;
    ck_assert_status(pt_run_open(&r, &o), PT_EINVAL, "is the same file as --model");
    tree.tree = false;
    o.metrics = NULL;
    /* data inside the run directory is refused; a checkpoint to resume may lie there */
    snprintf(p, sizeof p, "%s/train.jsonl", dir);
    mkdir(dir, 0755);
    write_text(p, "{}\n");
    pt_run_input inner = { "--data", p, false };
    o.inputs = &inner;
    ck_assert_status(pt_run_open(&r, &o), PT_EINVAL, "is inside --out");
    o.inputs = NULL;
    o.n_inputs = 0;
    snprintf(p, sizeof p, "%s/checkpoints/step-00000001", dir);
    o.start = PT_RUN_RESUME_FROM;
    o.resume_from = p;
    ck_assert_ok(pt_run_open(&r, &o));
    pt_run_close(r);
    ck_assert_ptr_nonnull(r);
}
END_TEST

/* The checkpoint names under dir/checkpoints, sorted, space-separated. */
static void list_checkpoints(char *out, size_t n, const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/checkpoints", dir);
    struct dirent **names;
    int k = scandir(p, &names, NULL, alphasort);
    ck_assert_int_ge(k, 0);
    out[0] = '\0';
    for (int i = 0; i < k; i++) {
        if (names[i]->d_name[0] != '.') {
            strncat(out, names[i]->d_name, n - strlen(out) - 1);
            strncat(out, " ", n - strlen(out) - 1);
        }
        free(names[i]);
    }
    free(names);
}

START_TEST(test_retention)
{
    char dir[4096], got[4096];
    path_of(dir, sizeof dir, "run");
    pt_model *m = pt_test_tiny_llama(37, 1);
    pt_optimizer *opt = rt_adamw(m);
    pt_run_options o;
    opts_for(&o, dir, "sft", PT_RUN_NEW);
    o.keep_last = 2;
    o.keep_every = 3;
    pt_run *r;
    ck_assert_ok(pt_run_open(&r, &o));
    pt_run_state s;
    pt_run_state_init(&s);
    for (s.step = 1; s.step <= 10; s.step++)
        ck_assert_ok(pt_run_save(r, m, opt, &s, NULL));
    list_checkpoints(got, sizeof got, dir);
    /* the last 2 (9, 10) and every 3rd (3, 6, 9) */
    ck_assert_str_eq(got, "step-00000003 step-00000006 step-00000009 step-00000010 ");
    pt_run_close(r);
    /* 0/0 keeps everything */
    path_of(dir, sizeof dir, "all");
    opts_for(&o, dir, "sft", PT_RUN_NEW);
    ck_assert_ok(pt_run_open(&r, &o));
    for (s.step = 1; s.step <= 4; s.step++)
        ck_assert_ok(pt_run_save(r, m, opt, &s, NULL));
    list_checkpoints(got, sizeof got, dir);
    ck_assert_str_eq(got, "step-00000001 step-00000002 step-00000003 step-00000004 ");
    /* a second save of one step is refused */
    s.step = 4;
    ck_assert_status(pt_run_save(r, m, opt, &s, NULL), PT_ESTATE, NULL);
    pt_run_close(r);
    pt_optimizer_free(opt);
    pt_model_free(m);
}
END_TEST

static const char k_extra[] = "{\"model\": \"/models/tiny\", \"lora\": {\"rank\": 2, \"alpha\": 4, \"targets\": 5}, "
                              "\"entropy_coef\": 0.30000000000000004, \"num_generations\": 4}";

START_TEST(test_round_trip)
{
    char dir[4096];
    path_of(dir, sizeof dir, "run");
    pt_model *m = pt_test_tiny_llama(37, 2);
    pt_optimizer *opt = rt_adamw(m);
    pt_run_options o;
    opts_for(&o, dir, "grpo", PT_RUN_NEW);
    pt_run *r;
    ck_assert_ok(pt_run_open(&r, &o));
    pt_run_state s;
    pt_run_state_init(&s);
    s.step = 7;
    s.optimizer_steps = 14;
    s.epoch = 3;
    s.cursor = 5;
    s.rows = 11;
    s.seed = ((uint64_t)1 << 60) + 3;              /* above 2^53: a double would round it */
    s.order_rng = ((uint64_t)1 << 63) + 1;
    s.rng = UINT64_MAX;
    ck_assert_ok(pt_run_save(r, m, opt, &s, k_extra));
    pt_run_close(r);
    /* the host JSON as stored: the seed a decimal string */
    char p[4096], *host = NULL;
    snprintf(p, sizeof p, "%s/checkpoints/step-00000007", dir);
    ck_assert_ok(pt_checkpoint_read_host(&host, p));
    ck_assert_msg(strstr(host, "\"seed\":\"1152921504606846979\""), "%s", host);
    ck_assert_msg(strstr(host, "\"rng\":\"18446744073709551615\""), "%s", host);
    ck_assert_msg(strstr(host, "\"command\":\"grpo\""), "%s", host);
    pt_free(host);
    /* resume in a fresh model and optimizer */
    pt_model *m2 = pt_test_tiny_llama(37, 99);
    pt_optimizer *opt2 = rt_adamw(m2);
    opts_for(&o, dir, "grpo", PT_RUN_RESUME_AUTO);
    ck_assert_ok(pt_run_open(&r, &o));
    ck_assert_str_eq(pt_run_resume_dir(r), p);
    pt_run_state t;
    pt_run_state_init(&t);
    char *extra = NULL;
    ck_assert_ok(pt_run_load(&t, &extra, r, m2, opt2));
    ck_assert_int_eq(t.step, 7);
    ck_assert_int_eq(t.optimizer_steps, 14);
    ck_assert_int_eq(t.epoch, 3);
    ck_assert_int_eq(t.cursor, 5);
    ck_assert_int_eq(t.rows, 11);
    ck_assert(t.seed == ((uint64_t)1 << 60) + 3);
    ck_assert(t.order_rng == ((uint64_t)1 << 63) + 1);
    ck_assert(t.rng == UINT64_MAX);
    ck_assert_str_eq(pt_run_last_checkpoint(r), p);
    ck_assert_msg(strstr(extra, "\"entropy_coef\":0.30000000000000004"), "%s", extra);
    ck_assert_msg(strstr(extra, "\"model\":\"/models/tiny\""), "%s", extra);
    ck_assert_msg(!strstr(extra, "\"step\"") && !strstr(extra, "\"seed\""), "%s", extra);
    pt_free(extra);
    /* the weights came back */
    pt_tensor_info a, b;
    pt_tensor_info_init(&a);
    pt_tensor_info_init(&b);
    ck_assert_ok(pt_model_tensor_info(&a, m, 0));
    ck_assert_ok(pt_model_tensor_info(&b, m2, 0));
    ck_assert_int_eq(memcmp(a.data, b.data, a.numel * sizeof *a.data), 0);
    pt_run_close(r);
    pt_optimizer_free(opt2);
    pt_model_free(m2);
    pt_optimizer_free(opt);
    pt_model_free(m);
}
END_TEST

START_TEST(test_trim_and_kind)
{
    char dir[4096], mpath[4096];
    path_of(dir, sizeof dir, "run");
    pt_model *m = pt_test_tiny_llama(37, 3);
    pt_optimizer *opt = rt_adamw(m);
    pt_run_options o;
    opts_for(&o, dir, "sft", PT_RUN_NEW);
    pt_run *r;
    ck_assert_ok(pt_run_open(&r, &o));
    const double secs[] = { 0.5, 0.25, 1.5, 2.0, 4.0 };
    pt_run_state s;
    pt_run_state_init(&s);
    for (int i = 1; i <= 5; i++) {
        char row[128];
        snprintf(row, sizeof row, "{\"step\": %d, \"loss\": 1.5, \"step_seconds\": %g}", i, secs[i - 1]);
        ck_assert_ok(pt_run_log(r, row));
        if (i == 2) {
            s.step = 2;
            ck_assert_ok(pt_run_save(r, m, opt, &s, NULL));
        }
    }
    ck_assert_int_eq(pt_run_rows(r), 5);
    ck_assert_status(pt_run_log(r, "{\"step\": 6, \"time\": 1}"), PT_EINVAL, "\"time\"");
    ck_assert_status(pt_run_log(r, "[1]"), PT_EINVAL, "one JSON object");
    snprintf(mpath, sizeof mpath, "%s", pt_run_metrics_path(r));
    pt_run_close(r);
    /* a goodput row and a row a kill cut short */
    FILE *f = fopen(mpath, "a");
    fputs("{\"step\": 5, \"goodput\": {\"goodput\": 0.5}}\n{\"step\": 6, \"loss\": 1.2", f);
    fclose(f);
    /* every row has a wall-clock time */
    const char *text = read_text(mpath);
    ck_assert_msg(strstr(text, "{\"step\": 1, \"loss\": 1.5, \"step_seconds\": 0.5, \"time\": ") == text, "%s", text);
    /* another kind is refused, naming both */
    opts_for(&o, dir, "grpo", PT_RUN_RESUME_AUTO);
    ck_assert_ok(pt_run_open(&r, &o));
    ck_assert_status(pt_run_load(&s, NULL, r, m, opt), PT_ESTATE, "is a checkpoint of sft, not of grpo");
    pt_run_close(r);
    ck_assert_msg(strstr(read_text(mpath), "\"step\": 5"), "the refused load trimmed the metrics");
    opts_for(&o, dir, "sft", PT_RUN_RESUME_AUTO);
    ck_assert_ok(pt_run_open(&r, &o));
    pt_run_state_init(&s);
    ck_assert_ok(pt_run_load(&s, NULL, r, m, opt));
    ck_assert_int_eq(s.step, 2);
    /* steps 3, 4, 5 are redone: 1.5 + 2 + 4 seconds (the goodput and cut rows are not steps) */
    ck_assert_double_eq(pt_run_lost_seconds(r), 1.5 + 2.0 + 4.0);
    ck_assert_int_eq(pt_run_lost_steps(r), 3);
    text = read_text(mpath);
    ck_assert_msg(strstr(text, "\"step\": 1,") && strstr(text, "\"step\": 2,") && !strstr(text, "\"step\": 3") &&
                  !strstr(text, "goodput") && !strstr(text, "\"step\": 6"), "%s", text);
    /* the trimmed file is still locked, and appends after row 2 */
    pt_run *r2;
    ck_assert_status(pt_run_open(&r2, &o), PT_EBUSY, NULL);
    ck_assert_ok(pt_run_log(r, "{\"step\": 3}"));
    pt_run_close(r);
    text = read_text(mpath);
    ck_assert_msg(strstr(text, "\"step\": 3, \"time\": "), "%s", text);
    /* a later checkpoint would be overwritten by a resume from step 2 */
    char p[4096];
    snprintf(p, sizeof p, "%s/checkpoints/step-00000002", dir);
    opts_for(&o, dir, "sft", PT_RUN_NEW);
    ck_assert_ok(pt_run_open(&r, &o) == PT_EEXIST ? PT_OK : PT_EINTERNAL);
    opts_for(&o, dir, "sft", PT_RUN_RESUME_AUTO);
    ck_assert_ok(pt_run_open(&r, &o));
    s.step = 4;
    ck_assert_ok(pt_run_save(r, m, opt, &s, NULL));
    pt_run_close(r);
    opts_for(&o, dir, "sft", PT_RUN_RESUME_FROM);
    o.resume_from = p;
    ck_assert_ok(pt_run_open(&r, &o));
    ck_assert_status(pt_run_load(&s, NULL, r, m, opt), PT_EEXIST, "is past the resumed step 2");
    pt_run_close(r);
    pt_optimizer_free(opt);
    pt_model_free(m);
}
END_TEST

/* In a child: a file-size limit the third row passes (SIGXFSZ ignored, so
 * the write fails with EFBIG as a full disk fails one). */
START_TEST(test_failed_write)
{
    char dir[4096], mpath[4096];
    path_of(dir, sizeof dir, "run");
    path_of(mpath, sizeof mpath, "m.jsonl");
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = { 200, 200 };
        setrlimit(RLIMIT_FSIZE, &rl);
        pt_run_options o;
        pt_run_options_init(&o);
        o.dir = dir;
        o.kind = "sft";
        o.metrics = mpath;
        pt_run *r;
        if (pt_run_open(&r, &o))
            _exit(10);
        int ok = 0, st = PT_OK;
        for (int i = 1; i <= 10 && !st; i++) {
            char row[128];
            snprintf(row, sizeof row, "{\"step\": %d, \"loss\": 1.25, \"pad\": \"abcdefghijklmnopqrstuvwxyz\"}", i);
            if (!(st = pt_run_log(r, row)))
                ok++;
        }
        bool named = strstr(pt_last_error(), mpath) && strstr(pt_last_error(), "File too large");
        int again = pt_run_log(r, "{\"step\": 99}");
        bool reason = pt_run_metrics_error(r) && !strcmp(pt_run_metrics_error(r), "File too large");
        pt_run_close(r);
        _exit(st == PT_EIO && again == PT_EIO && named && reason ? ok : 20 + (st != PT_EIO) + 2 * !named);
    }
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFEXITED(status));
    int ok = WEXITSTATUS(status);
    /* each row is 89 bytes with its time: two fit in 200, the third does not */
    ck_assert_int_eq(ok, 2);
    const char *text = read_text(mpath);
    size_t len = strlen(text), lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    ck_assert_int_eq(lines, 2);
    ck_assert_int_eq(text[len - 1], '\n');
    /* /dev/full: no space */
    pt_run_options o;
    opts_for(&o, dir, "sft", PT_RUN_OVERWRITE);
    o.metrics = "/dev/full";
    pt_run *r;
    ck_assert_ok(pt_run_open(&r, &o));
    ck_assert_status(pt_run_log(r, "{\"step\": 1}"), PT_ENOSPC, "cannot write the metrics file /dev/full");
    ck_assert_str_eq(pt_run_metrics_error(r), "No space left on device");
    pt_run_close(r);
}
END_TEST

/* pt_run_host_model: the model's path resolved through a symlink (the
 * expected path built from the directory the test made), LoRA rank 4,
 * alpha 8 and targets q|v|down = 1 + 4 + 64; as given when it does not
 * resolve; no "lora" without adapters. */
START_TEST(test_host_model)
{
    char dir[4096], link[4096], want[8192 + 64];
    path_of(dir, sizeof dir, "model");
    path_of(link, sizeof link, "link");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    ck_assert_int_eq(symlink("model", link), 0);
    char *tmp = realpath(g_tmp, NULL);
    ck_assert_ptr_nonnull(tmp);
    snprintf(want, sizeof want, "{\"model\":\"%s/model\",\"lora\":{\"rank\":4,\"alpha\":8,\"targets\":69}}", tmp);
    free(tmp);
    pt_model *m = pt_test_tiny_llama(32, 1);
    char *json = NULL;
    ck_assert_ok(pt_run_host_model(&json, "/no/such/model", m));
    ck_assert_str_eq(json, "{\"model\":\"/no/such/model\"}");
    pt_free(json);
    ck_assert_ok(pt_run_host_model(&json, NULL, m));
    ck_assert_str_eq(json, "{\"model\":\"\"}");
    pt_free(json);
    pt_lora_options lo;
    pt_lora_options_init(&lo);
    lo.rank = 4;
    lo.alpha = 8;
    lo.targets = PT_LORA_Q | PT_LORA_V | PT_LORA_DOWN;
    ck_assert_ok(pt_model_add_lora(m, &lo));
    ck_assert_ok(pt_run_host_model(&json, link, m));
    ck_assert_str_eq(json, want);
    pt_free(json);
    ck_assert_status(pt_run_host_model(&json, link, NULL), PT_EINVAL, "model");
    ck_assert_ptr_null(json);
    ck_assert_status(pt_run_host_model(NULL, link, m), PT_EINVAL, "json");
    pt_model_free(m);
}
END_TEST

START_TEST(test_old_host_json)
{
    /* what posttrain grpo wrote before the run layer (cli_host_new + its fields) */
    const char *grpo = "{\"command\":\"grpo\",\"step\":3,\"seed\":\"18446744073709551615\",\"model\":\"/m\","
                       "\"lora\":{\"rank\":2,\"alpha\":2,\"targets\":5},\"rng\":\"9007199254740993\","
                       "\"order_rng\":\"456\",\"cursor\":2,\"prompts\":7,\"num_generations\":4,"
                       "\"batch_prompts\":2,\"num_iterations\":1,\"optimizer_steps\":6,\"entropy_coef\":0.1,"
                       "\"goodput\":{\"wall\":1.5}}";
    pt_run_state s;
    pt_run_state_init(&s);
    char *kind = NULL, *extra = NULL;
    ck_assert_ok(pt_run_state_from_json(&s, &kind, &extra, grpo));
    ck_assert_str_eq(kind, "grpo");
    ck_assert_int_eq(s.step, 3);
    ck_assert(s.seed == UINT64_MAX);
    ck_assert(s.rng == 9007199254740993ull);
    ck_assert(s.order_rng == 456);
    ck_assert_int_eq(s.cursor, 2);
    ck_assert_int_eq(s.rows, 7);
    ck_assert_int_eq(s.optimizer_steps, 6);
    ck_assert_int_eq(s.epoch, 0);
    ck_assert_str_eq(extra, "{\"model\":\"/m\",\"lora\":{\"rank\":2,\"alpha\":2,\"targets\":5},"
                            "\"num_generations\":4,\"batch_prompts\":2,\"num_iterations\":1,\"entropy_coef\":0.1,"
                            "\"goodput\":{\"wall\":1.5}}");
    pt_free(kind);
    pt_free(extra);
    /* what posttrain sft wrote: epoch and cursor as numbers */
    pt_run_state_init(&s);
    ck_assert_ok(pt_run_state_from_json(&s, &kind, NULL,
                                        "{\"command\":\"sft\",\"step\":4,\"seed\":\"1\",\"epoch\":1,\"cursor\":8}"));
    ck_assert_str_eq(kind, "sft");
    ck_assert_int_eq(s.step, 4);
    ck_assert_int_eq(s.epoch, 1);
    ck_assert_int_eq(s.cursor, 8);
    ck_assert(s.seed == 1);
    pt_free(kind);
    /* the back way: the same keys, a reserved host key refused */
    char *json = NULL;
    ck_assert_ok(pt_run_state_to_json(&json, &s, "sft", "{\"model\":\"/m\"}"));
    ck_assert_str_eq(json, "{\"run_format\":1,\"command\":\"sft\",\"step\":4,\"optimizer_steps\":\"0\","
                           "\"epoch\":\"1\",\"cursor\":\"8\",\"rows\":\"0\",\"seed\":\"1\",\"order_rng\":\"0\","
                           "\"rng\":\"0\",\"model\":\"/m\"}");
    pt_free(json);
    ck_assert_status(pt_run_state_to_json(&json, &s, "sft", "{\"cursor\":1}"), PT_EINVAL, "reserved");
    ck_assert_status(pt_run_state_from_json(&s, NULL, NULL, "{\"command\":\"sft\"}"), PT_EFORMAT, "\"step\"");
    ck_assert_status(pt_run_state_from_json(&s, NULL, NULL, "{\"step\":-1}"), PT_EFORMAT, "\"step\"");
    ck_assert_status(pt_run_state_from_json(&s, NULL, NULL, "{\"step\":1,\"rng\":\"x\"}"), PT_EFORMAT, "\"rng\"");
}
END_TEST

START_TEST(test_interval)
{
    char dir[4096];
    path_of(dir, sizeof dir, "run");
    pt_run_options o;
    opts_for(&o, dir, "sft", PT_RUN_NEW);
    o.save_every = 3;
    pt_run *r;
    ck_assert_ok(pt_run_open(&r, &o));
    char due[64] = "";
    for (int64_t s = 1; s <= 10; s++)
        if (pt_run_save_due(r, s, 10))
            snprintf(due + strlen(due), sizeof due - strlen(due), "%d ", (int)s);
    ck_assert_str_eq(due, "3 6 9 10 ");
    pt_run_close(r);
    /* auto: the first step is due (it times the interval), then Young-Daly */
    pt_model *m = pt_test_tiny_llama(37, 4);
    pt_optimizer *opt = rt_adamw(m);
    opts_for(&o, dir, "sft", PT_RUN_OVERWRITE);
    o.save_auto = true;
    o.mtbf_seconds = 3600;
    ck_assert_ok(pt_run_open(&r, &o));
    ck_assert(pt_run_save_due(r, 1, 100));
    ck_assert_ok(pt_run_note_step(r, 0.25));
    ck_assert_ok(pt_run_note_step(r, 0.75));
    ck_assert_status(pt_run_note_step(r, -1), PT_EINVAL, "seconds");
    pt_run_state s;
    pt_run_state_init(&s);
    s.step = 1;
    ck_assert_ok(pt_run_save(r, m, opt, &s, NULL));
    double c = pt_run_last_save_seconds(r);
    ck_assert(c > 0);
    ck_assert_double_eq(pt_run_mean_step_seconds(r), 0.5);
    /* sqrt(2 * c * 3600) seconds of 0.5 s steps */
    int64_t want = (int64_t)fmax(1.0, round(sqrt(2.0 * c * 3600.0) / 0.5));
    ck_assert_int_eq(pt_run_save_every(r), want);
    ck_assert(!pt_run_save_due(r, 1 + want - 1, 1000) || want == 1);
    ck_assert(pt_run_save_due(r, 1 + want, 1000));
    pt_run_close(r);
    pt_optimizer_free(opt);
    pt_model_free(m);
}
END_TEST

/* A goodput accountant: committed at a save, its totals in the checkpoint,
 * restored on resume with the dropped rows as lost; a rollback. */
START_TEST(test_goodput_and_rollback)
{
    char dir[4096];
    path_of(dir, sizeof dir, "run");
    pt_model *m = pt_test_tiny_llama(37, 5);
    pt_optimizer *opt = rt_adamw(m);
    pt_goodput *gp;
    ck_assert_ok(pt_goodput_create(&gp));
    pt_run_options o;
    opts_for(&o, dir, "sft", PT_RUN_NEW);
    o.goodput = gp;
    pt_run *r;
    ck_assert_ok(pt_run_open(&r, &o));
    ck_assert_int_eq(pt_run_rank(r), 0);
    ck_assert_int_eq(pt_run_size(r), 1);
    int bad = 7;
    ck_assert_ok(pt_run_check_replicas(&bad, r, opt));
    ck_assert_int_eq(bad, -1);
    pt_run_state s;
    pt_run_state_init(&s);
    /* a rollback before any checkpoint: the rows go, start again */
    ck_assert_ok(pt_run_log(r, "{\"step\": 1, \"step_seconds\": 0.5}"));
    ck_assert_status(pt_run_rollback(&s, NULL, r, m, opt), PT_ENOTFOUND, "no checkpoint yet");
    ck_assert_str_eq(read_text(pt_run_metrics_path(r)), "");
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_STEP, 1.5));
    ck_assert_ok(pt_goodput_step_done(gp));
    ck_assert_ok(pt_run_log(r, "{\"step\": 1, \"step_seconds\": 1.5}"));
    s.step = 1;
    ck_assert_status(pt_run_save(r, m, opt, &s, "{\"goodput\": 1}"), PT_EINVAL, "goodput");
    ck_assert_ok(pt_run_save(r, m, opt, &s, "{\"model\": \"m\"}"));
    char *host = NULL;
    ck_assert_ok(pt_checkpoint_read_host(&host, pt_run_last_checkpoint(r)));
    ck_assert_msg(strstr(host, "\"goodput\":{") && strstr(host, "\"steps_kept\":1") &&
                  strstr(host, "\"model\":\"m\""), "%s", host);
    pt_free(host);
    /* two more steps, then a rollback to step 1: their time is lost, their rows dropped */
    for (int i = 2; i <= 3; i++) {
        char row[64];
        snprintf(row, sizeof row, "{\"step\": %d, \"step_seconds\": 0.25}", i);
        ck_assert_ok(pt_goodput_add(gp, PT_TIME_STEP, 0.25));
        ck_assert_ok(pt_goodput_step_done(gp));
        ck_assert_ok(pt_run_log(r, row));
    }
    char *extra = NULL;
    s.step = 99;
    ck_assert_ok(pt_run_rollback(&s, &extra, r, m, opt));
    ck_assert_int_eq(s.step, 1);
    ck_assert_str_eq(extra, "{\"model\":\"m\"}");
    pt_free(extra);
    pt_goodput_report rep;
    pt_goodput_report_init(&rep);
    ck_assert_ok(pt_goodput_get(&rep, gp));
    ck_assert_int_eq(rep.steps_kept, 1);
    ck_assert_int_eq(rep.steps_lost, 2);
    ck_assert_double_eq(rep.seconds[PT_TIME_STEP], 1.5);
    ck_assert_double_eq(rep.seconds[PT_TIME_LOST], 0.5);
    ck_assert_int_eq(pt_run_lost_steps(r), 2);
    /* a row for step 2 again, then the process "dies" */
    ck_assert_ok(pt_run_log(r, "{\"step\": 2, \"step_seconds\": 4}"));
    pt_run_close(r);
    pt_goodput_free(gp);
    /* ... 100 s before the relaunch: the rows' "time" moved back */
    char metrics[512];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", dir);
    rt_age_rows(metrics, 100.0);
    /* a new process: the totals come back, the redone step 2 is lost time */
    ck_assert_ok(pt_goodput_create(&gp));
    opts_for(&o, dir, "sft", PT_RUN_RESUME_AUTO);
    o.goodput = gp;
    ck_assert_ok(pt_run_open(&r, &o));
    pt_run_state_init(&s);
    ck_assert_ok(pt_run_load(&s, &extra, r, m, opt));
    ck_assert_str_eq(extra, "{\"model\":\"m\"}");
    pt_free(extra);
    ck_assert_ok(pt_goodput_get(&rep, gp));
    ck_assert_int_eq(rep.steps_kept, 1);
    ck_assert_int_eq(rep.steps_lost, 1);
    ck_assert_double_eq(rep.seconds[PT_TIME_STEP], 1.5);
    /* the redone step 2, and the stall plus relaunch since its row */
    const double gap = pt_run_relaunch_seconds(r);
    ck_assert_msg(gap >= 100.0 && gap < 160.0, "relaunch gap %g", gap);
    ck_assert_double_eq_tol(rep.seconds[PT_TIME_LOST], 4.0 + gap, 1e-9);
    pt_run_close(r);
    pt_goodput_free(gp);
    pt_optimizer_free(opt);
    pt_model_free(m);
}
END_TEST

/* Bad arguments: a specific status and a message naming the function. */
START_TEST(test_misuse)
{
    char dir[4096];
    path_of(dir, sizeof dir, "run");
    pt_run_options o;
    pt_run *r = (pt_run *)1;
    opts_for(&o, dir, "sft", PT_RUN_NEW);
    ck_assert_status(pt_run_open(NULL, &o), PT_EINVAL, "pt_run_open: out is NULL");
    ck_assert_status(pt_run_open(&r, NULL), PT_EINVAL, "opts is NULL");
    ck_assert_ptr_null(r); /* cleared first */
    o.keep_last = -1;
    ck_assert_status(pt_run_open(&r, &o), PT_EINVAL, "keep_last");
    opts_for(&o, dir, "sft", PT_RUN_NEW);
    o.save_auto = true;
    ck_assert_status(pt_run_open(&r, &o), PT_EINVAL, "mtbf_seconds");
    opts_for(&o, dir, "sft", 9);
    ck_assert_status(pt_run_open(&r, &o), PT_EINVAL, "start");
    opts_for(&o, NULL, "sft", PT_RUN_NEW);
    ck_assert_status(pt_run_open(&r, &o), PT_EINVAL, "dir");
    o.size = 3;
    ck_assert_status(pt_run_open(&r, &o), PT_EINVAL, "pt_run_options_init");
    char deep[4096];
    path_of(deep, sizeof deep, "no/such/parent");
    opts_for(&o, deep, "sft", PT_RUN_NEW);
    ck_assert_status(pt_run_open(&r, &o), PT_EIO, "no/such/parent");
    ck_assert(!exists(g_tmp, "no"));
    /* NULL handles: the getters answer, the calls refuse */
    pt_run_close(NULL);
    ck_assert_ptr_null(pt_run_resume_dir(NULL));
    ck_assert_ptr_null(pt_run_last_checkpoint(NULL));
    ck_assert(!pt_run_save_due(NULL, 1, 1));
    ck_assert_int_eq(pt_run_rows(NULL), 0);
    ck_assert_int_eq(pt_run_size(NULL), 1);
    pt_run_state s;
    pt_run_state_init(&s);
    ck_assert_status(pt_run_save(NULL, NULL, NULL, &s, NULL), PT_EINVAL, "pt_run_save: r is NULL");
    ck_assert_status(pt_run_log(NULL, "{}"), PT_EINVAL, "pt_run_log");
    ck_assert_status(pt_run_load(&s, NULL, NULL, NULL, NULL), PT_EINVAL, "pt_run_load");
    ck_assert_status(pt_run_trim_metrics(NULL, 0), PT_EINVAL, "pt_run_trim_metrics");
    opts_for(&o, dir, "sft", PT_RUN_NEW);
    ck_assert_ok(pt_run_open(&r, &o));
    ck_assert_status(pt_run_log(r, NULL), PT_EINVAL, "row_json is NULL");
    ck_assert_status(pt_run_trim_metrics(r, -1), PT_EINVAL, "step");
    ck_assert_status(pt_run_load(&s, NULL, r, NULL, NULL), PT_ESTATE, "starts fresh");
    s.size = 1;
    char *json = (char *)1;
    ck_assert_status(pt_run_state_to_json(&json, &s, "sft", NULL), PT_EINVAL, "pt_run_state_init");
    ck_assert_ptr_null(json);
    pt_run_state_init(&s);
    s.cursor = -1;
    ck_assert_status(pt_run_state_to_json(&json, &s, "sft", NULL), PT_EINVAL, "cursor");
    pt_run_close(r);
    pt_run_input in = { "--model", dir, false };
    ck_assert_status(pt_run_check_output("--out", dir, &in), PT_EINVAL, "pt_run_check_output: --out");
    ck_assert_ok(pt_run_check_output("--out", NULL, &in));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("run");
    TCase *tc = tcase_create("run");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_lock);
    tcase_add_test(tc, test_leftovers);
    tcase_add_test(tc, test_start_modes);
    tcase_add_test(tc, test_overlap);
    tcase_add_test(tc, test_retention);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_trim_and_kind);
    tcase_add_test(tc, test_failed_write);
    tcase_add_test(tc, test_old_host_json);
    tcase_add_test(tc, test_host_model);
    tcase_add_test(tc, test_interval);
    tcase_add_test(tc, test_goodput_and_rollback);
    tcase_add_test(tc, test_misuse);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
