/* Placeholder so the train layer builds before its first source lands. */
#include "core/core.h"
