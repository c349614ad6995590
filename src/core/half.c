/* Bit-exact float <-> fp16/bf16 conversions with round-to-nearest-even, the rounding
 * CUDA's __float2half_rn and __float2bfloat16_rn use, so the CPU's rounded-storage
 * mode matches the GPU. */
#include "mrcnn/half.h"
#include "mrcnn/check.h"

#include <string.h>

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

uint16_t mrcnn_f32_to_bf16(float x) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); // quiet NaN, sign kept
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return (uint16_t)(u >> 16);
}

float mrcnn_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t mrcnn_f32_to_f16(float x) {
    uint32_t u = f32_bits(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu)); // NaN
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); // rounds to >= 65520: Inf
    if (abs < 0x38800000u) {
        /* Subnormal or zero in fp16: value = abs * 2^24 in units of 2^-24, rounded to even. */
        if (abs < 0x33000000u) return (uint16_t)sign; // below half the smallest subnormal
        uint32_t e = abs >> 23;
        uint32_t m = (abs & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; // 113 - e + 13
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    /* Normal: rebias the exponent, round the 13 dropped mantissa bits to even. */
    uint32_t r = abs - 0x38000000u; // exponent 127 -> 15
    uint32_t lsb = (r >> 13) & 1u;
    r += 0xfffu + lsb;
    return (uint16_t)(sign | (r >> 13));
}

float mrcnn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0x1f) return bits_f32(sign | 0x7f800000u | (m << 13)); // Inf / NaN
    if (e == 0) {
        if (m == 0) return bits_f32(sign);
        /* Subnormal: m * 2^-24, exact in fp32. */
        float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

float mrcnn_round_to(float x, mrcnn_dtype dtype) {
    switch (dtype) {
    case MRCNN_DTYPE_F16: return mrcnn_f16_to_f32(mrcnn_f32_to_f16(x));
    case MRCNN_DTYPE_BF16: return mrcnn_bf16_to_f32(mrcnn_f32_to_bf16(x));
    case MRCNN_DTYPE_F32: return x;
    default: MRCNN_CHECK(0, "cannot round to dtype %s", mrcnn_dtype_name(dtype));
    }
    return x;
}

void mrcnn_round_array(float *x, size_t n, mrcnn_dtype dtype) {
    if (dtype == MRCNN_DTYPE_F32) return;
    MRCNN_CHECK(dtype == MRCNN_DTYPE_F16 || dtype == MRCNN_DTYPE_BF16, "cannot round to dtype %s",
                mrcnn_dtype_name(dtype));
#pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++) x[i] = mrcnn_round_to(x[i], dtype);
}
