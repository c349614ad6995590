/* The mask head's rows on a backend that cannot tell the positives' count without
 * waiting (count_hint off, the calls of a GPU step): a capacity of the sampler's positive
 * quota per image, run in chunks that double from N rows, each only when the device's
 * fg count reaches into it (be->stream.run_if; the CPU's reads its own memory), so its
 * FLOPs (the step profile's counters, which see only the chunks that ran) stay within
 * 2x of what the positives need. The losses and gradients are those of the same rows
 * run at the capacity MAX_FG_PER_IMAGE = quota (bit for bit), of every chunk run (bit
 * for bit: a chunk past the count adds exact zeros) and of the valid rows alone (within
 * summation order). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/model.h"
#include "mrcnn/rng.h"
#include "mrcnn/step_profile.h"
#include "test_model.h"
#include "test_scene.h"
#include "test_util.h"

#define NI TEST_BATCH_N
#define HH TEST_BATCH_H
#define WW TEST_BATCH_W
#define NG TEST_BATCH_G
typedef test_batch scene;

typedef struct {
    mrcnn_backend *be;
    mrcnn_model m;
    mrcnn_ws ws;
    const scene *s;
    const mrcnn_image_gt *gt; // (NI)
    mrcnn_losses losses;
    int rows;                 // the mask head's rows (the valid ones, or the capacity)
    float *grads;             // all gradients after the step
} run;

static void step(void *ctx) {
    run *r = ctx;
    mrcnn_ws_reset(&r->ws);
    mrcnn_batch b = {.image_hw = r->s->hw, .gt = r->gt};
    b.images = mrcnn_ws_tensor(&r->ws, MRCNN_DTYPE_F32, 4, (int64_t[]){NI, HH, WW, 3});
    r->be->mem.write(r->be, &b.images, r->s->images);
    mrcnn_model_zero_grads(&r->m);
    mrcnn_pass st;
    mrcnn_model_train_step(&r->m, &r->ws, &b, true, &st);
    mrcnn_model_read_losses(&r->m, &st, &r->losses);
    r->rows = st.n_fg;
    mrcnn_pass_free(&st);
    mrcnn_ws_reset(&r->ws);
}

/* run_if as CUDA's outside a capture: the body whatever the count. */
static void run_if_always(const mrcnn_backend *be, const mrcnn_tensor *count, int64_t above, void (*body)(void *ctx),
                          void *ctx) {
    body(ctx);
}

typedef enum { ROWS_VALID, ROWS_GATED, ROWS_ALL_CHUNKS } rows_mode;

/* One profiled training step of a fresh model (same seed: same weights) on the scene;
 * ROWS_GATED: count_hint off; ROWS_ALL_CHUNKS: also every chunk run. Returns the mask
 * head's FLOPs. */
static double profiled(const mrcnn_config *cfg, const scene *s, const mrcnn_image_gt *gt, rows_mode mode, run *r) {
    memset(r, 0, sizeof *r);
    r->be = mrcnn_backend_cpu_create();
    r->s = s;
    r->gt = gt;
    mrcnn_model_init(&r->m, cfg, r->be);
    mrcnn_model_init_random(&r->m, 5);
    mrcnn_ws_init(&r->ws, r->be);
    if (mode != ROWS_VALID) r->be->det.count_hint = NULL;
    if (mode == ROWS_ALL_CHUNKS) r->be->stream.run_if = run_if_always;
    mrcnn_step_profile p;
    mrcnn_step_profile_run(r->be, NULL, NI, step, r, NULL, &p);
    size_t n = r->m.params.grads.size;
    r->grads = malloc(n);
    int64_t ne = (int64_t)(n / sizeof(float));
    mrcnn_tensor all = mrcnn_tensor_view(r->m.params.grads.base, MRCNN_DTYPE_F32, r->be->device, 1, &ne);
    r->be->mem.read(r->be, &all, r->grads);
    return p.flops[MRCNN_PROFILE_MASK_HEAD];
}

static void run_free(run *r) {
    free(r->grads);
    mrcnn_ws_free(&r->ws);
    mrcnn_model_free(&r->m);
    mrcnn_backend_destroy(r->be);
}

static bool losses_equal(const mrcnn_losses *a, const mrcnn_losses *b) {
    double x[5], y[5];
    test_losses_to_array(a, x);
    test_losses_to_array(b, y);
    for (int k = 0; k < 5; k++)
        if (x[k] != y[k]) return false;
    return true;
}

/* S ROIs per image at fraction 0.25: a quota of S/4 positives, below the tiny config's
 * MAX_FG_PER_IMAGE (32). The FLOPs bound holds whenever the positives are at least N
 * (one per image: its gt boxes are candidates), filling the quota or not. */
static void check_rows(int S, const mrcnn_image_gt *gt, const scene *s) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    cfg.roi_batch_size_per_image = S;
    cfg.roi_positive_fraction = 0.25f;
    const int quota = S / 4;
    assert_true(cfg.mask_head_max_fg_per_image > quota);
    run need, fixed, cap, all;
    const double f_need = profiled(&cfg, s, gt, ROWS_VALID, &need); // the valid rows alone
    const double f_fixed = profiled(&cfg, s, gt, ROWS_GATED, &fixed); // GPU calls, this config
    const double f_all = profiled(&cfg, s, gt, ROWS_ALL_CHUNKS, &all);
    mrcnn_config cfg_cap = cfg;
    cfg_cap.mask_head_max_fg_per_image = quota;                        // the capacity at the quota
    profiled(&cfg_cap, s, gt, ROWS_GATED, &cap);
    const int64_t n = (int64_t)(need.m.params.grads.size / sizeof(float));
    printf("  S %d (quota %d/image): positives %d, rows %d (capacity %d); mask-head FLOPs %.4g G, need %.4g G "
           "(%.2fx), every chunk %.4g G (%.2fx); mask loss %.9g / %.9g / %.9g / %.9g\n",
           S, quota, need.rows, fixed.rows, NI * cfg.mask_head_max_fg_per_image, f_fixed / 1e9, f_need / 1e9,
           f_fixed / f_need, f_all / 1e9, f_all / f_need, need.losses.mask, fixed.losses.mask, cap.losses.mask,
           all.losses.mask);
    assert_true(need.rows >= NI && f_need > 0);
    assert_true(f_fixed <= 2 * f_need);
    // no positive left out: every valid row is among the rows of the capacity
    assert_int_equal(fixed.rows, NI * quota);
    assert_true(need.rows <= fixed.rows);
    // the same rows as the capacity at the quota: the same calls, bit for bit
    assert_int_equal(cap.rows, fixed.rows);
    assert_true(losses_equal(&fixed.losses, &cap.losses));
    assert_memory_equal(fixed.grads, cap.grads, (size_t)n * sizeof(float));
    // the chunks skipped would have added exact zeros: every chunk run gives the same bits
    // at most half the capacity positive: the last chunk is past them and did not run
    assert_true(f_all >= f_fixed && (2 * need.rows > fixed.rows || f_all > f_fixed));
    assert_true(losses_equal(&fixed.losses, &all.losses));
    assert_memory_equal(fixed.grads, all.grads, (size_t)n * sizeof(float));
    /* Against the valid rows alone: padding rows add exact zeros, only the summation
     * order differs (GEMM blocking, the loss reductions' partition); test_net_train's
     * padded-heads bounds. */
    double lt[5], lp[5];
    test_losses_to_array(&need.losses, lt);
    test_losses_to_array(&fixed.losses, lp);
    for (int k = 0; k < 5; k++) assert_true(fabs(lt[k] - lp[k]) <= 1e-6 * fabs(lt[k]) + 1e-9);
    double e = test_max_rel_err(fixed.grads, need.grads, n);
    printf("  gradients vs the valid rows alone: max|a-b|/max|b| = %.2e\n", e);
    assert_true(e < 1e-5);
    run_free(&need);
    run_free(&fixed);
    run_free(&cap);
    run_free(&all);
}

/* Many positives: 3 gt boxes per image and a quota of 4 (filled by the gt boxes and
 * the proposals over them). */
static void test_quota_filled(void **state) {
    scene *s = malloc(sizeof *s);
    test_batch_make(s, 3);
    check_rows(16, s->gt, s);
    free(s);
}

/* Few positives: one gt box per image, a quota of 16 the positives need not fill; the
 * chunks that run hold every positive, and those past them do not run. */
static void test_few_positives(void **state) {
    scene *s = malloc(sizeof *s);
    test_batch_make(s, 3);
    mrcnn_image_gt gt[NI] = {s->gt[0], s->gt[1]};
    for (int i = 0; i < NI; i++) gt[i].n = 1;
    check_rows(64, gt, s);
    free(s);
}

int main(void) {
    omp_set_num_threads(1); // tiny ops: threads only cost on a shared machine
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_quota_filled), cmocka_unit_test(test_few_positives)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
