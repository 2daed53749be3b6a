/* Placeholder so the modelio layer builds before its first source lands. */
#include "core/core.h"
