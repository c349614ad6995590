/* Issue 12, the trainer's side: a training step is device-resident. On the CPU
 * backend, whose counters (backend.h, mrcnn_backend_stats) count what a GPU step would
 * wait for, mrcnn_trainer_step performs no host read and no sync between its start and
 * the log-period read, and mrcnn_trainer_take_losses then reads exactly once.
 *  - stand-in: a small linear model (host loss terms through be->step.axpy) with
 *    clipping on: zero reads over the steps, one read for the window, the window's
 *    means right; an injected Inf on one step is skipped on the device (weights and
 *    momentum untouched), counted, and named at the window read;
 *  - the device decision (mrcnn_step_decide via be->step.decide) against the host
 *    loss scaler (loss_scaler.c) over a sequence of overflows: same scale, clean count
 *    and skips, so fp16 runs keep their behaviour; clipping against mrcnn_grad_norm;
 *  - the tiny Mask R-CNN (configs/tiny.yaml) bound like `mrcnn train` does, 4 steps
 *    with clipping: zero reads and syncs in the steps, one read at the window.
 * MRCNN_STEP_READS_BREAK=1 reads the control vector once inside each step (the test
 * must then fail: its self-check). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_scene.h"
#include "test_util.h"

#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "mrcnn/model.h"
#include "mrcnn/rng.h"
#include "mrcnn/step_ctl.h"
#include "mrcnn/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mrcnn_backend_stats stats_since(const mrcnn_backend *be, const mrcnn_backend_stats *s0) {
    mrcnn_backend_stats s = mrcnn_backend_stats_get(be);
    s.reads -= s0->reads;
    s.read_bytes -= s0->read_bytes;
    s.syncs -= s0->syncs;
    s.uploads -= s0->uploads;
    s.upload_bytes -= s0->upload_bytes;
    return s;
}

/* ---- stand-in: y = W x, loss_a/loss_b = squared error of the two output halves ---- */
enum { D_IN = 6, D_OUT = 4 };
typedef struct {
    mrcnn_backend *be;
    mrcnn_arena params, grads;
    int64_t inject_step; // this step's loss_b and gradient become Inf (-1: never)
    int break_reads;
    mrcnn_trainer *tr;
} lin;

static float draw(int64_t i, int k) {
    mrcnn_rng r = mrcnn_rng_make(77, 0, (uint64_t)i, MRCNN_RNG_TEST);
    return 2.0f * mrcnn_rng_uniform(&r, (uint64_t)k) - 1.0f;
}

static double lin_fb(void *ctx, int64_t step, int micro, float loss_mult, const mrcnn_tensor *loss_scale, mrcnn_tensor *loss_acc, float acc_mult,
                     mrcnn_buckets *bk) {
    lin *l = ctx;
    // the CPU backend's device memory is the host's: the stand-in reads the scale in place
    if (loss_scale) loss_mult *= ((const float *)loss_scale->data)[0];
    const float *w = (const float *)l->params.base;
    float *g = (float *)l->grads.base;
    float terms[2] = {0, 0};
    for (int r = 0; r < 4; r++) {
        float x[D_IN];
        for (int k = 0; k < D_IN; k++) x[k] = draw(step * 8 + micro * 4 + r, k);
        for (int o = 0; o < D_OUT; o++) {
            float y = 0;
            for (int k = 0; k < D_IN; k++) y += w[o * D_IN + k] * x[k];
            float e = y - (0.5f * x[o] + 0.1f * (float)o);
            terms[o < D_OUT / 2] += e * e / 4;
            for (int k = 0; k < D_IN; k++) g[o * D_IN + k] += loss_mult * 2 * e / 4 * x[k];
        }
    }
    if (step == l->inject_step) {
        terms[1] = INFINITY;
        g[3] = INFINITY;
    }
    int64_t two = 2;
    mrcnn_tensor tv = mrcnn_tensor_view(terms, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, &two);
    l->be->step.axpy(l->be, acc_mult, &tv, loss_acc);
    if (l->break_reads) { // the self-check: a read inside the step must be caught
        float v;
        int64_t one = 1;
        mrcnn_tensor c = mrcnn_tensor_view(loss_acc->data, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, &one);
        l->be->mem.read(l->be, &c, &v);
    }
    if (bk)
        for (int p = l->params.n_entries - 1; p >= 0; p--) mrcnn_buckets_mark_ready(bk, p);
    return 0;
}

static void lin_config(mrcnn_config *cfg, int accum) {
    mrcnn_config_defaults(cfg);
    mrcnn_config_set(cfg, "SOLVER.IMS_PER_BATCH=2", "test");
    char a[64];
    snprintf(a, sizeof a, "SOLVER.ACCUM_STEPS=%d", accum);
    mrcnn_config_set(cfg, a, "test");
    mrcnn_config_set(cfg, "SOLVER.BASE_LR=0.05", "test");
    mrcnn_config_set(cfg, "SOLVER.WARMUP_ITERS=0", "test");
    mrcnn_config_set(cfg, "SOLVER.CLIP_GRADIENTS.ENABLED=true", "test");
    mrcnn_config_set(cfg, "SOLVER.CLIP_GRADIENTS.CLIP_VALUE=0.5", "test");
    mrcnn_config_set(cfg, "LOG_PERIOD=1000", "test");
    mrcnn_config_set(cfg, "SOLVER.PRECISION=fp32", "test");
}

static void lin_init(lin *l, mrcnn_backend *be) {
    memset(l, 0, sizeof *l);
    l->be = be;
    l->inject_step = -1;
    l->break_reads = getenv("MRCNN_STEP_READS_BREAK") && atoi(getenv("MRCNN_STEP_READS_BREAK"));
    mrcnn_arena_init(&l->params, "params", MRCNN_DEVICE_CPU);
    mrcnn_arena_add(&l->params, "fc.weight", MRCNN_DTYPE_F32, 2, (int64_t[]){D_OUT, D_IN});
    mrcnn_arena_commit(&l->params, NULL, NULL);
    mrcnn_arena_init_like(&l->grads, "grads", &l->params, MRCNN_DTYPE_F32);
    mrcnn_arena_commit(&l->grads, NULL, NULL);
    float *w = (float *)l->params.base;
    for (int i = 0; i < D_OUT * D_IN; i++) w[i] = 0.3f * draw(999, i);
}

static void lin_free(lin *l) {
    mrcnn_arena_free(&l->params);
    mrcnn_arena_free(&l->grads);
}

static const char *const lin_names[] = {"loss_a", "loss_b"};

static void test_standin_no_reads(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create_generic();
    mrcnn_config cfg;
    lin_config(&cfg, 2);
    lin l;
    lin_init(&l, be);
    mrcnn_trainable m = {.ctx = &l, .params = &l.params, .grads = &l.grads, .n_losses = 2, .loss_names = lin_names,
                         .scales_loss = 1, .forward_backward = lin_fb};
    mrcnn_dist one = {.rank = 0, .world_size = 1, .local_size = 1, .device = -1};
    mrcnn_trainer tr;
    mrcnn_trainer_init(&tr, &cfg, &one, be, &m, 0);
    l.inject_step = 3;
    const int steps = 6;
    float before[D_OUT * D_IN], after[D_OUT * D_IN], mom_before[D_OUT * D_IN];
    mrcnn_backend_stats s0 = mrcnn_backend_stats_get(be);
    for (int i = 0; i < steps; i++) {
        if (i == 3) {
            memcpy(before, l.params.base, sizeof before);
            memcpy(mom_before, tr.sgd.momentum.base, sizeof mom_before);
        }
        mrcnn_step_result r;
        mrcnn_trainer_step(&tr, &r);
        assert_int_equal(r.step, i);
        if (i == 3) { // skipped on the device: nothing moved
            memcpy(after, l.params.base, sizeof after);
            assert_memory_equal(before, after, sizeof before);
            assert_memory_equal(mom_before, tr.sgd.momentum.base, sizeof mom_before);
        }
    }
    mrcnn_backend_stats in_steps = stats_since(be, &s0);
    printf("stand-in: %d steps: %llu reads, %llu syncs, %llu uploads\n", steps, (unsigned long long)in_steps.reads,
           (unsigned long long)in_steps.syncs, (unsigned long long)in_steps.uploads);
    assert_int_equal(in_steps.reads, 0);
    assert_int_equal(in_steps.syncs, 0);
    mrcnn_loss_window w;
    s0 = mrcnn_backend_stats_get(be);
    mrcnn_trainer_take_losses(&tr, &w);
    mrcnn_backend_stats at_log = stats_since(be, &s0);
    printf("window read: %llu reads, %llu syncs; %lld steps, %lld finite, skipped %lld (newest %lld: %s)\n",
           (unsigned long long)at_log.reads, (unsigned long long)at_log.syncs, (long long)w.steps,
           (long long)w.finite_steps, (long long)w.counted, (long long)w.last_skipped, w.what);
    /* the one read of the control vector (the skipped step's culprit is a loss term:
     * no gradient copy needed, and on the CPU none would be a read anyway) */
    assert_int_equal(at_log.reads, 1);
    assert_int_equal(at_log.syncs, 1);
    assert_int_equal(w.steps, steps);
    assert_int_equal(w.finite_steps, steps - 1);
    assert_int_equal(w.counted, 1);
    assert_int_equal(w.adapted, 0);
    assert_int_equal(w.last_skipped, 3);
    assert_int_equal(tr.st.nonfinite, 1);
    assert_non_null(strstr(w.what, "loss_b"));
    assert_true(isfinite(w.mean[0]) && isfinite(w.mean[1]) && w.mean[0] > 0);
    /* The newest step (5) is finite: its terms are the window's last. */
    assert_true(isfinite(w.last_total));
    /* A second window: empty of skips, means from its own steps only. */
    for (int i = 0; i < 2; i++) {
        mrcnn_step_result r;
        mrcnn_trainer_step(&tr, &r);
    }
    mrcnn_trainer_take_losses(&tr, &w);
    assert_int_equal(w.steps, 2);
    assert_int_equal(w.finite_steps, 2);
    assert_int_equal(w.counted, 0);
    assert_int_equal(w.last_skipped, -1);
    assert_int_equal(tr.st.nonfinite, 1);
    mrcnn_trainer_free(&tr);
    lin_free(&l);
    mrcnn_backend_destroy(be);
}

/* The device decision against the host policies it replaces. */
static void test_decide_matches_host(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create_generic();
    const int nl = 2;
    float c[MRCNN_CTL_SIZE(2)];
    memset(c, 0, sizeof c);
    int64_t n = MRCNN_CTL_SIZE(2);
    mrcnn_tensor ctl = mrcnn_tensor_view(c, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, &n);
    mrcnn_loss_scaler host;
    mrcnn_loss_scaler_init(&host, 1, 1024.0f, 3);
    c[MRCNN_CTL_SCALE] = host.scale;
    /* overflow pattern: halvings down past 1, growth after 3 clean steps */
    const int flags[] = {0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0};
    const int nf = (int)(sizeof flags / sizeof *flags);
    int64_t counted = 0, adapted = 0;
    for (int i = 0; i < nf; i++) {
        c[MRCNN_CTL_STEP + 0] = 1.0f;
        c[MRCNN_CTL_STEP + 1] = 2.0f;
        c[MRCNN_CTL_FLAG(nl)] = (float)flags[i];
        mrcnn_step_desc d = {.n_losses = nl, .scaler_enabled = 1, .scales_loss = 1, .growth_interval = 3,
                             .inv_world = 1.0f, .inv_accum = 1.0f, .step = (float)i};
        float used = host.scale;
        be->step.decide(be, &d, &ctl);
        int applied = mrcnn_loss_scaler_update(&host, flags[i]);
        if (flags[i]) {
            if (used > 1.0f) adapted++;
            else counted++;
        }
        assert_int_equal((int)c[MRCNN_CTL_APPLY], applied);
        assert_float_equal(c[MRCNN_CTL_GRAD_SCALE], 1.0f / used, 0);
        assert_float_equal(c[MRCNN_CTL_SCALE], host.scale, 0);
        assert_int_equal((int)c[MRCNN_CTL_CLEAN], host.clean_steps);
        assert_int_equal((int64_t)c[MRCNN_CTL_SKIPPED], host.skipped);
    }
    assert_int_equal((int64_t)c[MRCNN_CTL_WIN_COUNTED(nl)], counted);
    assert_int_equal((int64_t)c[MRCNN_CTL_WIN_ADAPT(nl)], adapted);
    assert_int_equal((int64_t)c[MRCNN_CTL_NONFINITE], counted);
    assert_true(counted > 0 && adapted > 0);

    /* Clipping: the coefficient of trainer_step's former host code, from SUMSQ. */
    float g[5] = {3, -4, 12, 0.5f, -2};
    int64_t five = 5, one1 = 1;
    mrcnn_tensor gt = mrcnn_tensor_view(g, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, &five);
    mrcnn_tensor sq = mrcnn_tensor_view(c + MRCNN_CTL_SUMSQ, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, &one1);
    be->step.sum_squares(be, &gt, &sq);
    c[MRCNN_CTL_FLAG(nl)] = 0;
    mrcnn_step_desc d = {.n_losses = nl, .scaler_enabled = 0, .scales_loss = 0, .clip_enabled = 1,
                         .clip_value = 1.0f, .inv_world = 1.0f, .inv_accum = 0.5f};
    be->step.decide(be, &d, &ctl);
    double norm = sqrt(9.0 + 16 + 144 + 0.25 + 4) * 0.5;
    float want = 0.5f * (float)(1.0 / (norm + 1e-6));
    assert_float_equal(c[MRCNN_CTL_GRAD_SCALE], want, 1e-7);
    /* nonfinite_or raises and keeps the flag */
    float flag = 0;
    mrcnn_tensor ft = mrcnn_tensor_view(&flag, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, &one1);
    be->step.nonfinite_or(be, &gt, &ft);
    assert_float_equal(flag, 0, 0);
    g[2] = NAN;
    be->step.nonfinite_or(be, &gt, &ft);
    assert_float_equal(flag, 1, 0);
    g[2] = 1;
    be->step.nonfinite_or(be, &gt, &ft);
    assert_float_equal(flag, 1, 0);
    mrcnn_backend_destroy(be);
}

/* ---- the tiny Mask R-CNN, bound as src/cli/cmd_train.c binds it ---- */
#define NI 2
#define HH 128
#define WW 128
#define NG 2
typedef struct {
    mrcnn_backend *be;
    mrcnn_model m;
    mrcnn_ws ws;
    float images[NI * HH * WW * 3];
    int hw[NI * 2];
    float boxes[NI][NG * 4];
    int32_t labels[NI][NG];
    uint8_t masks[NI][NG * HH * WW];
    mrcnn_image_gt gt[NI];
} tiny;

static void tiny_batch(tiny *t) {
    mrcnn_rng r = mrcnn_rng_make(5, 0, 0, MRCNN_RNG_TEST);
    uint64_t k = 0;
    for (int i = 0; i < NI * HH * WW * 3; i++) t->images[i] = 0.2f * (mrcnn_rng_uniform(&r, k++) - 0.5f);
    for (int i = 0; i < NI; i++) {
        t->hw[2 * i] = HH;
        t->hw[2 * i + 1] = WW;
        for (int g = 0; g < NG; g++) {
            float *b = t->boxes[i] + g * 4;
            b[0] = (float)(10 + 50 * g), b[1] = (float)(12 + 40 * g + 5 * i), b[2] = b[0] + 40, b[3] = b[1] + 36;
            t->labels[i][g] = 1 + (g + i) % 3;
            test_scene_draw(t->images + (size_t)i * HH * WW * 3, t->masks[i] + (size_t)g * HH * WW, HH, WW, b,
                            t->labels[i][g], g % 2 == 1);
        }
        t->gt[i] = (mrcnn_image_gt){NG, t->boxes[i], t->labels[i], t->masks[i]};
    }
}

static void tiny_ready(int param_index, void *ctx) { mrcnn_buckets_mark_ready(ctx, param_index); }

static double tiny_fb(void *ctx, int64_t step, int micro, float loss_mult, const mrcnn_tensor *loss_scale, mrcnn_tensor *loss_acc, float acc_mult,
                      mrcnn_buckets *bk) {
    tiny *t = ctx;
    t->m.loss_mult = loss_mult;
    t->m.loss_scale = loss_scale;
    t->m.grad_ready = bk ? tiny_ready : NULL;
    t->m.grad_ready_ctx = bk;
    mrcnn_ws_reset(&t->ws);
    mrcnn_batch b = {.image_hw = t->hw, .gt = t->gt};
    b.images = mrcnn_ws_tensor(&t->ws, MRCNN_DTYPE_F32, 4, (int64_t[]){NI, HH, WW, 3});
    t->be->mem.write(t->be, &b.images, t->images); // an upload, as the loader's batch is
    mrcnn_step st;
    mrcnn_model_train_step(&t->m, &t->ws, &b, true, &st);
    t->be->step.axpy(t->be, acc_mult, &st.loss_dev, loss_acc);
    mrcnn_step_free(&st);
    return 0;
}

/* precision: "fp32", or "fp16", whose dynamic loss scale is decided on the device and
 * multiplies the model's gradients there: no step reads it. */
static void tiny_model_no_reads(const char *precision) {
    static tiny t; // large arrays
    memset(&t, 0, sizeof t);
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    mrcnn_config_set(&cfg, "LOG_PERIOD=1000", "test");
    char p[64];
    snprintf(p, sizeof p, "SOLVER.PRECISION=%s", precision);
    mrcnn_config_set(&cfg, p, "test");
    t.be = mrcnn_backend_cpu_create();
    mrcnn_model_init(&t.m, &cfg, t.be);
    mrcnn_model_init_random(&t.m, 3);
    mrcnn_ws_init(&t.ws, t.be);
    tiny_batch(&t);
    mrcnn_trainable tm = {.ctx = &t, .params = &t.m.params.values, .grads = &t.m.params.grads,
                          .trainable = t.m.params.trainable, .n_losses = MRCNN_N_LOSSES, .loss_names = mrcnn_loss_names,
                          .scales_loss = 1, .forward_backward = tiny_fb};
    mrcnn_dist one = {.rank = 0, .world_size = 1, .local_size = 1, .device = -1};
    mrcnn_trainer tr;
    mrcnn_trainer_init(&tr, &cfg, &one, t.be, &tm, 0);
    const int steps = 4;
    mrcnn_backend_stats s0 = mrcnn_backend_stats_get(t.be);
    for (int i = 0; i < steps; i++) {
        mrcnn_backend_stats si = mrcnn_backend_stats_get(t.be);
        mrcnn_step_result r;
        mrcnn_trainer_step(&tr, &r);
        mrcnn_backend_stats d = stats_since(t.be, &si);
        printf("tiny model %s step %d: %llu reads (%llu bytes), %llu syncs, %llu uploads\n", precision, i,
               (unsigned long long)d.reads, (unsigned long long)d.read_bytes, (unsigned long long)d.syncs,
               (unsigned long long)d.uploads);
    }
    mrcnn_backend_stats in_steps = stats_since(t.be, &s0);
    assert_int_equal(in_steps.reads, 0);
    assert_int_equal(in_steps.syncs, 0);
    mrcnn_loss_window w;
    s0 = mrcnn_backend_stats_get(t.be);
    mrcnn_trainer_take_losses(&tr, &w);
    mrcnn_backend_stats at_log = stats_since(t.be, &s0);
    printf("tiny model window: %llu reads, %llu syncs; %lld finite of %lld, mean total %g, last total %g\n",
           (unsigned long long)at_log.reads, (unsigned long long)at_log.syncs, (long long)w.finite_steps,
           (long long)w.steps, w.mean_total, w.last_total);
    assert_int_equal(at_log.reads, 1);
    assert_int_equal(w.steps, steps);
    assert_int_equal(w.finite_steps, steps);
    assert_true(isfinite(w.mean_total) && w.mean_total > 0);
    mrcnn_trainer_free(&tr);
    mrcnn_ws_free(&t.ws);
    mrcnn_model_free(&t.m);
    mrcnn_backend_destroy(t.be);
}

static void test_tiny_model_no_reads(void **state) { tiny_model_no_reads("fp32"); }
static void test_tiny_model_fp16_no_reads(void **state) { tiny_model_no_reads("fp16"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_standin_no_reads),
        cmocka_unit_test(test_decide_matches_host),
        cmocka_unit_test(test_tiny_model_no_reads),
        cmocka_unit_test(test_tiny_model_fp16_no_reads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
