/* posttrain export (cmd_export.c) and its checkpoint source (cmd_export_ckpt.c). */
#ifndef PT_CLI_CMD_EXPORT_H
#define PT_CLI_CMD_EXPORT_H

#include "cli.h"

#include <stdbool.h>

typedef struct export_args {
    const char *model, *out, *adapter, *checkpoint;
    pt_gguf_export_options gguf; /* --type, --name, --spm-scores */
    bool merge, adapter_only;
} export_args;

/* The model of --checkpoint: the base (--model, else the one the
 * checkpoint records), the run's LoRA adapters when it records them, the
 * trained tensors read in.  0, or the exit code after the message. */
int export_load_checkpoint(pt_model **out, const export_args *a);

#endif
