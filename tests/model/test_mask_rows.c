/* The mask head's rows on a backend that cannot tell the positives' count without
 * waiting (count_hint off, the calls of a GPU step): at most the sampler's positive
 * quota per image, so its FLOPs (the step profile's counters) stay within 2x of what
 * the positives need when they fill the quota, and the losses and gradients are those
 * of the same rows run at the capacity MAX_FG_PER_IMAGE = quota (bit for bit) and of
 * the valid rows alone (within summation order). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/model.h"
#include "mrcnn/rng.h"
#include "mrcnn/step_profile.h"
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
    int rows;                 // rows the mask head ran on
    float *grads;             // all gradients after the step
} run;

static void step(void *ctx) {
    run *r = ctx;
    mrcnn_ws_reset(&r->ws);
    mrcnn_batch b = {.image_hw = r->s->hw, .gt = r->gt};
    b.images = mrcnn_ws_tensor(&r->ws, MRCNN_DTYPE_F32, 4, (int64_t[]){NI, HH, WW, 3});
    r->be->mem.write(r->be, &b.images, r->s->images);
    mrcnn_model_zero_grads(&r->m);
    mrcnn_step st;
    mrcnn_model_train_step(&r->m, &r->ws, &b, true, &st);
    mrcnn_model_read_losses(&r->m, &st, &r->losses);
    r->rows = st.n_fg;
    mrcnn_step_free(&st);
    mrcnn_ws_reset(&r->ws);
}

/* One profiled training step of a fresh model (same seed: same weights) on the scene;
 * fixed: count_hint off. Returns the mask head's FLOPs. */
static double profiled(const mrcnn_config *cfg, const scene *s, const mrcnn_image_gt *gt, bool fixed, run *r) {
    memset(r, 0, sizeof *r);
    r->be = mrcnn_backend_cpu_create();
    r->s = s;
    r->gt = gt;
    mrcnn_model_init(&r->m, cfg, r->be);
    mrcnn_model_init_random(&r->m, 5);
    mrcnn_ws_init(&r->ws, r->be);
    if (fixed) r->be->det.count_hint = NULL;
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
    mrcnn_losses_to_array(a, x);
    mrcnn_losses_to_array(b, y);
    for (int k = 0; k < 5; k++)
        if (x[k] != y[k]) return false;
    return true;
}

/* S ROIs per image at fraction 0.25: a quota of S/4 positives, below the tiny config's
 * MAX_FG_PER_IMAGE (32). `quota_filled`: the FLOPs bound is asserted (the gt boxes
 * themselves are candidates, so 3 gt boxes per image fill a quota of 4). */
static void check_rows(int S, const mrcnn_image_gt *gt, const scene *s, bool quota_filled) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    cfg.roi_batch_size_per_image = S;
    cfg.roi_positive_fraction = 0.25f;
    const int quota = S / 4;
    assert_true(cfg.mask_head_max_fg_per_image > quota);
    run need, fixed, cap;
    const double f_need = profiled(&cfg, s, gt, false, &need);    // the valid rows alone
    const double f_fixed = profiled(&cfg, s, gt, true, &fixed);   // GPU calls, this config
    mrcnn_config cfg_cap = cfg;
    cfg_cap.mask_head_max_fg_per_image = quota;                   // the capacity at the quota
    profiled(&cfg_cap, s, gt, true, &cap);
    const int64_t n = (int64_t)(need.m.params.grads.size / sizeof(float));
    printf("  S %d (quota %d/image): positives %d, rows %d (capacity %d); mask-head FLOPs %.4g G, need %.4g G "
           "(%.2fx); mask loss %.9g / %.9g / %.9g\n",
           S, quota, need.rows, fixed.rows, NI * cfg.mask_head_max_fg_per_image, f_fixed / 1e9, f_need / 1e9,
           f_fixed / f_need, need.losses.mask, fixed.losses.mask, cap.losses.mask);
    assert_true(need.rows > 0 && f_need > 0);
    if (quota_filled) assert_true(f_fixed <= 2 * f_need);
    // no positive left out: every valid row is among the rows run
    assert_int_equal(fixed.rows, NI * quota);
    assert_true(need.rows <= fixed.rows);
    // the same rows as the capacity at the quota: the same calls, bit for bit
    assert_int_equal(cap.rows, fixed.rows);
    assert_true(losses_equal(&fixed.losses, &cap.losses));
    assert_memory_equal(fixed.grads, cap.grads, (size_t)n * sizeof(float));
    /* Against the valid rows alone: padding rows add exact zeros, only the summation
     * order differs (GEMM blocking, the loss reductions' partition); test_net_train's
     * padded-heads bounds. */
    double lt[5], lp[5];
    mrcnn_losses_to_array(&need.losses, lt);
    mrcnn_losses_to_array(&fixed.losses, lp);
    for (int k = 0; k < 5; k++) assert_true(fabs(lt[k] - lp[k]) <= 1e-6 * fabs(lt[k]) + 1e-9);
    double e = test_max_rel_err(fixed.grads, need.grads, n);
    printf("  gradients vs the valid rows alone: max|a-b|/max|b| = %.2e\n", e);
    assert_true(e < 1e-5);
    run_free(&need);
    run_free(&fixed);
    run_free(&cap);
}

/* Many positives: 3 gt boxes per image and a quota of 4 (filled by the gt boxes and
 * the proposals over them). */
static void test_quota_filled(void **state) {
    scene *s = malloc(sizeof *s);
    test_batch_make(s, 3);
    check_rows(16, s->gt, s, true);
    free(s);
}

/* Few positives: one gt box per image, a quota of 16 the positives need not fill; the
 * rows still hold every positive and give the same results. */
static void test_few_positives(void **state) {
    scene *s = malloc(sizeof *s);
    test_batch_make(s, 3);
    mrcnn_image_gt gt[NI] = {s->gt[0], s->gt[1]};
    for (int i = 0; i < NI; i++) gt[i].n = 1;
    check_rows(64, gt, s, false);
    free(s);
}

int main(void) {
    omp_set_num_threads(1); // tiny ops: threads only cost on a shared machine
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_quota_filled), cmocka_unit_test(test_few_positives)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
