/* Core runtime: tensors, arenas, RNG, fp16/bf16 conversions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/arena.h"
#include "mrcnn/half.h"
#include "mrcnn/rng.h"
#include "mrcnn/tensor.h"
#include "test_util.h"

static void test_tensor_view_and_shape_errors(void **state) {
    int64_t shape[4] = {2, 3, 5, 7};
    mrcnn_tensor t = mrcnn_tensor_view(NULL, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 4, shape);
    assert_int_equal(mrcnn_tensor_numel(&t), 210);
    assert_int_equal(t.stride[0], 105);
    assert_int_equal(t.stride[3], 1);
    assert_int_equal(mrcnn_tensor_nbytes(&t), 840);
    assert_true(mrcnn_tensor_is_contiguous(&t));
    int64_t flat[2] = {2, 105};
    mrcnn_tensor f = mrcnn_tensor_reshape(&t, 2, flat);
    assert_int_equal(f.stride[0], 105);
    int64_t want[4] = {2, 3, 5, 7};
    mrcnn_tensor_check_shape(&t, "x", 4, want);
    int64_t any[4] = {-1, 3, -1, 7};
    mrcnn_tensor_check_shape(&t, "x", 4, any);
    int64_t bad[4] = {2, 3, 5, 8};
    EXPECT_FAIL(mrcnn_tensor_check_shape(&t, "conv2d input", 4, bad), "conv2d input: shape (2, 3, 5, 7) but expected (2, 3, 5, 8)");
    int64_t bad2[2] = {3, 71};
    EXPECT_FAIL(mrcnn_tensor_reshape(&t, 2, bad2), "changes the element count");
    int64_t neg[1] = {-3};
    EXPECT_FAIL(mrcnn_tensor_view(NULL, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, neg), "negative extent");
    EXPECT_FAIL(mrcnn_tensor_check_dtype(&t, "labels", MRCNN_DTYPE_I32), "labels: dtype fp32 but expected int32");
    assert_int_equal(mrcnn_dtype_parse("bf16"), MRCNN_DTYPE_BF16);
    assert_int_equal(mrcnn_dtype_parse("nope"), -1);
}

static void test_arena_layout(void **state) {
    mrcnn_arena a;
    mrcnn_arena_init(&a, "params", MRCNN_DEVICE_CPU);
    int64_t s1[4] = {64, 3, 3, 3}, s2[1] = {64}, s3[2] = {10, 17};
    int i1 = mrcnn_arena_add(&a, "stem.conv.weight", MRCNN_DTYPE_F32, 4, s1);
    int i2 = mrcnn_arena_add(&a, "stem.conv.bias", MRCNN_DTYPE_F32, 1, s2);
    int i3 = mrcnn_arena_add(&a, "fc.weight", MRCNN_DTYPE_F32, 2, s3);
    EXPECT_FAIL(mrcnn_arena_add(&a, "fc.weight", MRCNN_DTYPE_F32, 2, s3), "duplicate name 'fc.weight'");
    mrcnn_arena_commit(&a, NULL, NULL);
    EXPECT_FAIL(mrcnn_arena_add(&a, "late", MRCNN_DTYPE_F32, 1, s2), "after commit");
    /* One block, aligned views, no overlap, zeroed. */
    for (int i = 0; i < a.n_entries; i++) {
        assert_int_equal(a.entries[i].offset % MRCNN_ARENA_ALIGN, 0);
        assert_ptr_equal(a.entries[i].tensor.data, a.base + a.entries[i].offset);
    }
    assert_true(a.entries[i2].offset >= a.entries[i1].offset + 64 * 27 * 4);
    assert_true(a.entries[i3].offset >= a.entries[i2].offset + 64 * 4);
    assert_true(a.size >= a.entries[i3].offset + 170 * 4);
    assert_int_equal(mrcnn_arena_index(&a, "fc.weight"), i3);
    float *w = mrcnn_arena_get(&a, i3)->data;
    for (int i = 0; i < 170; i++) assert_true(w[i] == 0.0f);
    assert_int_equal(mrcnn_arena_index(&a, "missing"), -1);
    mrcnn_arena g;
    mrcnn_arena_init_like(&g, "grads", &a, MRCNN_DTYPE_F32);
    mrcnn_arena_commit(&g, NULL, NULL);
    assert_int_equal(g.size, a.size);
    for (int i = 0; i < a.n_entries; i++) assert_int_equal(g.entries[i].offset, a.entries[i].offset);
    mrcnn_arena_free(&g);
    mrcnn_arena_free(&a);
}

/* Philox4x32-10 known-answer tests (Random123's kat_vectors). */
static void test_philox_known_answers(void **state) {
    mrcnn_rng r;
    uint32_t out[4];
    memset(&r, 0, sizeof r);
    mrcnn_philox4x32(&r, 0, out);
    assert_int_equal(out[0], 0x6627e8d5u);
    assert_int_equal(out[1], 0xe169c58du);
    assert_int_equal(out[2], 0xbc57ac4cu);
    assert_int_equal(out[3], 0x9b00dbd8u);
    r.key[0] = 0xffffffffu; r.key[1] = 0xffffffffu;
    r.ctr[0] = r.ctr[1] = r.ctr[2] = 0xffffffffu;
    mrcnn_philox4x32(&r, 0xffffffffu, out);
    assert_int_equal(out[0], 0x408f276du);
    assert_int_equal(out[1], 0x41c83b0eu);
    assert_int_equal(out[2], 0xa20bc7c6u);
    assert_int_equal(out[3], 0x6d5451fdu);
    r.key[0] = 0xa4093822u; r.key[1] = 0x299f31d0u;
    r.ctr[0] = 0x85a308d3u; r.ctr[1] = 0x13198a2eu; r.ctr[2] = 0x03707344u;
    mrcnn_philox4x32(&r, 0x243f6a88u, out);
    assert_int_equal(out[0], 0xd16cfe09u);
    assert_int_equal(out[1], 0x94fdccebu);
    assert_int_equal(out[2], 0x5001e420u);
    assert_int_equal(out[3], 0x24126ea1u);
}

/* Draws depend on (seed, epoch, image, purpose) and nothing else; the stream looks uniform. */
static void test_rng_keying_and_uniformity(void **state) {
    mrcnn_rng a = mrcnn_rng_make(7, 3, 123456789012LL, MRCNN_RNG_FLIP);
    mrcnn_rng b = mrcnn_rng_make(7, 3, 123456789012LL, MRCNN_RNG_FLIP);
    for (int i = 0; i < 100; i++) assert_int_equal(mrcnn_rng_u32(&a, i), mrcnn_rng_u32(&b, i));
    mrcnn_rng c[4] = {mrcnn_rng_make(8, 3, 123456789012LL, MRCNN_RNG_FLIP), mrcnn_rng_make(7, 4, 123456789012LL, MRCNN_RNG_FLIP),
                      mrcnn_rng_make(7, 3, 123456789013LL, MRCNN_RNG_FLIP), mrcnn_rng_make(7, 3, 123456789012LL, MRCNN_RNG_SHUFFLE)};
    for (int k = 0; k < 4; k++) {
        int same = 0;
        for (int i = 0; i < 64; i++) same += mrcnn_rng_u32(&a, i) == mrcnn_rng_u32(&c[k], i);
        assert_true(same < 2);
    }
    /* Mean and variance of 200k uniforms: 1/2 and 1/12 within 5 sigma. */
    double s = 0, s2 = 0;
    int n = 200000;
    int hist[10] = {0};
    for (int i = 0; i < n; i++) {
        float u = mrcnn_rng_uniform(&a, i);
        assert_true(u >= 0.0f && u < 1.0f);
        s += u;
        s2 += u * u;
        hist[(int)(u * 10)]++;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    assert_true(fabs(mean - 0.5) < 5 * sqrt(1.0 / 12 / n));
    assert_true(fabs(var - 1.0 / 12) < 0.002);
    for (int i = 0; i < 10; i++) assert_true(abs(hist[i] - n / 10) < 5 * sqrt(n * 0.09));
    for (uint32_t m = 1; m < 50; m += 7)
        for (int i = 0; i < 100; i++) assert_true(mrcnn_rng_below(&a, i, m) < m);
}

static void test_rng_permutation(void **state) {
    mrcnn_rng r = mrcnn_rng_make(1, 0, 0, MRCNN_RNG_SHUFFLE);
    int64_t n = 1001, perm[1001];
    int seen[1001] = {0};
    mrcnn_rng_permutation(&r, n, perm);
    int fixed = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_true(perm[i] >= 0 && perm[i] < n);
        seen[perm[i]]++;
        fixed += perm[i] == i;
    }
    for (int64_t i = 0; i < n; i++) assert_int_equal(seen[i], 1);
    assert_true(fixed < 10); /* a random permutation has ~1 fixed point */
    int64_t again[1001];
    mrcnn_rng_permutation(&r, n, again);
    assert_memory_equal(perm, again, sizeof perm);
}

/* All 65536 fp16 values round-trip; float -> fp16 agrees with the compiler's
 * _Float16 conversion (libgcc, round to nearest even) on every value, every midpoint
 * between neighbours and the floats just either side of it. */
static void test_f16_exhaustive(void **state) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mrcnn_f16_to_f32((uint16_t)h);
        _Float16 ref;
        memcpy(&ref, &(uint16_t){(uint16_t)h}, 2);
        if (isnan((float)ref)) {
            assert_true(isnan(f));
            uint16_t back = mrcnn_f32_to_f16(f);
            assert_true((back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0);
            assert_int_equal(back & 0x8000, h & 0x8000);
            continue;
        }
        assert_true(f == (float)ref);
        assert_int_equal(mrcnn_f32_to_f16(f), h);
        if ((h & 0x7fff) >= 0x7c00) continue;
        /* midpoint to the next value away from zero (for 0x7bff: 65520, rounds to Inf) */
        float next = ((h & 0x7fff) == 0x7bff) ? ((h & 0x8000) ? -65536.0f : 65536.0f) : mrcnn_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)(((double)f + (double)next) / 2);
        float probes[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, mid * 2)};
        for (int k = 0; k < 3; k++) {
            _Float16 r = (_Float16)probes[k];
            uint16_t rb;
            memcpy(&rb, &r, 2);
            assert_int_equal(mrcnn_f32_to_f16(probes[k]), rb);
        }
    }
    assert_int_equal(mrcnn_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(mrcnn_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(mrcnn_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(mrcnn_f32_to_f16(1e-10f), 0);
}

/* bf16: all 65536 values round-trip, and rounding of midpoints (ties to even) and
 * their neighbours is checked against the nearest-value definition in double. */
static void test_bf16_exhaustive(void **state) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mrcnn_bf16_to_f32((uint16_t)h);
        uint32_t bits = h << 16;
        float ref;
        memcpy(&ref, &bits, 4);
        if (isnan(ref)) {
            assert_true(isnan(f));
            uint16_t back = mrcnn_f32_to_bf16(f);
            assert_true((back & 0x7f80) == 0x7f80 && (back & 0x7f) != 0);
            continue;
        }
        assert_true(f == ref);
        assert_int_equal(mrcnn_f32_to_bf16(f), h);
        if ((h & 0x7fff) >= 0x7f7f) continue;
        float next = mrcnn_bf16_to_f32((uint16_t)(h + 1));
        float mid = (float)(((double)f + (double)next) / 2); /* exact in fp32 */
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        assert_int_equal(mrcnn_f32_to_bf16(mid), even);
        assert_int_equal(mrcnn_f32_to_bf16(nextafterf(mid, f)), h);
        assert_int_equal(mrcnn_f32_to_bf16(nextafterf(mid, next)), h + 1);
    }
    assert_int_equal(mrcnn_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(mrcnn_f32_to_bf16(3.4e38f), 0x7f80); /* rounds past the largest bf16 */
    float x[3] = {1.00390625f, -2.0f, 1e-3f};
    mrcnn_round_array(x, 3, MRCNN_DTYPE_BF16);
    assert_true(x[0] == 1.0f && x[1] == -2.0f && x[2] == mrcnn_bf16_to_f32(mrcnn_f32_to_bf16(1e-3f)));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor_view_and_shape_errors),
        cmocka_unit_test(test_arena_layout),
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_rng_keying_and_uniformity),
        cmocka_unit_test(test_rng_permutation),
        cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_bf16_exhaustive),
    };
    return cmocka_run_group_tests_name("core", tests, NULL, NULL);
}
