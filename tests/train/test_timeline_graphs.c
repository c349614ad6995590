/* `mrcnn bench train`'s timeline under CUDA graphs, on the CPU: the timeline step times
 * each gradient-ready report, and those come from the trainable's run, which a replayed
 * graph never calls (the CPU cannot record, so a replay here runs nothing, as on a GPU
 * the host side of the region does not run). The bench therefore takes that step with
 * mrcnn_trainer_step_direct. Checked against a fake capturing backend (the CPU generic
 * backend whose stream.graph_* say they capture) and a stand-in trainable of three
 * parameters that reports each one ready, as the model's backward does:
 *  - the key's third step replays: no report (why a plain step cannot be the timeline's);
 *  - the direct step: every parameter reported, the buckets all marked, no capture and
 *    no launch, one more direct step in the stats;
 *  - the cache survives it: the next plain step replays the same graph.
 * MRCNN_TIMELINE_BREAK=1 takes the timeline step with mrcnn_trainer_step, as the bench
 * did before (the test must then fail: its self-check). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "mrcnn/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_PARAMS = 3 };

static struct {
    int begin, end, launch, destroy;
} fk;
static int fk_begin(const mrcnn_backend *be) { return ++fk.begin; }
static void *fk_end(const mrcnn_backend *be) {
    fk.end++;
    return malloc(1);
}
static void fk_launch(const mrcnn_backend *be, void *g) { fk.launch++; }
static void fk_destroy(const mrcnn_backend *be, void *g) {
    fk.destroy++;
    free(g);
}

typedef struct {
    mrcnn_backend *be;
    mrcnn_arena params, grads;
    int reports;                // gradient-ready reports (the bench's on_ready calls)
    int reported[N_PARAMS];     // per parameter, in the current step
} standin;

static double st_stage(void *ctx, int64_t step, int micro, uint64_t *shape_key) {
    *shape_key = 7; // one shape: warm-up, capture, then replays
    return 0;
}

/* Backward in reverse parameter order: each gradient reported ready when final. */
static void st_run(void *ctx, int micro, float loss_mult, const mrcnn_tensor *loss_scale, mrcnn_tensor *loss_acc,
                   float acc_mult, mrcnn_buckets *bk) {
    standin *s = ctx;
    float terms[1] = {0.5f};
    int64_t one = 1;
    mrcnn_tensor tv = mrcnn_tensor_view(terms, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, &one);
    s->be->step.axpy(s->be, acc_mult, &tv, loss_acc);
    float *g = (float *)s->grads.base;
    g[0] += 0.01f * loss_mult;
    if (!bk) return;
    for (int p = N_PARAMS - 1; p >= 0; p--) {
        s->reports++;
        s->reported[p]++;
        mrcnn_buckets_mark_ready(bk, p);
    }
}

static const char *const loss_names[] = {"loss"};

static void test_timeline_step_reports_under_graphs(void **state) {
    memset(&fk, 0, sizeof fk);
    mrcnn_backend *be = mrcnn_backend_cpu_create_generic();
    be->stream.graph_begin = fk_begin;
    be->stream.graph_end = fk_end;
    be->stream.graph_launch = fk_launch;
    be->stream.graph_destroy = fk_destroy;
    standin s;
    memset(&s, 0, sizeof s);
    s.be = be;
    mrcnn_arena_init(&s.params, "params", MRCNN_DEVICE_CPU);
    mrcnn_arena_add(&s.params, "a.weight", MRCNN_DTYPE_F32, 1, (int64_t[]){64});
    mrcnn_arena_add(&s.params, "b.weight", MRCNN_DTYPE_F32, 1, (int64_t[]){32});
    mrcnn_arena_add(&s.params, "c.bias", MRCNN_DTYPE_F32, 1, (int64_t[]){8});
    mrcnn_arena_commit(&s.params, NULL, NULL);
    mrcnn_arena_init_like(&s.grads, "grads", &s.params, MRCNN_DTYPE_F32);
    mrcnn_arena_commit(&s.grads, NULL, NULL);
    mrcnn_trainable m = {.ctx = &s, .params = &s.params, .grads = &s.grads, .n_losses = 1, .loss_names = loss_names,
                         .stage = st_stage, .run = st_run};
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    mrcnn_config_set(&cfg, "SOLVER.IMS_PER_BATCH=1", "test");
    mrcnn_config_set(&cfg, "SOLVER.PRECISION=fp32", "test");
    mrcnn_config_set(&cfg, "SOLVER.CUDA_GRAPH=on", "test");
    mrcnn_dist one = {.rank = 0, .world_size = 1, .local_size = 1, .device = -1};
    mrcnn_trainer tr;
    /* small buckets: each parameter in its own */
    mrcnn_trainer_init(&tr, &cfg, &one, be, &m, 64);
    assert_int_equal(tr.graphs, 1);
    assert_true(tr.bk.n_buckets >= 2);

    mrcnn_step_result r;
    for (int i = 0; i < 3; i++) mrcnn_trainer_step(&tr, &r); // warm-up, capture, replay
    assert_int_equal(tr.graph_stats.warmup, 1);
    assert_int_equal(tr.graph_stats.capture, 1);
    assert_int_equal(tr.graph_stats.replay, 1);
    const int before = s.reports;
    mrcnn_trainer_step(&tr, &r);
    assert_int_equal(s.reports, before); // a replay: the region's host side did not run

    /* the bench's timeline step */
    memset(s.reported, 0, sizeof s.reported);
    const int reports0 = s.reports, begin0 = fk.begin, launch0 = fk.launch;
    const int64_t direct0 = tr.graph_stats.direct;
    const int old_way = getenv("MRCNN_TIMELINE_BREAK") && atoi(getenv("MRCNN_TIMELINE_BREAK"));
    if (old_way) mrcnn_trainer_step(&tr, &r);
    else mrcnn_trainer_step_direct(&tr, &r);
    printf("timeline step: %d gradient-ready reports (%d parameters), %d launches, %d captures\n",
           s.reports - reports0, N_PARAMS, fk.launch - launch0, fk.begin - begin0);
    if (s.reports - reports0 == 0)
        fail_msg("the timeline step made no gradient-ready report: it was replayed, and every bucket would read 0 ms");
    assert_int_equal(s.reports - reports0, N_PARAMS);
    for (int p = 0; p < N_PARAMS; p++) assert_int_equal(s.reported[p], 1);
    for (int b = 0; b < tr.bk.n_buckets; b++) assert_int_equal(tr.bk.b[b].n_ready, tr.bk.b[b].n_params);
    assert_int_equal(fk.launch, launch0);
    assert_int_equal(fk.begin, begin0);
    assert_int_equal(tr.graph_stats.direct, direct0 + 1);
    assert_int_equal(tr.graphs, 1);

    /* the cache as it was: the next step replays the graph captured at step 1 */
    const int reports1 = s.reports;
    mrcnn_trainer_step(&tr, &r);
    assert_int_equal(fk.launch, launch0 + 1);
    assert_int_equal(fk.begin, begin0);
    assert_int_equal(s.reports, reports1);
    assert_int_equal(tr.graph_stats.capture, 1);
    assert_int_equal(tr.graph_stats.replay, 3);
    assert_int_equal(r.step, 5);

    mrcnn_trainer_free(&tr);
    assert_int_equal(fk.destroy, fk.end);
    mrcnn_arena_free(&s.params);
    mrcnn_arena_free(&s.grads);
    mrcnn_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timeline_step_reports_under_graphs),
    };
    return cmocka_run_group_tests_name("timeline_graphs", tests, NULL, NULL);
}
