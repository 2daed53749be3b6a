/* Internals of the SFT dataset, shared by its two files (dataset.c: creation,
 * options and free, the evaluation split, shuffling, batches, eval loss and
 * positions; dataset_load.c: examples from JSONL rows and pt_dataset_add):
 * the example and dataset structs and the creation both use. */
#ifndef PT_TRAIN_DATASET_INTERNAL_H
#define PT_TRAIN_DATASET_INTERNAL_H

#include "posttrain/train.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct example {
    int32_t *ids;
    uint8_t *mask;
    int len;
} example;

struct pt_dataset {
    pt_dataset_options opts;
    char *chat_template_name;
    example *ex;
    size_t n_ex, cap_ex;
    size_t *train, *eval; /* indices into ex */
    size_t n_train, n_eval;
    bool split_done;
    size_t *order;        /* this epoch's permutation of train */
    int64_t epoch, cursor;
    bool order_valid;
    pt_dataset_stats stats;
    /* batch buffers */
    int32_t *b_ids, *b_tgt, *b_pos, *b_seg;
    float *b_w;
    const example **b_rows; /* batch_size: the rows of an unpacked batch */
};

/* pt_dataset_create for the public function `func` (its messages). */
int pt__dataset_create_for(pt_dataset **out, const pt_dataset_options *opts, const char *func);

#endif
