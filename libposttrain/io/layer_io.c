/* Placeholder so the io layer builds before its first source lands. */
#include "core/core.h"
