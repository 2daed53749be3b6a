/* Helpers shared by the Check suites. */
#ifndef PT_TESTUTIL_H
#define PT_TESTUTIL_H

#include <check.h>

/* Check's ck_assert_msg (and every ck_assert_* built on it) calls
 * _mark_point on each assertion that holds, and _mark_point writes a record
 * to Check's message file and flushes it: a write(2) per passing assertion.
 * Tests that check every element of a tensor made millions of them
 * (gguf_export spent 70% of its time there, 4 minutes under ASan).  Here
 * only a failing assertion calls into Check; what is lost is the "last
 * passing point" that fork mode reports for a test that crashes, and the
 * suites run with CK_FORK=no. */
#undef ck_assert_msg
#define ck_assert_msg(expr, ...)                                                                   \
    ((expr) ? (void)0                                                                              \
            : _ck_assert_failed(__FILE__, __LINE__, "Assertion '" #expr "' failed", ##__VA_ARGS__))
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "posttrain/posttrain.h"

/* 1 in the AddressSanitizer build (make test's second suite), whose job
 * is memory errors: a long training curve there may run fewer steps than
 * in the release suite (which runs them all), and says so. */
#if defined(__SANITIZE_ADDRESS__)
#define PT_TEST_SANITIZED 1
#else
#define PT_TEST_SANITIZED 0
#endif

/* Directory of the committed test files (tests/ in the source tree). */
#ifndef PT_TEST_SRCDIR
#error "PT_TEST_SRCDIR must be defined by the build"
#endif

/* ../shared/data next to the project, or $PT_SHARED_DATA.  Returns NULL and
 * prints why when it is absent, so a test can skip loudly. */
static inline const char *pt_test_shared_data(const char *who)
{
    static char path[4096];
    const char *env = getenv("PT_SHARED_DATA");
    if (env && *env)
        snprintf(path, sizeof path, "%s", env);
    else
        snprintf(path, sizeof path, "%s/../../shared/data", PT_TEST_SRCDIR);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "SKIP %s: shared data not found at %s (set PT_SHARED_DATA)\n", who, path);
        return NULL;
    }
    return path;
}

/* Assert a status and that the last-error message mentions `needle`. */
#define ck_assert_status(expr, expected, needle)                                             \
    do {                                                                                     \
        int st_ = (expr);                                                                    \
        ck_assert_msg(st_ == (expected), "%s returned %s, expected %s (%s)", #expr,           \
                      pt_status_name(st_), pt_status_name(expected), pt_last_error());       \
        const char *needle_ = (needle);                                                      \
        if (needle_ != NULL)                                                                 \
            ck_assert_msg(strstr(pt_last_error(), needle_) != NULL,                          \
                          "message '%s' does not mention '%s'", pt_last_error(), needle_);   \
    } while (0)

#define ck_assert_ok(expr)                                                                   \
    do {                                                                                     \
        int st_ = (expr);                                                                    \
        ck_assert_msg(st_ == PT_OK, "%s failed: %s: %s", #expr, pt_status_name(st_),         \
                      pt_last_error());                                                      \
    } while (0)

/* The tiny model shape the suites build on: hidden 16, intermediate 24, 2
 * layers, 4 query and 2 KV heads of 4, 64 positions, q/k/v biases for Qwen2
 * and q/k norms for Qwen3; everything else at pt_model_config_init's
 * defaults for the caller to change. */
static inline void pt_test_tiny_config(pt_model_config *c, int arch, int vocab)
{
    ck_assert_ok(pt_model_config_init(c));
    c->arch = arch;
    c->vocab_size = vocab;
    c->hidden_size = 16;
    c->intermediate_size = 24;
    c->num_hidden_layers = 2;
    c->num_attention_heads = 4;
    c->num_key_value_heads = 2;
    c->head_dim = 4;
    c->max_position_embeddings = 64;
    c->attention_bias = arch == PT_ARCH_QWEN2;
    c->qk_norm = arch == PT_ARCH_QWEN3;
}

/* A random model of config c (initializer range 0.2), its gradients
 * allocated. */
static inline pt_model *pt_test_model_with_grads(pt_model_config *c, uint64_t seed)
{
    c->initializer_range = 0.2;
    pt_model *m;
    ck_assert_ok(pt_model_create(&m, c, seed));
    ck_assert_ok(pt_model_alloc_grads(m));
    return m;
}

/* A tied tiny llama of pt_test_tiny_config's shape with initializer range
 * 0.2 (peaked enough that training moves the loss) and its gradients
 * allocated: the model of the SFT and GRPO step suites. */
static inline pt_model *pt_test_tiny_llama(int vocab, uint64_t seed)
{
    pt_model_config c;
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, vocab);
    c.tie_word_embeddings = true;
    return pt_test_model_with_grads(&c, seed);
}

/* A batch of `batch` rows of `seq` ids and their targets (NULL: none). */
static inline pt_batch pt_test_batch(int batch, int seq, const int32_t *ids, const int32_t *targets)
{
    pt_batch b;
    pt_batch_init(&b);
    b.batch = batch;
    b.seq = seq;
    b.input_ids = ids;
    b.targets = targets;
    return b;
}

/* A batch of one row: n ids and their targets (NULL: none). */
static inline pt_batch pt_test_row_batch(const int32_t *ids, const int32_t *targets, int n)
{
    return pt_test_batch(1, n, ids, targets);
}

/* Run one suite; returns the process exit code. */
static inline int pt_test_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    /* Check's fork mode and libgomp do not mix: a forked child inherits a
     * libgomp thread pool it cannot use (../shared/docs/performance.md). */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
