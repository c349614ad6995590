/* A training step is device-resident (the trainer's side). On the CPU
 * backend, whose counters (backend.h, mrcnn_backend_stats) count what a GPU step would
 * wait for, mrcnn_trainer_step performs no host read and no sync between its start and
 * the log-period read, and mrcnn_trainer_take_losses then reads exactly once.
 *  - stand-in: a small linear model (host loss terms through be->step.axpy) with
 *    clipping on: zero reads over the steps, one read for the window, the window's
 *    means right; an injected Inf on one step is skipped on the device (weights and
 *    momentum untouched), counted, and named at the window read;
 *  - the device decision (mrcnn_step_decide via be->step.decide) against the host
 *    loss scaler (test_support.c) over a sequence of overflows: same scale, clean count
 *    and skips, so fp16 runs keep their behaviour; clipping against the gradient norm computed here;
 *  - the tiny Mask R-CNN (configs/tiny.yaml) bound like `mrcnn train` does, 4 steps
 *    with clipping: zero reads and syncs in the steps, one read at the window.
 * MRCNN_STEP_READS_BREAK=1 reads the control vector once inside each step (the test
 * must then fail: its self-check). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_scene.h"
#include "test_support.h"
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
#include <unistd.h>

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
    uint64_t shape_key;  // what stage reports (1; 0: not replayable)
    int64_t staged_step; // recorded by stage for run
    int staged_micro;
    int stage_calls, run_calls;
} lin;

static float draw(int64_t i, int k) {
    mrcnn_rng r = mrcnn_rng_make(77, 0, (uint64_t)i, MRCNN_RNG_TEST);
    return 2.0f * mrcnn_rng_uniform(&r, (uint64_t)k) - 1.0f;
}

/* stage: the host half; the stand-in's "device" is host memory, so run reads what
 * stage recorded (a CPU stand-in is never captured). Its shapes never change: key 1. */
static double lin_stage(void *ctx, int64_t step, int micro, uint64_t *shape_key) {
    lin *l = ctx;
    l->staged_step = step;
    l->staged_micro = micro;
    l->stage_calls++;
    *shape_key = l->shape_key;
    return 0;
}

static void lin_run(void *ctx, int micro, float loss_mult, const mrcnn_tensor *loss_scale, mrcnn_tensor *loss_acc,
                    float acc_mult, mrcnn_buckets *bk) {
    lin *l = ctx;
    const int64_t step = l->staged_step;
    l->run_calls++;
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
    l->shape_key = 1;
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

/* The stand-in as the trainer's trainable, on one rank. */
static mrcnn_trainable lin_trainable(lin *l) {
    return (mrcnn_trainable){.ctx = l, .params = &l->params, .grads = &l->grads, .n_losses = 2,
                             .loss_names = lin_names, .scales_loss = 1, .stage = lin_stage, .run = lin_run};
}
static mrcnn_dist one_rank = {.rank = 0, .world_size = 1, .local_size = 1, .device = -1};

static void test_standin_no_reads(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create_generic();
    mrcnn_config cfg;
    lin_config(&cfg, 2);
    lin l;
    lin_init(&l, be);
    mrcnn_trainable m = lin_trainable(&l);
    mrcnn_trainer tr;
    mrcnn_trainer_init(&tr, &cfg, &one_rank, be, &m, 0);
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

/* The lr and the step index reach the update through the control vector (one write per
 * step, before the region): under a warmup schedule each step's update is lr(step) x the
 * new momentum, with lr(step) the schedule's value at that step (a stale or constant lr
 * moves the weights by another amount). */
static void test_lr_through_vector(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create_generic();
    mrcnn_config cfg;
    lin_config(&cfg, 1);
    mrcnn_config_set(&cfg, "SOLVER.WARMUP_ITERS=6", "test");
    mrcnn_config_set(&cfg, "SOLVER.WARMUP_FACTOR=0.01", "test");
    mrcnn_config_set(&cfg, "SOLVER.CLIP_GRADIENTS.ENABLED=false", "test");
    lin l;
    lin_init(&l, be);
    mrcnn_trainable m = lin_trainable(&l);
    mrcnn_trainer tr;
    mrcnn_trainer_init(&tr, &cfg, &one_rank, be, &m, 0);
    enum { NP = D_OUT * D_IN };
    float before[NP];
    float prev_lr = -1;
    const mrcnn_backend_stats s0 = mrcnn_backend_stats_get(be);
    for (int i = 0; i < 8; i++) {
        memcpy(before, l.params.base, sizeof before);
        mrcnn_step_result r;
        mrcnn_trainer_step(&tr, &r);
        const float *c = tr.ctl.data; // CPU: the device vector is host memory
        const float lr = mrcnn_lr_at(&tr.sched, i);
        assert_float_equal(c[MRCNN_CTL_LR], lr, 0);
        assert_float_equal(c[MRCNN_CTL_STEP_INDEX], (float)i, 0);
        assert_float_equal(r.lr, lr, 0);
        if (i < 6) assert_true(lr != prev_lr); // the warmup moves it every step
        prev_lr = lr;
        const float *p = (const float *)l.params.base, *v = (const float *)tr.sgd.momentum.base;
        for (int k = 0; k < NP; k++) {
            float want = before[k] - lr * v[k];
            if (fabsf(p[k] - want) > 1e-7f * (1.0f + fabsf(want)))
                fail_msg("step %d (lr %g): weight %d is %.9g, before - lr x momentum = %.9g", i, (double)lr, k,
                         (double)p[k], (double)want);
        }
    }
    /* one upload per step (the lr and the index; the first: the whole vector) */
    assert_int_equal(stats_since(be, &s0).uploads, 8);
    mrcnn_trainer_free(&tr);
    lin_free(&l);
    mrcnn_backend_destroy(be);
}

/* The cache's decisions as a pure function: warm-up, capture, replay, LRU eviction, a new
 * epoch forgetting every graph (keys stay warmed up), key 0 and graphs off. */
static void test_graph_plan(void **state) {
    mrcnn_graph_cache c;
    memset(&c, 0, sizeof c);
    char g[16]; // distinct fake graphs
    mrcnn_graph_plan p = mrcnn_graph_cache_plan(&c, 0, 7, 0);
    assert_int_equal(p.action, MRCNN_GRAPH_DIRECT);
    assert_int_equal(c.clock, 0); // untouched
    p = mrcnn_graph_cache_plan(&c, 1, 0, 0);
    assert_int_equal(p.action, MRCNN_GRAPH_DIRECT);
    assert_int_equal(c.clock, 0);
    p = mrcnn_graph_cache_plan(&c, 1, 7, 0);
    assert_int_equal(p.action, MRCNN_GRAPH_WARMUP);
    const int s7 = p.slot;
    p = mrcnn_graph_cache_plan(&c, 1, 7, 0);
    assert_int_equal(p.action, MRCNN_GRAPH_CAPTURE);
    assert_int_equal(p.slot, s7);
    c.e[s7].graph = &g[7];
    p = mrcnn_graph_cache_plan(&c, 1, 7, 0);
    assert_int_equal(p.action, MRCNN_GRAPH_REPLAY);
    assert_int_equal(p.n_destroy, 0);
    /* three more keys fill the cache (4 entries), each captured */
    for (uint64_t k = 1; k <= 3; k++) {
        assert_int_equal(mrcnn_graph_cache_plan(&c, 1, k, 0).action, MRCNN_GRAPH_WARMUP);
        p = mrcnn_graph_cache_plan(&c, 1, k, 0);
        assert_int_equal(p.action, MRCNN_GRAPH_CAPTURE);
        c.e[p.slot].graph = &g[k];
    }
    assert_int_equal(mrcnn_graph_cache_plan(&c, 1, 7, 0).action, MRCNN_GRAPH_REPLAY); // 7 is the newest now
    /* a fifth key evicts the least recently used (1, not 7, the first inserted) */
    p = mrcnn_graph_cache_plan(&c, 1, 9, 0);
    assert_int_equal(p.action, MRCNN_GRAPH_WARMUP);
    assert_int_equal(p.n_destroy, 1);
    assert_ptr_equal(p.destroy[0], &g[1]);
    assert_int_equal(mrcnn_graph_cache_plan(&c, 1, 7, 0).action, MRCNN_GRAPH_REPLAY);
    assert_int_equal(mrcnn_graph_cache_plan(&c, 1, 1, 0).action, MRCNN_GRAPH_WARMUP); // evicted: warm up again
    /* a new epoch: every graph destroyed once, their keys captured again without warm-up */
    p = mrcnn_graph_cache_plan(&c, 1, 7, 5);
    assert_true(p.flushed);
    assert_int_equal(p.n_destroy, 2); // 7 and 3 (2 was evicted by 1; 9 and 1 only warmed up)
    assert_int_equal(p.action, MRCNN_GRAPH_CAPTURE);
    c.e[p.slot].graph = &g[8];
    p = mrcnn_graph_cache_plan(&c, 1, 3, 5);
    assert_false(p.flushed);
    assert_int_equal(p.n_destroy, 0);
    assert_int_equal(p.action, MRCNN_GRAPH_CAPTURE);
    assert_int_equal(mrcnn_graph_cache_plan(&c, 1, 7, 5).action, MRCNN_GRAPH_REPLAY);

    /* who may use graphs at all */
    const char *why;
    assert_true(mrcnn_graph_allowed(1, 1, 1, 0, &why));
    assert_null(why);
    assert_true(mrcnn_graph_allowed(1, 1, 4, 1, &why)); // NCCL captures
    assert_false(mrcnn_graph_allowed(0, 1, 1, 0, &why));
    assert_non_null(strstr(why, "CUDA_GRAPH"));
    assert_false(mrcnn_graph_allowed(1, 2, 1, 0, &why));
    assert_non_null(strstr(why, "ACCUM_STEPS"));
    assert_false(mrcnn_graph_allowed(1, 1, 2, 0, &why));
    assert_non_null(strstr(why, "NCCL"));
    /* the config's side: auto is on for cuda only */
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    assert_true(mrcnn_config_cuda_graph(&cfg, "cuda"));
    assert_false(mrcnn_config_cuda_graph(&cfg, "cpu"));
    mrcnn_config_set(&cfg, "SOLVER.CUDA_GRAPH=on", "test");
    assert_true(mrcnn_config_cuda_graph(&cfg, "cpu"));
}

/* SOLVER.CUDA_GRAPH=on on the CPU backend (graph_begin returns 0): the first step warms
 * up, the second finds no capture and turns graphs off; the weights, momentum and window
 * are bit for bit those of a run with graphs off. */
static void run_lin(const char *graph, int steps, float *params, float *mom, mrcnn_loss_window *w,
                    mrcnn_trainer *keep) {
    mrcnn_backend *be = mrcnn_backend_cpu_create_generic();
    mrcnn_config cfg;
    lin_config(&cfg, 1);
    mrcnn_config_set(&cfg, "SOLVER.WARMUP_ITERS=4", "test");
    char a[64];
    snprintf(a, sizeof a, "SOLVER.CUDA_GRAPH=%s", graph);
    mrcnn_config_set(&cfg, a, "test");
    lin l;
    lin_init(&l, be);
    l.inject_step = 2;
    mrcnn_trainable m = lin_trainable(&l);
    mrcnn_trainer tr;
    mrcnn_trainer_init(&tr, &cfg, &one_rank, be, &m, 0);
    for (int i = 0; i < steps; i++) {
        mrcnn_step_result r;
        mrcnn_trainer_step(&tr, &r);
    }
    mrcnn_trainer_take_losses(&tr, w);
    memcpy(params, l.params.base, D_OUT * D_IN * sizeof(float));
    memcpy(mom, tr.sgd.momentum.base, D_OUT * D_IN * sizeof(float));
    assert_int_equal(l.run_calls, steps); // every step ran its region once
    *keep = tr;
    mrcnn_trainer_free(&tr);
    lin_free(&l);
    mrcnn_backend_destroy(be);
}

static void test_graph_on_cpu_equals_off(void **state) {
    enum { NP = D_OUT * D_IN, STEPS = 7 };
    float p_on[NP], p_off[NP], v_on[NP], v_off[NP];
    mrcnn_loss_window w_on, w_off;
    mrcnn_trainer t_on, t_off;
    run_lin("on", STEPS, p_on, v_on, &w_on, &t_on);
    run_lin("off", STEPS, p_off, v_off, &w_off, &t_off);
    assert_memory_equal(p_on, p_off, sizeof p_on);
    assert_memory_equal(v_on, v_off, sizeof v_on);
    assert_memory_equal(w_on.mean, w_off.mean, sizeof w_on.mean);
    assert_int_equal(w_on.last_skipped, 2);
    assert_int_equal(w_off.last_skipped, 2);
    /* on: allowed at first, one warm-up, then the CPU cannot capture: off, direct */
    assert_int_equal(t_on.graph_stats.warmup, 1);
    assert_int_equal(t_on.graph_stats.capture + t_on.graph_stats.replay, 0);
    assert_int_equal(t_on.graph_stats.direct, STEPS - 1);
    assert_int_equal(t_off.graph_stats.direct, STEPS);
    assert_int_equal(t_off.graph_stats.warmup, 0);
}

/* ---- the trainer's graph calls against a fake capturing backend ----
 * The CPU generic backend with stream.graph_* replaced: graph_begin says it captures, the
 * region then still runs (the CPU cannot record), graph_launch runs nothing. What is
 * checked is the trainer's use of the calls (which step warms up, captures, replays,
 * when graphs are destroyed), the region bracket and that no upload happens inside it.
 * Failures can be injected at every graph point (fk.fail_at), reported the way the CUDA
 * backend reports them (the check family's mrcnn_fail_call, or a guard note from
 * graph_end). With buffers registered (fk_snap_add) the fake also keeps a capture's
 * promise that nothing recorded runs: graph_begin copies them, graph_end puts them
 * back, and the launch right after the capture applies what the recording computed. */
typedef enum {
    FK_NONE = 0,
    FK_BEGIN,       // cudaStreamBeginCapture fails
    FK_REFUSED,     // a call inside the region refused by the capture (invalidates it)
    FK_FAILED,      // a call inside the region fails (the capture itself still ends)
    FK_END,         // cudaStreamEndCapture fails
    FK_INSTANTIATE, // cudaGraphInstantiate fails
    FK_LAUNCH,      // the launch right after the capture fails
    FK_REPLAY,      // the first replay's launch fails
    FK_POINTS
} fk_point;
static const char *const fk_point_name[FK_POINTS] = {"none", "begin", "refused call", "failed call", "end",
                                                     "instantiate", "launch", "replay launch"};
static struct {
    int begin, end, launch, destroy, created, fail_end, capturing, fail_in_capture, check_in_capture;
    uint64_t epoch;
    int in_region, region_calls, uploads_in_region, bad_bracket;
    void (*write)(const mrcnn_backend *be, mrcnn_tensor *dst, const void *src);
    fk_point fail_at;
    int invalidated, fail_direct;
    struct { void *p; size_t n; char *pre, *post; } snap[4];
    int n_snap, post_valid;
} fk;
static void fk_snap_add(void *p, size_t n) {
    fk.snap[fk.n_snap].p = p;
    fk.snap[fk.n_snap].n = n;
    fk.snap[fk.n_snap].pre = malloc(n);
    fk.snap[fk.n_snap].post = malloc(n);
    fk.n_snap++;
}
static void fk_snap_free(void) {
    for (int i = 0; i < fk.n_snap; i++) {
        free(fk.snap[i].pre);
        free(fk.snap[i].post);
    }
    fk.n_snap = 0;
}
static int fk_begin(const mrcnn_backend *be) {
    fk.begin++;
    if (fk.fail_at == FK_BEGIN) {
        mrcnn_fail_call("CUDA", "cudaStreamBeginCapture", "operation not permitted", __FILE__, __LINE__);
        return 0;
    }
    fk.capturing = 1;
    fk.invalidated = 0;
    for (int i = 0; i < fk.n_snap; i++) memcpy(fk.snap[i].pre, fk.snap[i].p, fk.snap[i].n);
    return 1;
}
static void *fk_end(const mrcnn_backend *be) {
    fk.end++;
    fk.capturing = 0;
    for (int i = 0; i < fk.n_snap; i++) { // recorded, not run
        memcpy(fk.snap[i].post, fk.snap[i].p, fk.snap[i].n);
        memcpy(fk.snap[i].p, fk.snap[i].pre, fk.snap[i].n);
    }
    if (fk.fail_end) return NULL;
    if (fk.invalidated || fk.fail_at == FK_END || fk.fail_at == FK_INSTANTIATE) {
        mrcnn_graph_guard_note("CUDA graph %s", fk.fail_at == FK_INSTANTIATE ? "instantiation failed: cudaErrorInvalidValue"
                                               : fk.invalidated ? "capture failed: cudaErrorStreamCaptureInvalidated"
                                                                : "capture failed: cudaErrorStreamCaptureUnjoined");
        return NULL;
    }
    fk.post_valid = fk.n_snap > 0;
    fk.created++;
    return malloc(1); // a distinct handle; ASan/LSan catch a leak or a double destroy
}
static void fk_launch(const mrcnn_backend *be, void *g) {
    assert_non_null(g);
    fk.launch++;
    if ((fk.fail_at == FK_LAUNCH && fk.launch == 1) || (fk.fail_at == FK_REPLAY && fk.launch == 2)) {
        fk.post_valid = 0;
        mrcnn_fail_call("CUDA", "cudaGraphLaunch", "out of memory", __FILE__, __LINE__);
        return;
    }
    if (fk.post_valid) { // the capture's own step: its recorded work runs now
        for (int i = 0; i < fk.n_snap; i++) memcpy(fk.snap[i].p, fk.snap[i].post, fk.snap[i].n);
        fk.post_valid = 0;
    } else if (fk.n_snap > 0) {
        fail_msg("the fake cannot replay a graph on another step's inputs");
    }
}
static void fk_destroy(const mrcnn_backend *be, void *g) { fk.destroy++; free(g); }
static uint64_t fk_epoch(const mrcnn_backend *be) { return fk.epoch; }
static void fk_write(const mrcnn_backend *be, mrcnn_tensor *dst, const void *src) {
    if (fk.in_region) fk.uploads_in_region++;
    fk.write(be, dst, src);
}
static void fk_on_region(void *ctx, int begin) {
    if (begin == fk.in_region) fk.bad_bracket++;
    fk.in_region = begin;
    fk.region_calls += begin;
}

/* Calls inside the region that fail as a CUDA call may: refused by the capture (which
 * the capture then reports at its end), failing on their own, or a failing argument
 * check (not a library call: fatal even while capturing). fail_direct: a call that
 * fails outside any capture (a real kernel error: fatal, the call named). */
static void (*fk_decide_inner)(const mrcnn_backend *be, const mrcnn_step_desc *d, mrcnn_tensor *ctl);
static void fk_decide(const mrcnn_backend *be, const mrcnn_step_desc *d, mrcnn_tensor *ctl) {
    MRCNN_CHECK(!(fk.capturing && fk.check_in_capture), "fake capture: a bad argument");
    if (fk.capturing && (fk.fail_in_capture || fk.fail_at == FK_REFUSED)) {
        fk.invalidated = 1;
        mrcnn_fail_call("CUDA", "cudaMemsetAsync(decide)", "operation not permitted when stream is capturing",
                        __FILE__, __LINE__);
        return;
    }
    if (fk.capturing && fk.fail_at == FK_FAILED) {
        mrcnn_fail_call("cuDNN", "cudnnConvolutionForward(decide)", "CUDNN_STATUS_EXECUTION_FAILED", __FILE__,
                        __LINE__);
        return;
    }
    if (fk.fail_direct) {
        mrcnn_fail_call("CUDA", "step_decide_kernel<<<>>>", "an illegal memory access was encountered", __FILE__,
                        __LINE__);
        return;
    }
    fk_decide_inner(be, d, ctl);
}

static mrcnn_backend *fk_backend(void) {
    memset(&fk, 0, sizeof fk);
    mrcnn_backend *be = mrcnn_backend_cpu_create_generic();
    be->stream.graph_begin = fk_begin;
    be->stream.graph_end = fk_end;
    be->stream.graph_launch = fk_launch;
    be->stream.graph_destroy = fk_destroy;
    be->stream.graph_epoch = fk_epoch;
    fk.write = be->mem.write;
    be->mem.write = fk_write;
    fk_decide_inner = be->step.decide;
    be->step.decide = fk_decide;
    return be;
}

/* stderr into a temporary file while the steps run, to count the warnings. */
static FILE *stderr_capture(int *saved) {
    fflush(stderr);
    FILE *f = tmpfile();
    assert_non_null(f);
    *saved = dup(2);
    dup2(fileno(f), 2);
    return f;
}
static int stderr_release(FILE *f, int saved, const char *needle, char *first, size_t n) {
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    char line[2048];
    int count = 0;
    if (n) first[0] = 0;
    while (fgets(line, sizeof line, f)) {
        fputs(line, stderr); // still shown in the test's log
        if (strstr(line, needle) && count++ == 0) snprintf(first, n, "%s", line);
    }
    fclose(f);
    return count;
}

static void test_graph_trainer_calls(void **state) {
    mrcnn_backend *be = fk_backend();
    mrcnn_config cfg;
    lin_config(&cfg, 1);
    mrcnn_config_set(&cfg, "SOLVER.CUDA_GRAPH=on", "test");
    lin l;
    lin_init(&l, be);
    mrcnn_trainable m = lin_trainable(&l);
    mrcnn_trainer tr;
    mrcnn_trainer_init(&tr, &cfg, &one_rank, be, &m, 0);
    tr.on_region = fk_on_region;
    assert_int_equal(tr.graphs, 1);
    /* keys per step; at step 6 the backend reallocates a buffer (a new epoch) */
    const uint64_t keys[] = {'A', 'A', 'A', 'B', 'B', 'A', 'B', 'A', 'C', 'D', 'E', 'B', 0, 'E'};
    /* W warm-up, C capture, R replay, D direct */
    const char want[] = "WCRWCRCCWWWWDC";
    const int n = (int)(sizeof keys / sizeof *keys);
    for (int i = 0; i < n; i++) {
        l.shape_key = keys[i];
        if (i == 6) fk.epoch++;
        const int runs0 = l.run_calls, begin0 = fk.begin, launch0 = fk.launch;
        mrcnn_step_result r;
        mrcnn_trainer_step(&tr, &r);
        char got = l.run_calls == runs0 ? 'R' : fk.begin > begin0 ? 'C' : keys[i] ? 'W' : 'D';
        if (got != want[i]) fail_msg("step %d (key %c): action %c, expected %c", i, keys[i] ? (int)keys[i] : '0', got, want[i]);
        if ((got == 'C' || got == 'R') != (fk.launch == launch0 + 1))
            fail_msg("step %d: %d launches for action %c", i, fk.launch - launch0, got);
    }
    assert_int_equal(fk.begin, 5);
    assert_int_equal(fk.end, 5);
    assert_int_equal(fk.launch, 7);
    assert_int_equal(tr.graph_stats.warmup, 6);
    assert_int_equal(tr.graph_stats.capture, 5);
    assert_int_equal(tr.graph_stats.replay, 2);
    assert_int_equal(tr.graph_stats.direct, 1);
    assert_int_equal(tr.graph_stats.flush, 1);
    /* the epoch dropped A's and B's graphs; E and B evicted A's and B's new ones */
    assert_int_equal(fk.destroy, 4);
    assert_int_equal(fk.region_calls, n);
    assert_int_equal(fk.bad_bracket, 0);
    assert_int_equal(fk.in_region, 0);
    assert_int_equal(fk.uploads_in_region, 0); // the lr and the index went up before the region
    assert_int_equal(l.stage_calls, n);
    mrcnn_trainer_free(&tr);
    assert_int_equal(fk.destroy, fk.created); // the last graph (E) with the trainer
    lin_free(&l);
    mrcnn_backend_destroy(be);
}

/* A call refused while capturing no longer stops the run: the capture is dropped, one
 * warning names the call, graphs go off and the step reruns directly. A failing check
 * that is not a library call (an argument) still stops the run, with a message that
 * says a capture was going on and how to run without graphs. */
static void test_graph_capture_refused_call(void **state) {
    mrcnn_backend *be = fk_backend();
    fk.fail_in_capture = 1;
    mrcnn_config cfg;
    lin_config(&cfg, 1);
    mrcnn_config_set(&cfg, "SOLVER.CUDA_GRAPH=on", "test");
    lin l;
    lin_init(&l, be);
    mrcnn_trainable m = lin_trainable(&l);
    mrcnn_trainer tr;
    mrcnn_trainer_init(&tr, &cfg, &one_rank, be, &m, 0);
    mrcnn_step_result r;
    mrcnn_trainer_step(&tr, &r); // the warm-up runs directly: no failure
    int saved;
    FILE *err = stderr_capture(&saved);
    mrcnn_trainer_step(&tr, &r);
    char first[2048];
    const int warns = stderr_release(err, saved, "WARN", first, sizeof first);
    assert_int_equal(warns, 1);
    assert_non_null(strstr(first, "CUDA graph capture failed at step 1"));
    assert_non_null(strstr(first, "cudaMemsetAsync(decide) failed: operation not permitted when stream is capturing"));
    assert_int_equal(tr.graphs, 0);
    assert_int_equal(tr.st.step, 2);
    assert_int_equal(fk.launch, 0);
    mrcnn_trainer_free(&tr);

    fk.fail_in_capture = 0;
    fk.check_in_capture = 1;
    mrcnn_trainer_init(&tr, &cfg, &one_rank, be, &m, 0);
    mrcnn_trainer_step(&tr, &r);
    EXPECT_FAIL(mrcnn_trainer_step(&tr, &r), "(while capturing training step 1 into a CUDA graph; "
                                             "SOLVER.CUDA_GRAPH=off runs every step directly)");
    mrcnn_fail_context(NULL); // the longjmp skipped the trainer's own reset
    mrcnn_graph_guard_end(NULL, 0);
    EXPECT_FAIL(MRCNN_CHECK(0, "after the capture"), "after the capture");
    assert_null(strstr(mrcnn_test_msg, "while capturing"));
    fk.capturing = 0;
    mrcnn_trainer_free(&tr);
    lin_free(&l);
    mrcnn_backend_destroy(be);
}

/* One run of the stand-in (SOLVER.CUDA_GRAPH=graph, 6 steps, an Inf at step 3) on the
 * fake with a failure injected at `at`; the weights, momentum and window come back.
 * Returns the warnings printed; *first: the first. */
enum { FB_STEPS = 6 };
static int run_failing(const char *graph, fk_point at, float *params, float *mom, mrcnn_loss_window *w,
                       mrcnn_trainer *keep, char *first, size_t n) {
    mrcnn_backend *be = fk_backend();
    fk.fail_at = at;
    mrcnn_config cfg;
    lin_config(&cfg, 1);
    mrcnn_config_set(&cfg, "SOLVER.WARMUP_ITERS=4", "test");
    char a[64];
    snprintf(a, sizeof a, "SOLVER.CUDA_GRAPH=%s", graph);
    mrcnn_config_set(&cfg, a, "test");
    lin l;
    lin_init(&l, be);
    l.inject_step = 3;
    mrcnn_trainable m = lin_trainable(&l);
    mrcnn_trainer tr;
    mrcnn_trainer_init(&tr, &cfg, &one_rank, be, &m, 0);
    fk_snap_add(l.params.base, l.params.size);
    fk_snap_add(l.grads.base, l.grads.size);
    fk_snap_add(tr.sgd.momentum.base, tr.sgd.momentum.size);
    fk_snap_add(tr.ctl_mem, (size_t)MRCNN_CTL_SIZE(2) * sizeof(float));
    int saved;
    FILE *err = stderr_capture(&saved);
    for (int i = 0; i < FB_STEPS; i++) {
        mrcnn_step_result r;
        mrcnn_trainer_step(&tr, &r);
    }
    const int warns = stderr_release(err, saved, "WARN", first, n);
    mrcnn_trainer_take_losses(&tr, w);
    memcpy(params, l.params.base, D_OUT * D_IN * sizeof(float));
    memcpy(mom, tr.sgd.momentum.base, D_OUT * D_IN * sizeof(float));
    *keep = tr;
    /* a real kernel error outside any capture still stops the run, the call named */
    fk.fail_direct = 1;
    mrcnn_step_result r;
    EXPECT_FAIL(mrcnn_trainer_step(&tr, &r), "step_decide_kernel<<<>>> failed: an illegal memory access");
    fk_snap_free();
    mrcnn_trainer_free(&tr);
    assert_int_equal(fk.destroy, fk.created); // no graph left behind
    lin_free(&l);
    mrcnn_backend_destroy(be);
    return warns;
}

/* A graph failure at each point (capture start, a refused call and a failing call in
 * the region, capture end, instantiation, the launch after the capture, a replay's
 * launch): one warning naming it, graphs off for the rest of the run, and the weights,
 * momentum and loss window bit for bit those of SOLVER.CUDA_GRAPH=off. */
static void test_graph_failure_points(void **state) {
    enum { NP = D_OUT * D_IN };
    float p_off[NP], v_off[NP], p[NP], v[NP];
    mrcnn_loss_window w_off, w;
    mrcnn_trainer t_off, t;
    char first[2048];
    assert_int_equal(run_failing("off", FK_NONE, p_off, v_off, &w_off, &t_off, first, sizeof first), 0);
    static const char *const cause[FK_POINTS] = {
        [FK_BEGIN] = "cudaStreamBeginCapture failed", [FK_REFUSED] = "cudaMemsetAsync(decide) failed",
        [FK_FAILED] = "cudnnConvolutionForward(decide) failed", [FK_END] = "cudaErrorStreamCaptureUnjoined",
        [FK_INSTANTIATE] = "instantiation failed: cudaErrorInvalidValue", [FK_LAUNCH] = "cudaGraphLaunch failed",
        [FK_REPLAY] = "cudaGraphLaunch failed"};
    for (int at = FK_BEGIN; at < FK_POINTS; at++) {
        const int warns = run_failing("on", (fk_point)at, p, v, &w, &t, first, sizeof first);
        printf("failure at %s: %d warning(s): %s", fk_point_name[at], warns, first);
        if (warns != 1) fail_msg("failure at %s: %d warnings, expected 1", fk_point_name[at], warns);
        if (!strstr(first, cause[at])) fail_msg("failure at %s: the warning lacks '%s'", fk_point_name[at], cause[at]);
        if (t.graphs != 0) fail_msg("failure at %s: graphs still on", fk_point_name[at]);
        /* after the failure no graph call: one capture attempt, a launch only where one failed */
        assert_int_equal(fk.begin, 1);
        assert_int_equal(fk.launch, at == FK_LAUNCH ? 1 : at == FK_REPLAY ? 2 : 0);
        assert_int_equal(t.graph_stats.warmup, 1);
        assert_int_equal(t.graph_stats.capture, at == FK_REPLAY ? 1 : 0);
        assert_int_equal(t.graph_stats.replay, 0);
        assert_int_equal(t.graph_stats.direct, FB_STEPS - 1 - t.graph_stats.capture);
        if (memcmp(p, p_off, sizeof p) || memcmp(v, v_off, sizeof v))
            fail_msg("failure at %s: weights or momentum differ from SOLVER.CUDA_GRAPH=off", fk_point_name[at]);
        assert_memory_equal(w.mean, w_off.mean, sizeof w.mean);
        assert_int_equal(w.last_skipped, 3);
        assert_int_equal(w.finite_steps, FB_STEPS - 1);
    }
}

/* A capture that fails (graph_end NULL): graphs off for the run, the region runs
 * directly in that step (nothing of it ran while capturing on a GPU), later steps run
 * directly; accumulation (ACCUM_STEPS 2) never captures. */
static void test_graph_capture_failure(void **state) {
    mrcnn_backend *be = fk_backend();
    fk.fail_end = 1;
    mrcnn_config cfg;
    lin_config(&cfg, 1);
    mrcnn_config_set(&cfg, "SOLVER.CUDA_GRAPH=on", "test");
    lin l;
    lin_init(&l, be);
    mrcnn_trainable m = lin_trainable(&l);
    mrcnn_trainer tr;
    mrcnn_trainer_init(&tr, &cfg, &one_rank, be, &m, 0);
    for (int i = 0; i < 4; i++) {
        const int runs0 = l.run_calls;
        mrcnn_step_result r;
        mrcnn_trainer_step(&tr, &r);
        /* step 1: the (fake) capture ran it once, then the direct run */
        assert_int_equal(l.run_calls - runs0, i == 1 ? 2 : 1);
    }
    assert_int_equal(fk.begin, 1);
    assert_int_equal(fk.launch, 0);
    assert_int_equal(tr.graphs, 0);
    assert_int_equal(tr.graph_stats.direct, 3);
    mrcnn_trainer_free(&tr);
    assert_int_equal(fk.destroy, 0);

    lin_config(&cfg, 2);
    mrcnn_config_set(&cfg, "SOLVER.CUDA_GRAPH=on", "test");
    fk.fail_end = 0;
    mrcnn_trainer_init(&tr, &cfg, &one_rank, be, &m, 0);
    assert_int_equal(tr.graphs, 0);
    const int stage0 = l.stage_calls;
    for (int i = 0; i < 3; i++) {
        mrcnn_step_result r;
        mrcnn_trainer_step(&tr, &r);
    }
    assert_int_equal(l.stage_calls - stage0, 6); // both micro-batches staged every step
    assert_int_equal(fk.begin, 1);
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
    int64_t counted = 0, adapted = 0, last_bad = -1;
    for (int i = 0; i < nf; i++) {
        c[MRCNN_CTL_STEP + 0] = 1.0f;
        c[MRCNN_CTL_STEP + 1] = 2.0f;
        c[MRCNN_CTL_FLAG(nl)] = (float)flags[i];
        c[MRCNN_CTL_STEP_INDEX] = (float)(1000 + i); // the host writes it before each step's region
        mrcnn_step_desc d = {.n_losses = nl, .scaler_enabled = 1, .scales_loss = 1, .growth_interval = 3,
                             .inv_world = 1.0f, .inv_accum = 1.0f};
        float used = host.scale;
        be->step.decide(be, &d, &ctl);
        int applied = test_loss_scaler_update(&host, flags[i]);
        if (flags[i]) {
            if (used > 1.0f) adapted++;
            else counted++;
        }
        assert_int_equal((int)c[MRCNN_CTL_APPLY], applied);
        assert_float_equal(c[MRCNN_CTL_GRAD_SCALE], 1.0f / used, 0);
        assert_float_equal(c[MRCNN_CTL_SCALE], host.scale, 0);
        assert_int_equal((int)c[MRCNN_CTL_CLEAN], host.clean_steps);
        assert_int_equal((int64_t)c[MRCNN_CTL_SKIPPED], host.skipped);
        if (flags[i]) last_bad = 1000 + i;
        /* the newest skipped step's index comes from the vector's STEP_INDEX */
        assert_int_equal((int64_t)c[MRCNN_CTL_WIN_BAD_STEP(nl)], last_bad + 1);
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
    be->step.sum_squares(be, &gt, NULL, &sq);
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

/* As cmd_train.c binds the model: stage uploads the batch (mrcnn_model_stage), run is
 * the device half with its temporaries in ws, released before it returns. */
static double tiny_stage(void *ctx, int64_t step, int micro, uint64_t *shape_key) {
    tiny *t = ctx;
    mrcnn_batch b = {.host_images = t->images, .image_hw = t->hw, .gt = t->gt};
    b.images = mrcnn_tensor_view(NULL, MRCNN_DTYPE_F32, t->be->device, 4, (int64_t[]){NI, HH, WW, 3});
    *shape_key = mrcnn_model_stage(&t->m, micro, &b); // uploads, as the loader's batch is
    return 0;
}

static void tiny_run(void *ctx, int micro, float loss_mult, const mrcnn_tensor *loss_scale, mrcnn_tensor *loss_acc,
                     float acc_mult, mrcnn_buckets *bk) {
    tiny *t = ctx;
    t->m.loss_mult = loss_mult;
    t->m.loss_scale = loss_scale;
    t->m.grad_ready = bk ? tiny_ready : NULL;
    t->m.grad_ready_ctx = bk;
    mrcnn_pass st;
    mrcnn_model_run(&t->m, micro, &t->ws, true, &st);
    t->be->step.axpy(t->be, acc_mult, &st.loss_dev, loss_acc);
    mrcnn_pass_free(&st);
    mrcnn_ws_reset(&t->ws);
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
                          .scales_loss = 1, .stage = tiny_stage, .run = tiny_run};
    mrcnn_trainer tr;
    mrcnn_trainer_init(&tr, &cfg, &one_rank, t.be, &tm, 0);
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
        cmocka_unit_test(test_lr_through_vector),
        cmocka_unit_test(test_graph_plan),
        cmocka_unit_test(test_graph_on_cpu_equals_off),
        cmocka_unit_test(test_graph_trainer_calls),
        cmocka_unit_test(test_graph_capture_failure),
        cmocka_unit_test(test_graph_capture_refused_call),
        cmocka_unit_test(test_graph_failure_points),
        cmocka_unit_test(test_tiny_model_no_reads),
        cmocka_unit_test(test_tiny_model_fp16_no_reads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
