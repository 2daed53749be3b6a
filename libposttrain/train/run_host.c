/* What every host of the run layer does the same way around its own loop
 * (include/posttrain/run.h): the end of a step (the replica check before a
 * checkpoint, then the host's save, each in its goodput section), and the
 * weights a run started from, for a rollback with no checkpoint yet. */
#include "core/core.h"
#include "posttrain/modelio.h"
#include "posttrain/run.h"

#include <string.h>

int pt_run_step_end(int *action, pt_run *run, const pt_optimizer *opt, int64_t step, int64_t total,
                    pt_run_save_fn save, void *user)
{
    PT_CHECK_NULL(action);
    *action = PT_RUN_STOP;
    PT_CHECK_NULL(run);
    PT_CHECK_NULL(opt);
    PT_CHECK_NULL(save);
    PT_CHECK_ARG(step >= 1 && step <= total, step, "%lld is not a step of %lld", (long long)step, (long long)total);
    const bool due = pt_run_save_due(run, step, total);
    *action = PT_RUN_CONTINUE;
    if (!due && !pt_run_check_due(run, step) && step != total)
        return PT_OK;
    (void)pt_run_section(run, due ? PT_TIME_SAVE : PT_TIME_WAIT);
    int st = pt_run_check(action, NULL, run, opt);
    if (!st && due)
        st = save(user);
    (void)pt_run_section(run, -1);
    return st;
}

int pt_run_reload_model(pt_model *model, const char *model_dir, const pt_lora_options *lora)
{
    PT_CHECK_NULL(model);
    PT_CHECK_NULL(model_dir);
    pt_model *fresh = NULL;
    int st = pt_model_load_dir(&fresh, model_dir, NULL);
    if (!st && lora)
        st = pt_model_add_lora(fresh, lora);
    const size_t n = pt_model_tensor_count(model);
    if (!st && pt_model_tensor_count(fresh) != n)
        st = pt__err(PT_ESTATE, "%s: %s no longer matches the model being trained", __func__, model_dir);
    /* every tensor checked before the first is copied: model is unchanged on error */
    for (int copy = 0; copy < 2; copy++)
        for (size_t i = 0; !st && i < n; i++) {
            pt_tensor_info ti, tf;
            pt_tensor_info_init(&ti);
            pt_tensor_info_init(&tf);
            if (pt_model_tensor_info(&ti, model, i) || pt_model_tensor_info(&tf, fresh, i) ||
                ti.numel != tf.numel || strcmp(ti.name, tf.name))
                st = pt__err(PT_ESTATE, "%s: %s no longer matches the model being trained", __func__, model_dir);
            else if (copy && ti.data) /* NULL: a frozen base kept in BF16, which no step changes */
                memcpy(ti.data, tf.data, ti.numel * sizeof *ti.data);
        }
    pt_model_free(fresh);
    return st;
}
