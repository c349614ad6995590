/* Counter-based RNG (Philox4x32-10, Salmon et al. 2011). A draw is a pure function
 * of (seed, epoch, global image index, purpose, draw index), so results never depend
 * on the rank count or the thread schedule, and a CUDA kernel computes the very same
 * numbers as the CPU. The core is inline here, as the one exception to "no
 * definitions in headers": the CPU and the GPU must share one implementation. */
#ifndef MRCNN_RNG_H
#define MRCNN_RNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define MRCNN_HD static __host__ __device__ __forceinline__
#else
#define MRCNN_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Why each draw is made; part of the key so that streams never overlap. */
typedef enum {
    MRCNN_RNG_INIT = 1,         // weight initialization (image index = parameter index)
    MRCNN_RNG_SHUFFLE = 2,      // per-epoch permutation of the dataset
    MRCNN_RNG_FLIP = 3,         // horizontal flip
    MRCNN_RNG_RESIZE = 4,       // multi-scale short side choice
    MRCNN_RNG_RPN_SAMPLE = 5,   // anchor sampling
    MRCNN_RNG_ROI_SAMPLE = 6,   // proposal sampling
    MRCNN_RNG_SYNTH = 7,        // synthetic data
    MRCNN_RNG_TEST = 8          // tests
} mrcnn_rng_purpose;

typedef struct mrcnn_rng {
    uint32_t key[2]; // seed
    uint32_t ctr[3]; // image index (lo, hi), epoch << 8 | purpose
} mrcnn_rng;

MRCNN_HD mrcnn_rng mrcnn_rng_make(uint64_t seed, uint32_t epoch, int64_t image_index,
                                  mrcnn_rng_purpose purpose) {
    mrcnn_rng r;
    r.key[0] = (uint32_t)seed;
    r.key[1] = (uint32_t)(seed >> 32);
    r.ctr[0] = (uint32_t)(uint64_t)image_index;
    r.ctr[1] = (uint32_t)((uint64_t)image_index >> 32);
    r.ctr[2] = (epoch << 8) | ((uint32_t)purpose & 0xffu);
    return r;
}

MRCNN_HD void mrcnn_philox_round(uint32_t c[4], const uint32_t k[2]) {
    const uint64_t p0 = (uint64_t)0xD2511F53u * c[0];
    const uint64_t p1 = (uint64_t)0xCD9E8D57u * c[2];
    const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    const uint32_t n0 = hi1 ^ c[1] ^ k[0];
    const uint32_t n2 = hi0 ^ c[3] ^ k[1];
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
}

/* Philox4x32-10 of the 128-bit counter (block, ctr[0..2]) under key. */
MRCNN_HD void mrcnn_philox4x32(const mrcnn_rng *r, uint32_t block, uint32_t out[4]) {
    uint32_t c[4] = {block, r->ctr[0], r->ctr[1], r->ctr[2]};
    uint32_t k[2] = {r->key[0], r->key[1]};
    for (int i = 0; i < 10; i++) {
        mrcnn_philox_round(c, k);
        k[0] += 0x9E3779B9u;
        k[1] += 0xBB67AE85u;
    }
    out[0] = c[0];
    out[1] = c[1];
    out[2] = c[2];
    out[3] = c[3];
}

/* The i-th 32-bit draw of the stream. */
MRCNN_HD uint32_t mrcnn_rng_u32(const mrcnn_rng *r, uint64_t i) {
    uint32_t out[4];
    mrcnn_philox4x32(r, (uint32_t)(i >> 2), out);
    return out[i & 3];
}

/* Uniform in [0, 1) with 24 random bits: exactly representable in fp32. */
MRCNN_HD float mrcnn_rng_uniform(const mrcnn_rng *r, uint64_t i) {
    return (float)(mrcnn_rng_u32(r, i) >> 8) * (1.0f / 16777216.0f);
}

/* Uniform integer in [0, n) (n > 0), by multiply-shift: no modulo bias worth naming
 * for n far below 2^32. */
MRCNN_HD uint32_t mrcnn_rng_below(const mrcnn_rng *r, uint64_t i, uint32_t n) {
    return (uint32_t)(((uint64_t)mrcnn_rng_u32(r, i) * n) >> 32);
}

#ifdef __cplusplus
}
#endif

/* Host-only helpers (src/core/rng.c). */
#ifndef __CUDACC__
#ifdef __cplusplus
extern "C" {
#endif
/* Standard normal draw (Box-Muller on draws 2i, 2i+1). */
float mrcnn_rng_normal(const mrcnn_rng *r, uint64_t i);
/* perm[0..n) becomes a uniformly random permutation of 0..n-1 (Fisher-Yates). */
void mrcnn_rng_permutation(const mrcnn_rng *r, int64_t n, int64_t *perm);
#ifdef __cplusplus
}
#endif
#endif

#endif
