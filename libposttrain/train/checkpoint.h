/* Training checkpoints: a directory written under a temporary name, every
 * file fsynced and listed with its SHA-256 in MANIFEST.json (written last),
 * then renamed into place.  Loading verifies every checksum first. */
#ifndef PT_TRAIN_CHECKPOINT_H
#define PT_TRAIN_CHECKPOINT_H

#include "posttrain/train.h"

/* Names of the files inside a checkpoint directory. */
#define PT_CKPT_MANIFEST "MANIFEST.json"
#define PT_CKPT_WEIGHTS "model.safetensors"
#define PT_CKPT_OPTIMIZER "optimizer.safetensors"
#define PT_CKPT_STATE "trainer_state.json"

/* Verify MANIFEST.json and every file it lists (size and SHA-256). */
int pt__checkpoint_verify(const char *dir);

#endif
