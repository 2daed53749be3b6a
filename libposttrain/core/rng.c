#include "core.h"

#include <math.h>

uint64_t pt__splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void pt__rng_seed(pt_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = pt__splitmix64(&x);
}

static inline uint64_t rotl(uint64_t v, int k)
{
    return (v << k) | (v >> (64 - k));
}

uint64_t pt__rng_next(pt_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float pt__rng_uniform(pt_rng *r)
{
    return (float)(pt__rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

double pt__rng_uniform_double(pt_rng *r)
{
    return (double)(pt__rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

double pt__rng_normal(pt_rng *r)
{
    double u1 = pt__rng_uniform_double(r);
    double u2 = pt__rng_uniform_double(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t pt__rng_below(pt_rng *r, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t v;
    do
        v = pt__rng_next(r);
    while (v >= limit);
    return v % n;
}
