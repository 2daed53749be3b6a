/* libposttrain: post-training (SFT, GRPO) of small Llama-family language
 * models on CPUs.  This umbrella header includes the whole public API. */
#ifndef POSTTRAIN_POSTTRAIN_H
#define POSTTRAIN_POSTTRAIN_H

#include "posttrain/common.h"
#include "posttrain/model.h"
#include "posttrain/lora.h"
#include "posttrain/modelio.h"
#include "posttrain/tokenizer.h"
#include "posttrain/jsonl.h"
#include "posttrain/chat.h"
#include "posttrain/train.h"
#include "posttrain/generate.h"
#include "posttrain/grpo.h"
#include "posttrain/grpo_builtin.h"
#include "posttrain/addition.h"
#include "posttrain/grpo_run.h"
#include "posttrain/episode.h"
#include "posttrain/env.h"
#include "posttrain/plot.h"
#include "posttrain/gguf.h"
#include "posttrain/dist.h"
#include "posttrain/goodput.h"
#include "posttrain/run.h"

#endif
