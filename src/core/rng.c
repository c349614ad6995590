#include "mrcnn/rng.h"

#include <math.h>

float mrcnn_rng_normal(const mrcnn_rng *r, uint64_t i) {
    /* u1 in (0, 1] so the log is finite. */
    float u1 = 1.0f - mrcnn_rng_uniform(r, 2 * i);
    float u2 = mrcnn_rng_uniform(r, 2 * i + 1);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
}

void mrcnn_rng_permutation(const mrcnn_rng *r, int64_t n, int64_t *perm) {
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        /* 64-bit index from two draws, so datasets beyond 2^32 images still shuffle. */
        uint64_t hi = mrcnn_rng_u32(r, 2 * (uint64_t)i), lo = mrcnn_rng_u32(r, 2 * (uint64_t)i + 1);
        uint64_t x = (hi << 32) | lo;
        int64_t j = (int64_t)(x % (uint64_t)(i + 1));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
