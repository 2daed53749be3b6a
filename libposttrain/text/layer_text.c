/* Placeholder so the text layer builds before its first source lands. */
#include "core/core.h"
