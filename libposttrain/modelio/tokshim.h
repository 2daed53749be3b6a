/* Tokenizer calls made by modelio (see tokshim.c). */
#ifndef PT_MODELIO_TOKSHIM_H
#define PT_MODELIO_TOKSHIM_H

#include "posttrain/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

void pt_modelio_tokenizer_free(pt_tokenizer *t);
int pt_modelio_encode(int32_t **ids, size_t *n, const pt_tokenizer *t, const char *text,
                      size_t len, unsigned flags);
int32_t pt_modelio_tokenizer_vocab(const pt_tokenizer *t);

#endif
