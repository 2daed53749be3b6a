/* Model configuration: defaults, Hugging Face config.json parsing, validation
 * (being written). */
#include "core/core.h"
#include "posttrain/model.h"
