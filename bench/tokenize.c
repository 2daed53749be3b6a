/* Tokenizer benchmark: encode ~1 MiB of English text with the GPT-2 and Qwen3
 * tokenizers (and Llama-3, Llama-2 SentencePiece when present), single
 * thread, and run the Hugging Face tokenizers anchor
 * (../shared/anchors/tokenizers_bench.js) on the same text in the same run.
 *
 * Text: the anchor's default corpus, rebuilt byte for byte: every regular file
 * of /usr/share/common-licenses sorted by name, each followed by "\n", the
 * concatenation repeated up to 1,048,576 bytes and cut there (not inside a
 * UTF-8 sequence).  The licence texts are English prose.
 *
 * Usage: bench_tokenize [--tokenizers DIR] [--anchor FILE.js] [--node-modules DIR]
 *                       [--runs N] [--no-anchor] [NAME ...]
 * NAME defaults to gpt2 qwen3; DIR defaults to <shared>/data/tokenizers, where
 * <shared> is $PT_SHARED_DIR or ../shared next to the source tree.
 * The anchor needs the reference installed from the npm registry:
 *   (cd build-node && npm install @anush008/tokenizers@0.6.0)
 * and --node-modules build-node/node_modules (or NODE_PATH). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_util.h"
#include "posttrain/tokenizer.h"

#define TARGET (1u << 20)

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *build_corpus(size_t *len)
{
    const char *dir = "/usr/share/common-licenses";
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char *names[512];
    int nn = 0;
    struct dirent *e;
    while ((e = readdir(d)) && nn < 512) {
        char p[4096];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (lstat(p, &st) == 0 && S_ISREG(st.st_mode))
            names[nn++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)nn, sizeof *names, cmp_str);
    size_t cap = 1 << 22, n = 0;
    char *one = malloc(cap);
    for (int i = 0; i < nn; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        FILE *f = fopen(p, "rb");
        if (f) {
            size_t r;
            while (n + 65536 < cap && (r = fread(one + n, 1, 65536, f)) > 0)
                n += r;
            fclose(f);
        }
        one[n++] = '\n';
        free(names[i]);
    }
    if (n == 0) {
        free(one);
        return NULL;
    }
    char *buf = malloc(TARGET + 1);
    size_t m = 0;
    while (m < TARGET) {
        size_t k = n < TARGET - m ? n : TARGET - m;
        memcpy(buf + m, one, k);
        m += k;
    }
    free(one);
    /* do not cut inside a UTF-8 sequence */
    size_t end = m;
    while (end > 0 && ((unsigned char)buf[end - 1] & 0xC0) == 0x80)
        end--;
    if (end > 0 && (unsigned char)buf[end - 1] >= 0xC0)
        end--;
    if (end != m && ((unsigned char)buf[m - 1] & 0x80))
        m = end;
    buf[m] = '\0';
    *len = m;
    return buf;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The shared/ folder: $PT_SHARED_DIR, else next to the source tree (found
 * from the executable: build-x/bench/bench_tokenize), else /work/shared. */
static const char *find_shared(void)
{
    static char buf[8192];
    const char *env = getenv("PT_SHARED_DIR");
    if (env && *env && is_dir(env))
        return env;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *s = strrchr(exe, '/');
        if (s) {
            *s = '\0';
            snprintf(buf, sizeof buf, "%s/../../../shared", exe);
            if (is_dir(buf))
                return buf;
        }
    }
    return "/work/shared";
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct result {
    const char *name;
    size_t tokens;
    double warm_median_s;
} result;

int main(int argc, char **argv)
{
    const char *tokdir = NULL, *anchor = NULL, *node_modules = getenv("NODE_PATH");
    int runs = 5, no_anchor = 0;
    const char *names[8];
    int nnames = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokenizers") == 0 && i + 1 < argc)
            tokdir = argv[++i];
        else if (strcmp(argv[i], "--anchor") == 0 && i + 1 < argc)
            anchor = argv[++i];
        else if (strcmp(argv[i], "--node-modules") == 0 && i + 1 < argc)
            node_modules = argv[++i];
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-anchor") == 0)
            no_anchor = 1;
        else if (nnames < 8)
            names[nnames++] = argv[i];
    }
    if (runs < 1 || runs > 50)
        runs = 5;
    if (nnames == 0) {
        names[nnames++] = "gpt2";
        names[nnames++] = "qwen3";
    }
    char defdir[4096], defanchor[4096];
    const char *shared = find_shared();
    snprintf(defdir, sizeof defdir, "%s/data/tokenizers", shared);
    snprintf(defanchor, sizeof defanchor, "%s/anchors/tokenizers_bench.js", shared);
    if (!tokdir)
        tokdir = defdir;
    if (!anchor)
        anchor = defanchor;

    size_t len = 0;
    char *text = build_corpus(&len);
    if (!text) {
        fprintf(stderr, "bench_tokenize: cannot read /usr/share/common-licenses\n");
        return 1;
    }
    printf("corpus: /usr/share/common-licenses (anchor's default corpus), %zu bytes\n", len);
    result res[8];
    int nres = 0;
    for (int k = 0; k < nnames; k++) {
        char path[4096];
        if (strstr(names[k], ".json") || strchr(names[k], '/'))
            snprintf(path, sizeof path, "%s", names[k]);
        else
            snprintf(path, sizeof path, "%s/%s/tokenizer.json", tokdir, names[k]);
        pt_tokenizer *tok = NULL;
        double t0 = bench_now();
        int st = pt_tokenizer_load(&tok, path);
        double load = bench_now() - t0;
        if (st) {
            fprintf(stderr, "bench_tokenize: %s: %s: %s\n", path, pt_status_name(st), pt_last_error());
            continue;
        }
        int32_t *ids = NULL;
        size_t n = 0;
        t0 = bench_now();
        st = pt_tokenizer_encode(&ids, &n, tok, text, len, 0);
        double cold = bench_now() - t0;
        if (st) {
            fprintf(stderr, "bench_tokenize: encode: %s\n", pt_last_error());
            return 1;
        }
        pt_free(ids);
        double warm[50], cpu[50];
        for (int r = 0; r < runs; r++) {
            size_t n2 = 0;
            double c0 = cpu_now();
            t0 = bench_now();
            pt_tokenizer_encode(&ids, &n2, tok, text, len, 0);
            warm[r] = bench_now() - t0;
            cpu[r] = cpu_now() - c0;
            if (n2 != n) {
                fprintf(stderr, "bench_tokenize: token count changed between runs\n");
                return 1;
            }
            if (r + 1 < runs)
                pt_free(ids);
        }
        double best = warm[0];
        for (int r = 1; r < runs; r++)
            if (warm[r] < best)
                best = warm[r];
        double cpu_sum = 0, wall_sum = 0;
        for (int r = 0; r < runs; r++) {
            cpu_sum += cpu[r];
            wall_sum += warm[r];
        }
        double med = bench_median(warm, runs);
        char *dec = NULL;
        size_t dl = 0;
        t0 = bench_now();
        pt_tokenizer_decode(&dec, &dl, tok, ids, n, 0);
        double dect = bench_now() - t0;
        int round = dec && dl == len && memcmp(dec, text, len) == 0;
        pt_free(dec);
        pt_free(ids);
        printf("\n[%s] load %.0f ms; tokens=%zu (%.2f bytes/token)\n", names[k], load * 1e3, n, (double)len / (double)n);
        printf("  encode cold      : %.1f ms = %.3f M tok/s, %.2f MB/s\n", cold * 1e3, (double)n / cold / 1e6,
               (double)len / cold / 1e6);
        printf("  encode warm med  : %.1f ms = %.3f M tok/s, %.2f MB/s (cpu/wall %.2f)\n", med * 1e3,
               (double)n / med / 1e6, (double)len / med / 1e6, cpu_sum / wall_sum);
        printf("  encode warm best : %.1f ms = %.3f M tok/s, %.2f MB/s\n", best * 1e3, (double)n / best / 1e6,
               (double)len / best / 1e6);
        printf("  decode           : %.1f ms (%s)\n", dect * 1e3, round ? "round-trips" : "differs from input");
        res[nres].name = names[k];
        res[nres].tokens = n;
        res[nres].warm_median_s = med;
        nres++;
        pt_tokenizer_free(tok);
    }
    free(text);
    if (no_anchor)
        return 0;
    struct stat sb;
    if (stat(anchor, &sb) != 0 || !node_modules) {
        printf("\nanchor: skipped (%s; install the reference with `npm install @anush008/tokenizers@0.6.0` "
               "into an ignored directory and pass --node-modules DIR/node_modules)\n",
               stat(anchor, &sb) != 0 ? "anchor script not found" : "no --node-modules / NODE_PATH");
        return 0;
    }
    char cmd[16384];
    int o = snprintf(cmd, sizeof cmd, "NODE_PATH='%s' node --expose-gc '%s' --tokenizers '%s' --runs %d", node_modules,
                     anchor, tokdir, runs);
    for (int k = 0; k < nres && o < (int)sizeof cmd - 256; k++)
        o += snprintf(cmd + o, sizeof cmd - (size_t)o, " '%s'", res[k].name);
    printf("\nanchor: %s\n", cmd);
    fflush(stdout);
    char line[16384];
    if (bench_run_capture(cmd, "JSON ", line, sizeof line) != 0) {
        printf("anchor: failed (no JSON line)\n");
        return 0;
    }
    printf("\nsummary (warm median wall time, single thread; ratio = libposttrain / reference; on a busy\n"
           "machine compare the cpu/wall figures too):\n");
    for (int k = 0; k < nres; k++) {
        char key[256];
        snprintf(key, sizeof key, "\"name\":\"%s\"", res[k].name);
        const char *p = strstr(line, key);
        const char *q = p ? strstr(p, "\"warm_median_ms\":") : NULL;
        const char *tq = p ? strstr(p, "\"tokens\":") : NULL;
        if (!q || !tq) {
            printf("  %-10s reference result missing\n", res[k].name);
            continue;
        }
        double ref_ms = atof(q + strlen("\"warm_median_ms\":"));
        long ref_tokens = atol(tq + strlen("\"tokens\":"));
        double ours = (double)res[k].tokens / res[k].warm_median_s;
        double theirs = (double)ref_tokens / (ref_ms / 1e3);
        printf("  %-10s ours %.3f M tok/s, reference %.3f M tok/s, ratio %.2fx%s\n", res[k].name, ours / 1e6,
               theirs / 1e6, ours / theirs,
               (long)res[k].tokens == ref_tokens ? " (same token count)" : " (TOKEN COUNT DIFFERS)");
    }
    return 0;
}
