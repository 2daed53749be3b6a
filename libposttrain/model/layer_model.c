/* Placeholder so the model layer builds before its first source lands. */
#include "core/core.h"
