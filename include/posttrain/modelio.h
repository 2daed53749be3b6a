/* libposttrain public API: modelio (being written; see docs/api.md). */
#ifndef POSTTRAIN_MODELIO_H
#define POSTTRAIN_MODELIO_H

#include "posttrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif
