/* The public API as a host sees it, through libposttrain.so. */
#include "testutil.h"

START_TEST(test_version)
{
    ck_assert_int_eq(pt_version_number(), PT_VERSION_NUMBER);
    ck_assert_str_eq(pt_version_string(), PT_VERSION_STRING);
    char expect[32];
    snprintf(expect, sizeof expect, "%d.%d.%d", PT_VERSION_MAJOR, PT_VERSION_MINOR, PT_VERSION_PATCH);
    ck_assert_str_eq(pt_version_string(), expect);
    /* Exported, and names the BLIS release and its kernel set. */
    const char *blas = pt_blas_info();
    ck_assert_msg(!strncmp(blas, "BLIS ", 5) && strstr(blas, " kernels (") != NULL, "%s", blas);
}
END_TEST

START_TEST(test_public_errors)
{
    pt_clear_error();
    ck_assert_str_eq(pt_last_error(), "");
    ck_assert_int_eq(pt_set_num_threads(0), PT_EINVAL);
    ck_assert_int_eq(pt_last_status(), PT_EINVAL);
    ck_assert_ptr_nonnull(strstr(pt_last_error(), "pt_set_num_threads"));
    ck_assert_str_eq(pt_status_name(PT_EINVAL), "PT_EINVAL");
    ck_assert_str_eq(pt_status_str(PT_ENOSPC), "no space left on device");
    ck_assert_int_eq(pt_set_log_callback((pt_log_fn)0, 0, NULL), PT_OK);
    ck_assert_int_eq(pt_set_num_threads(2), PT_OK);
    ck_assert_int_eq(pt_get_num_threads(), 2);
}
END_TEST

static int always_stop(void *p)
{
    ++*(int *)p;
    return 1;
}

START_TEST(test_public_abort)
{
    int calls = 0;
    ck_assert_int_eq(pt_set_abort_callback(always_stop, &calls), PT_OK);
    ck_assert_int_eq(pt_check_abort(), PT_ECANCELLED);
    ck_assert_int_eq(calls, 1);
    ck_assert_int_eq(pt_set_abort_callback(NULL, NULL), PT_OK);
    ck_assert_int_eq(pt_check_abort(), PT_OK);
}
END_TEST

/* The deprecated names (docs/api.md, "Names") are still exported and do
 * what their replacements do: a host written against them links and runs. */
START_TEST(test_deprecated_names)
{
    pt_tokenizer *tok;
    ck_assert_int_eq(pt_tokenizer_create_bytes(&tok), PT_OK);
    pt_decode_stream *a = NULL, *b = NULL;
    ck_assert_int_eq(pt_decode_stream_create(&a, tok, 0), PT_OK);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    ck_assert_int_eq(pt_decode_stream_new(&b, tok, 0), PT_OK);
    pt_chat_template *old_tpl = NULL;
    ck_assert_int_eq(pt_chat_template_from_name(&old_tpl, "ChatML"), PT_OK);
    pt_chat_template *none = NULL;
    ck_assert_int_eq(pt_chat_template_from_name(&none, NULL), PT_EINVAL);
    ck_assert_ptr_null(none);
#pragma GCC diagnostic pop
    const char *ta, *tb;
    size_t na, nb;
    ck_assert_int_eq(pt_decode_stream_step(&ta, &na, a, 'h'), PT_OK);
    ck_assert_int_eq(pt_decode_stream_step(&tb, &nb, b, 'h'), PT_OK);
    ck_assert(na == 1 && nb == 1 && ta[0] == 'h' && tb[0] == 'h');
    pt_chat_template *tpl = NULL;
    ck_assert_int_eq(pt_chat_template_create(&tpl, "chatml"), PT_OK);
    ck_assert_str_eq(pt_chat_template_name(tpl), pt_chat_template_name(old_tpl));
    ck_assert_str_eq(pt_chat_template_name(tpl), "chatml");
    pt_chat_template_free(tpl);
    pt_chat_template_free(old_tpl);
    pt_decode_stream_free(a);
    pt_decode_stream_free(b);
    pt_tokenizer_free(tok);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("public");
    TCase *tc = tcase_create("public");
    tcase_add_test(tc, test_version);
    tcase_add_test(tc, test_public_errors);
    tcase_add_test(tc, test_public_abort);
    tcase_add_test(tc, test_deprecated_names);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
