/* The cuDNN algorithm rule of conv_cudnn.cu (src/backend/cuda/conv_algo_pick.h) on the CPU,
 * over candidate lists shaped like the answers cuDNN may give at the model's odd
 * channel counts (the stem's C = 3; K = 3, 12 and 91 in the heads): fp32 without TF32
 * takes the first FMA-math algorithm without an FFT/Winograd transform, and when there
 * is none the first FMA-math one with a transform rather than aborting the run; a
 * math type that may run TF32 is never taken there; the workspace limit holds in every
 * mode. No GPU needed: the lists are written out here, in cuDNN's order (fastest
 * first). Values of algo are cuDNN's forward enum (0 implicit GEMM, 1 precomputed
 * implicit GEMM, 2 GEMM, 4 FFT, 5 FFT tiling, 6 Winograd, 7 Winograd non-fused). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "../../src/backend/cuda/conv_algo_pick.h"

#define MB ((size_t)1 << 20)
#define LIMIT (256 * MB)
#define N(a) ((int)(sizeof(a) / sizeof *(a)))

/* {algo, ok, fma, transform, memory} */
static void expect(const cu_algo_cand *c, int n, int strict, int want_index, cu_pick_kind want_kind) {
    cu_pick_kind kind;
    int i = cu_algo_pick(c, n, strict, LIMIT, &kind);
    if (i != want_index || kind != want_kind)
        fail_msg("picked index %d (kind %d), expected %d (kind %d)", i, (int)kind, want_index, (int)want_kind);
}

/* The stem, C = 3, fp32: the GEMMs come back unsupported or tensor-op only; the FMA
 * answers are Winograd and an FFT whose workspace is over the limit. */
static void test_stem_c3_strict_falls_back(void **state) {
    const cu_algo_cand c[] = {
        {1, 1, 0, 0, 4 * MB},   // tensor-op math: may be TF32
        {0, 0, 1, 0, 0},        // not supported
        {5, 1, 1, 1, 900 * MB}, // FFT tiling: over the workspace limit
        {7, 1, 1, 1, 3 * MB},   // Winograd non-fused, FMA: the one
        {4, 1, 1, 1, 20 * MB},  // FFT, slower
    };
    expect(c, N(c), 1, 3, CU_PICK_RELAXED);
}

/* K = 91 (class logits as a conv) and K = 12 (anchor deltas, 3 anchors x 4): the data and
 * filter gradients offered with FMA math only as transforms. */
static void test_k91_k12_strict_fall_back(void **state) {
    const cu_algo_cand k91[] = {{1, 1, 0, 0, 0}, {2, 1, 0, 0, 8 * MB}, {4, 1, 1, 1, 64 * MB}, {0, 0, 1, 0, 0}};
    expect(k91, N(k91), 1, 2, CU_PICK_RELAXED);
    const cu_algo_cand k12[] = {{0, 0, 1, 0, 0}, {1, 0, 1, 0, 0}, {6, 1, 1, 1, 0}, {5, 1, 1, 1, 40 * MB}};
    expect(k12, N(k12), 1, 2, CU_PICK_RELAXED);
    const cu_algo_cand k3[] = {{1, 1, 0, 0, 0}, {7, 1, 1, 1, 300 * MB}, {4, 1, 1, 1, 12 * MB}};
    expect(k3, N(k3), 1, 2, CU_PICK_RELAXED); // the first transform is over the limit
}

/* A plain FMA algorithm anywhere in the list beats a faster transform. */
static void test_strict_prefers_plain_fma(void **state) {
    const cu_algo_cand c[] = {{6, 1, 1, 1, 0}, {1, 1, 0, 0, 0}, {0, 1, 1, 0, 2 * MB}, {2, 1, 1, 0, 1 * MB}};
    expect(c, N(c), 1, 2, CU_PICK_FIRST);
}

/* Nothing without TF32 risk within the limit: none, so the caller fails with the list. */
static void test_strict_never_takes_tensor_op(void **state) {
    const cu_algo_cand c[] = {{1, 1, 0, 0, 0}, {0, 1, 0, 0, 0}, {7, 1, 0, 1, 0}, {4, 1, 1, 1, 512 * MB}, {2, 0, 1, 0, 0}};
    expect(c, N(c), 1, -1, CU_PICK_NONE);
    expect(c, 0, 1, -1, CU_PICK_NONE);
}

/* bf16/fp16/TF32: the first supported one within the limit, whatever its math. */
static void test_not_strict_takes_first(void **state) {
    const cu_algo_cand c[] = {{1, 0, 0, 0, 0}, {5, 1, 1, 1, 900 * MB}, {7, 1, 0, 1, 2 * MB}, {0, 1, 1, 0, 0}};
    expect(c, N(c), 0, 2, CU_PICK_FIRST);
    const cu_algo_cand none[] = {{1, 0, 0, 0, 0}, {5, 1, 1, 1, 900 * MB}};
    expect(none, N(none), 0, -1, CU_PICK_NONE);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stem_c3_strict_falls_back),  cmocka_unit_test(test_k91_k12_strict_fall_back),
        cmocka_unit_test(test_strict_prefers_plain_fma),   cmocka_unit_test(test_strict_never_takes_tensor_op),
        cmocka_unit_test(test_not_strict_takes_first),
    };
    return cmocka_run_group_tests_name("conv_algo_pick", tests, NULL, NULL);
}
