/* check_sgd_step BEFORE_DIR AFTER_DIR DATA.jsonl
 * After `posttrain sft --optimizer sgd --lr 1 --momentum 0 --weight-decay 0
 * --max-grad-norm 0 --steps 1 --batch-size 1` on a one-row {"input_ids"}
 * file, the saved weights must equal the loaded ones minus the gradient of
 * that row's mean next-token loss (the gradient itself is checked against
 * PyTorch by the parity suite).  Prints "1 passed, 0 failed" or fails. */
#include "posttrain/posttrain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

static int fail(const char *what, int st)
{
    fprintf(stderr, "check_sgd_step: %s: %s: %s\n", what, pt_status_name(st), pt_last_error());
    printf("0 passed, 1 failed\n");
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: check_sgd_step BEFORE_DIR AFTER_DIR DATA.jsonl\n");
        return 2;
    }
    pt_model *before, *after;
    int st;
    if ((st = pt_model_load_dir(&before, argv[1], NULL)))
        return fail(argv[1], st);
    if ((st = pt_model_load_dir(&after, argv[2], NULL)))
        return fail(argv[2], st);
    pt_dataset_options o;
    pt_dataset_options_init(&o);
    o.batch_size = 1;
    pt_dataset *d;
    if ((st = pt_dataset_load_jsonl(&d, argv[3], NULL, &o)))
        return fail(argv[3], st);
    pt_batch b;
    pt_batch_init(&b);
    const float *w;
    if ((st = pt_dataset_next_batch(&b, &w, d)))
        return fail("batch", st);
    pt_context *ctx;
    float loss;
    if ((st = pt_context_create(&ctx, before, 1, b.seq)) || (st = pt_model_alloc_grads(before)) ||
        (st = pt_model_loss(ctx, &b, w, true, &loss)))
        return fail("gradient", st);
    double worst = 0, moved = 0;
    const char *worst_name = "";
    for (size_t i = 0; i < pt_model_tensor_count(before); i++) {
        const pt_tensor_ref *t = pt__model_tensor(before, i);
        const pt_tensor_ref *u = pt__model_find_tensor(after, t->name);
        if (!u || u->numel != t->numel) {
            fprintf(stderr, "check_sgd_step: %s missing or resized in %s\n", t->name, argv[2]);
            printf("0 passed, 1 failed\n");
            return 1;
        }
        for (size_t j = 0; j < t->numel; j++) {
            double expect = (double)t->data[j] - (double)t->grad[j];
            double err = fabs((double)u->data[j] - expect) / (1.0 + fabs(expect));
            moved = fmax(moved, fabs((double)u->data[j] - t->data[j]));
            if (err > worst) {
                worst = err;
                worst_name = t->name;
            }
        }
    }
    printf("loss %.6f; largest change %.3g; worst relative error %.3g (%s)\n", (double)loss, moved, worst,
           worst_name);
    pt_context_free(ctx);
    pt_dataset_free(d);
    pt_model_free(before);
    pt_model_free(after);
    if (worst > 1e-6 || moved == 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    printf("1 passed, 0 failed\n");
    return 0;
}
