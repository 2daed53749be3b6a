/* libposttrain public API: train (being written; see docs/api.md). */
#ifndef POSTTRAIN_TRAIN_H
#define POSTTRAIN_TRAIN_H

#include "posttrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif
