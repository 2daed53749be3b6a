/* Finding a NaN or an infinity in a float array (core.h): the test weights
 * take on every load, so it is a bit test over blocks that the compiler
 * vectorises, exact under any floating-point flags. */
#include "core.h"

#include <stdint.h>
#include <string.h>

#define BLOCK 1024

/* An exponent of all ones (NaN or an infinity) is the one that carries
 * into bit 31 when 1 is added to it; OR-ing those sums over a block leaves
 * bit 31 set when the block holds one (plain integer operations, which the
 * compiler vectorises: about memory speed). */
static inline uint32_t carry(const float *x)
{
    uint32_t u;
    memcpy(&u, x, sizeof u);
    return (u & 0x7f800000u) + 0x00800000u;
}

size_t pt__first_nonfinite(const float *x, size_t n)
{
    for (size_t b = 0; b < n; b += BLOCK) {
        const size_t e = n - b < BLOCK ? n : b + BLOCK;
        uint32_t acc = 0;
        for (size_t i = b; i < e; i++)
            acc |= carry(x + i);
        if (acc & 0x80000000u)
            for (size_t i = b; i < e; i++)
                if (carry(x + i) & 0x80000000u)
                    return i;
    }
    return n;
}

const char *pt__nonfinite_name(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    if ((u & 0x7f800000u) != 0x7f800000u)
        return "a finite value";
    if (u & 0x007fffffu)
        return "NaN";
    return u >> 31 ? "-inf" : "+inf";
}

int pt__err_nonfinite(const float *x, size_t n)
{
    size_t at = pt__first_nonfinite(x, n);
    if (at == n)
        return PT_OK;
    return pt__err(PT_ENONFINITE, "holds %s at element %zu (the first non-finite value)", pt__nonfinite_name(x[at]),
                  at);
}
