/* libposttrain public API: chat (being written; see docs/api.md). */
#ifndef POSTTRAIN_CHAT_H
#define POSTTRAIN_CHAT_H

#include "posttrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif
