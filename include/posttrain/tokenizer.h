/* libposttrain public API: tokenizer (being written; see docs/api.md). */
#ifndef POSTTRAIN_TOKENIZER_H
#define POSTTRAIN_TOKENIZER_H

#include "posttrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif
