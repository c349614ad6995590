/* The whole model on the tiny config, CPU backend: finite differences of the total
 * training loss against the backward in every module, an overfit run, frozen
 * stages, and the schema-v1 checkpoint round trip. */
#include "test_model.h"
#include "test_scene.h"
#include "test_support.h"
#include "test_util.h"

#include "mrcnn/backend.h"
#include "mrcnn/backend_trace.h"
#include "mrcnn/check.h"
#include "mrcnn/config.h"
#include "mrcnn/checkpoint.h"
#include "mrcnn/model.h"
#include "mrcnn/model_trainable.h"
#include "mrcnn/rng.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NI TEST_BATCH_N
#define HH TEST_BATCH_H
#define WW TEST_BATCH_W
#define NG TEST_BATCH_G
typedef test_batch synth_batch;

typedef struct {
    mrcnn_backend *be;
    mrcnn_model m;
    mrcnn_ws ws;
    synth_batch s;
    mrcnn_batch b;
} fixture;

static void fixture_init(fixture *f, const mrcnn_config *cfg, uint64_t seed) {
    f->be = mrcnn_backend_cpu_create();
    mrcnn_model_init(&f->m, cfg, f->be);
    mrcnn_model_init_random(&f->m, seed);
    mrcnn_ws_init(&f->ws, f->be);
    test_batch_make(&f->s, seed);
    f->b = (mrcnn_batch){.image_hw = f->s.hw, .gt = f->s.gt};
}

static void fixture_free(fixture *f) {
    mrcnn_ws_free(&f->ws);
    mrcnn_model_free(&f->m);
    mrcnn_backend_destroy(f->be);
}

/* One forward (+ backward) on the fixture's batch; returns the total loss. */
static double run_step(fixture *f, bool backward, mrcnn_pass *keep) {
    mrcnn_ws_reset(&f->ws);
    f->b.images = mrcnn_ws_tensor(&f->ws, MRCNN_DTYPE_F32, 4, (int64_t[]){NI, HH, WW, 3});
    f->be->mem.write(f->be, &f->b.images, f->s.images);
    mrcnn_pass st;
    mrcnn_model_train_step(&f->m, &f->ws, &f->b, backward, &st);
    test_model_read_pass(&f->m, &st); // losses and host copies of the sampled rows
    double total = st.losses.total;
    if (keep) *keep = st;
    else mrcnn_pass_free(&st);
    return total;
}

static double dot(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* The spacing of floats at |x|. */
static double ulpf(double x) {
    float a = fabsf((float)x);
    return (double)nextafterf(a, INFINITY) - a;
}

/* One forward of the fixture's batch (no backward): the total loss, and in *r the
 * bound on its final rounding. Each loss term leaves the ops as a float partial (RPN:
 * one per FPN level, each at most the term, so 5 x half an ulp of the term, and their
 * sum rounded to a float once more; the ROI heads: one each), rounded to nearest:
 * |error| <= half an ulp of each partial. */
static double loss_at(fixture *f, double *r) {
    mrcnn_pass st;
    double l = run_step(f, false, &st);
    const mrcnn_losses *t = &st.losses;
    *r = 0.5 * (6 * ulpf(t->rpn_objectness) + 6 * ulpf(t->rpn_box_reg) + ulpf(t->classifier) +
                ulpf(t->box_reg) + ulpf(t->mask));
    mrcnn_pass_free(&st);
    return l;
}

/* L(w0 + s v) - L(w0 - s v) for one tensor, against the backward's g.(w+ - w-) over the
 * float-rounded steps actually taken: returns fd - an, and in *r the rounding bound of
 * fd (both evaluations). */
static double fd_residual(fixture *f, mrcnn_tensor *w, const float *w0, const float *g, const float *v, double s,
                          int64_t n, float *wp, double *r) {
    double an = 0, rp, rm;
    for (int64_t i = 0; i < n; i++) wp[i] = (float)(w0[i] + s * v[i]);
    for (int64_t i = 0; i < n; i++) an += (double)g[i] * ((double)wp[i] - w0[i]);
    f->be->mem.write(f->be, w, wp);
    double lp = loss_at(f, &rp);
    for (int64_t i = 0; i < n; i++) wp[i] = (float)(w0[i] - s * v[i]);
    for (int64_t i = 0; i < n; i++) an -= (double)g[i] * ((double)wp[i] - w0[i]);
    f->be->mem.write(f->be, w, wp);
    double lm = loss_at(f, &rm);
    f->be->mem.write(f->be, w, w0);
    *r = rp + rm;
    return (lp - lm) - an;
}

/* Directional finite differences of the total loss, in float (the backend is fp32;
 * the ops' own double-precision checks live in tests/grad), for one parameter tensor
 * per module, with the proposals pinned (the backward treats them as constants, as
 * torchvision does). fd = L(w + s v) - L(w - s v) against an = g.(w+ - w-) over the
 * float-rounded steps actually taken; R is the rounding bound of fd (loss_at, both
 * evaluations).
 *
 * Gradient direction v = g/|g|, step 3e-4 |w|: catches a wrong scale. Tolerance
 * 2 R + 2e-2 x 2 s |g| (the signal, = an): R doubled for the forward's own rounding beneath the loss
 * partials' (probed with steps of 1e-6 |w|: below R/2); 2e-2 for the ReLU / max-pool
 * kinks the step crosses, which along the gradient move fd by up to 1.0e-2 of an
 * (10 fixture seeds; the stem and res2 sit behind the most kinks) and do not follow
 * the step size, so step doubling cannot estimate them here.
 *
 * FD_DIRS random unit directions orthogonal to g: a gradient error e orthogonal to
 * the true gradient shows along g only at second order (|e|^2 / |g|^2: an error of
 * 0.1 |g| moves it by 1e-2, inside the allowance above), but along a random v at
 * first order: fd - an = -2 s e.v, about |e| / |g| times that direction's own signal
 * 2 s |g| / sqrt(n). Step: the one at which that signal is 64 R (the smallest step
 * crosses the fewest kinks), at most 3e-2 |w|. Tolerance, with e_k = (fd - an)(ks)/k
 * at steps s and 2s:  |e_1| <= 2 R(s) + R(2s) / 2 + 2 |e_2 - e_1|:  the truncation
 * error estimated by how much the difference quotient moves when the step doubles
 * (3x the O(s^2) term of a smooth loss), doubled for the kinks; it involves forwards
 * only, so a wrong backward cannot widen it. Over 10 fixture seeds x 8 directions x
 * these 15 tensors the largest |e_1| was 0.84 of its tolerance. Each direction must
 * also resolve an orthogonal error of FD_ORTH_CAUGHT |g| at a typical projection
 * (tolerance <= FD_ORTH_CAUGHT x its signal). With the tolerances here (~0.04 of the
 * signal) FD_DIRS = 4 directions all miss an orthogonal error of 0.1 |g| only if its
 * projection |z| < 0.4 in each: odds 0.31^4 ~ 1e-2; of 0.2 |g|, 0.16^4 ~ 7e-4. */
#define FD_DIRS 4
#define FD_ORTH_CAUGHT 0.1
static void test_finite_differences(void **state) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    fixture *f = MRCNN_CALLOC(1, sizeof *f, "fixture");
    fixture_init(f, &cfg, 7);
    mrcnn_pass st;
    mrcnn_model_zero_grads(&f->m);
    run_step(f, true, &st);
    printf("losses: obj %.4f rpn_box %.4f cls %.4f box %.4f mask %.4f; rois %d fg %d\n",
           st.losses.rpn_objectness, st.losses.rpn_box_reg, st.losses.classifier, st.losses.box_reg,
           st.losses.mask, st.n_rois, st.n_fg);
    assert_true(st.n_fg > 0);
    f->m.pinned_proposals = st.proposals;
    f->m.pinned_counts = st.proposal_counts;
    f->m.pinned_cap = st.prop_cap;
    double r0;
    loss_at(f, &r0);
    r0 *= 2; // a difference: two evaluations
    const char *names[] = {
        "backbone.body.conv1.weight",          "backbone.body.layer1.0.conv2.weight",
        "backbone.body.layer3.0.downsample.0.weight", "backbone.fpn.inner_blocks.3.0.bias",
        "backbone.fpn.inner_blocks.1.0.weight", "backbone.fpn.layer_blocks.0.0.weight",
        "rpn.head.conv.0.0.weight",            "rpn.head.cls_logits.weight",
        "rpn.head.bbox_pred.bias",             "roi_heads.box_head.fc6.weight",
        "roi_heads.box_predictor.cls_score.weight", "roi_heads.box_predictor.bbox_pred.weight",
        "roi_heads.mask_head.0.0.weight",      "roi_heads.mask_predictor.conv5_mask.weight",
        "roi_heads.mask_predictor.mask_fcn_logits.weight",
    };
    int bad = 0, blind = 0;
    for (size_t p = 0; p < sizeof names / sizeof names[0]; p++) {
        int idx = mrcnn_arena_index(&f->m.params.values, names[p]);
        assert_true(idx >= 0);
        mrcnn_tensor *w = mrcnn_arena_get(&f->m.params.values, idx);
        mrcnn_tensor *g = mrcnn_arena_get(&f->m.params.grads, idx);
        int64_t n = mrcnn_tensor_numel(w);
        float *w0 = malloc(n * sizeof(float)), *gv = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
        float *wp = malloc(n * sizeof(float));
        f->be->mem.read(f->be, w, w0);
        f->be->mem.read(f->be, g, gv);
        double gn = sqrt(dot(gv, gv, n)), wn = sqrt(dot(w0, w0, n));
        if (wn == 0) wn = 0.05 * sqrt((double)n);
        assert_true(gn > 0);
        printf("  %s (%lld values)\n", names[p], (long long)n);
        for (int k = 0; k <= FD_DIRS; k++) {
            double s, r1, r2, e1, tol, sig;
            if (k == 0) {
                for (int64_t i = 0; i < n; i++) v[i] = (float)(gv[i] / gn);
                s = 3e-4 * wn;
                e1 = fd_residual(f, w, w0, gv, v, s, n, wp, &r1);
                sig = 2 * s * gn;
                tol = 2 * r1 + 2e-2 * sig;
            } else {
                mrcnn_rng r = mrcnn_rng_make(99, k, idx, MRCNN_RNG_TEST);
                double vg = 0;
                for (int64_t i = 0; i < n; i++) {
                    v[i] = mrcnn_rng_normal(&r, i);
                    vg += (double)v[i] * gv[i];
                }
                for (int64_t i = 0; i < n; i++) v[i] = (float)(v[i] - vg / (gn * gn) * gv[i]);
                double vn = sqrt(dot(v, v, n));
                for (int64_t i = 0; i < n; i++) v[i] = (float)(v[i] / vn);
                s = fmin(64 * r0 * sqrt((double)n) / (2 * gn), 3e-2 * wn);
                sig = 2 * s * gn / sqrt((double)n);
                e1 = fd_residual(f, w, w0, gv, v, s, n, wp, &r1);
                double e2 = fd_residual(f, w, w0, gv, v, 2 * s, n, wp, &r2) / 2;
                tol = 2 * r1 + r2 / 2 + 2 * fabs(e2 - e1);
            }
            bool ok = fabs(e1) <= tol;
            printf("    %-6s step %.1e|w|  fd-an % .2e  tol %.2e  signal %.2e  %s\n", k == 0 ? "grad" : "random",
                   s / wn, e1, tol, sig, ok ? "ok" : "FAIL");
            if (!ok) bad++;
            if (k > 0 && tol > FD_ORTH_CAUGHT * sig) {
                printf("    ^ blind to orthogonal errors under %.2f |g|\n", tol / sig);
                blind++;
            }
        }
        free(w0);
        free(gv);
        free(v);
        free(wp);
    }
    f->m.pinned_proposals = NULL;
    mrcnn_pass_free(&st);
    fixture_free(f);
    free(f);
    assert_int_equal(bad, 0);
    assert_int_equal(blind, 0);
}

/* Plain SGD with momentum over the flat arenas, as the trainer would do it: one fixed
 * batch, 200 steps, the total loss must fall more than 10x (measured: 3.05 -> 0.17).
 * What is left at the end is mostly the mask BCE, whose floor is the entropy of the
 * soft (ROIAlign-resampled) mask targets. */
static void test_overfit(void **state) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    fixture *f = MRCNN_CALLOC(1, sizeof *f, "fixture");
    fixture_init(f, &cfg, 3);
    int64_t n = (int64_t)(f->m.params.values.size / sizeof(float));
    float *w = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float)), *mom = calloc(n, sizeof(float));
    mrcnn_tensor all_w = mrcnn_tensor_view(f->m.params.values.base, MRCNN_DTYPE_F32, f->be->device, 1, &n);
    mrcnn_tensor all_g = mrcnn_tensor_view(f->m.params.grads.base, MRCNN_DTYPE_F32, f->be->device, 1, &n);
    double first = 0, last = 0, best = 1e30;
    const float lr = 0.02f, mu = 0.9f;
    const double clip = 5.0;
    for (int it = 0; it < 200; it++) {
        mrcnn_model_zero_grads(&f->m);
        double l = run_step(f, true, NULL);
        assert_true(isfinite(l));
        if (it == 0) first = l;
        last = l;
        if (l < best) best = l;
        if (it % 20 == 0 || it == 199) printf("  step %3d loss %.5f\n", it, l);
        f->be->mem.read(f->be, &all_w, w);
        f->be->mem.read(f->be, &all_g, g);
        // warmup (the heads start far off), then a x0.1 step at 150 as in a 1x schedule
        float scale = it < 20 ? (it + 1) / 20.0f : it >= 150 ? 0.1f : 1.0f;
        double gn = sqrt(dot(g, g, n));
        if (gn > clip) scale *= (float)(clip / gn); // as SOLVER.CLIP_GRADIENTS (global L2 norm)
        for (int64_t i = 0; i < n; i++) {
            mom[i] = mu * mom[i] + g[i];
            w[i] -= scale * lr * mom[i];
        }
        f->be->mem.write(f->be, &all_w, w);
    }
    mrcnn_pass st;
    run_step(f, false, &st);
    printf("final terms: obj %.4f rpn_box %.4f cls %.4f box %.4f mask %.4f\n", st.losses.rpn_objectness,
           st.losses.rpn_box_reg, st.losses.classifier, st.losses.box_reg, st.losses.mask);
    mrcnn_pass_free(&st);
    printf("overfit: first %.4f last %.4f best %.4f (ratio %.1fx)\n", first, last, best, first / last);
    free(w);
    free(g);
    free(mom);
    fixture_free(f);
    free(f);
    assert_true(first / last > 10.0);
}

/* FREEZE_AT 2: stem and res2 get exactly zero gradient, res3 does not. */
static void test_frozen(void **state) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    cfg.backbone_freeze_at = 2;
    fixture *f = MRCNN_CALLOC(1, sizeof *f, "fixture");
    fixture_init(f, &cfg, 5);
    mrcnn_model_zero_grads(&f->m);
    run_step(f, true, NULL);
    mrcnn_arena *ga = &f->m.params.grads;
    int frozen_nonzero = 0, trained_zero = 0;
    for (int i = 0; i < ga->n_entries; i++) {
        mrcnn_tensor *t = &ga->entries[i].tensor;
        int64_t n = mrcnn_tensor_numel(t);
        float *h = malloc(n * sizeof(float));
        f->be->mem.read(f->be, t, h);
        double s = 0;
        for (int64_t j = 0; j < n; j++) s += fabs(h[j]);
        free(h);
        const char *nm = ga->entries[i].name;
        bool frozen = strstr(nm, "body.conv1") || strstr(nm, "body.layer1.");
        /* a backbone conv's bias is its folded frozen BN's shift: never trained (as
         * torchvision's FrozenBatchNorm2d), even in a trainable stage */
        size_t len = strlen(nm);
        bool bn_shift = strstr(nm, "backbone.body.") && len > 5 && !strcmp(nm + len - 5, ".bias");
        assert_int_equal(f->m.params.trainable[i], !frozen && !bn_shift);
        if ((frozen || bn_shift) && s != 0) frozen_nonzero++;
        if (!frozen && strstr(ga->entries[i].name, ".weight") && s == 0) {
            printf("  zero gradient: %s\n", ga->entries[i].name);
            trained_zero++;
        }
    }
    fixture_free(f);
    free(f);
    assert_int_equal(frozen_nonzero, 0);
    assert_int_equal(trained_zero, 0);
}

/* An image without instances (all anchors and ROIs background, as torchvision's
 * empty targets), and inference that keeps no detection: both run and stay finite. */
static void test_empty(void **state) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    fixture *f = MRCNN_CALLOC(1, sizeof *f, "fixture");
    fixture_init(f, &cfg, 13);
    f->s.gt[0].n = 0;
    mrcnn_model_zero_grads(&f->m);
    mrcnn_pass st;
    run_step(f, true, &st);
    printf("empty image 0: losses %.4f %.4f %.4f %.4f %.4f, rois %d (image 0: %d), fg %d\n",
           st.losses.rpn_objectness, st.losses.rpn_box_reg, st.losses.classifier, st.losses.box_reg,
           st.losses.mask, st.n_rois, st.roi_image_start[1], st.n_fg);
    assert_true(isfinite(st.losses.total));
    for (int r = 0; r < st.roi_image_start[1]; r++) assert_int_equal(st.roi_labels[r], 0);
    for (int r = 0; r < st.n_fg; r++) assert_int_equal((int)st.fg_rois[r * 5], 1);
    mrcnn_pass_free(&st);
    // a score threshold above 1 keeps nothing: the mask head sees zero rows
    f->m.cfg.roi_score_thresh_test = 1.5f;
    mrcnn_ws_reset(&f->ws);
    f->b.images = mrcnn_ws_tensor(&f->ws, MRCNN_DTYPE_F32, 4, (int64_t[]){NI, HH, WW, 3});
    f->be->mem.write(f->be, &f->b.images, f->s.images);
    mrcnn_detections det;
    test_model_detect(&f->m, &f->ws, &f->b, &st, &det);
    assert_int_equal(det.counts[0] + det.counts[1], 0);
    mrcnn_detections_free(&det);
    mrcnn_pass_free(&st);
    fixture_free(f);
    free(f);
}

/* The loss normalizers go through m->count_sum, so that ranks holding one image each
 * reproduce one rank holding both: here two single-image runs, each told the other's
 * counts, must add up to the two-image run (losses and every gradient). */
typedef struct {
    bool add;
    int k; // calls this step: one, all three counts at once
    float rec[3], other[3];
} fake_ranks;

/* The CPU backend's device memory is the host's: the counts are summed in place. */
static void fake_sum(const mrcnn_backend *be, mrcnn_tensor *counts, void *ctx) {
    fake_ranks *c = ctx;
    assert_int_equal(mrcnn_tensor_numel(counts), 3);
    assert_int_equal(c->k++, 0);
    float *v = counts->data;
    for (int i = 0; i < 3; i++) {
        if (c->add) v[i] += c->other[i];
        else c->rec[i] = v[i];
    }
}

static mrcnn_losses run_single(fixture *f, int i, fake_ranks *c, bool backward) {
    mrcnn_ws_reset(&f->ws);
    int64_t idx = i;
    mrcnn_batch b = {.image_hw = f->s.hw + 2 * i, .gt = f->s.gt + i, .image_index = &idx};
    b.images = mrcnn_ws_tensor(&f->ws, MRCNN_DTYPE_F32, 4, (int64_t[]){1, HH, WW, 3});
    f->be->mem.write(f->be, &b.images, f->s.images + (size_t)i * HH * WW * 3);
    c->k = 0;
    f->m.count_sum = fake_sum;
    f->m.count_ctx = c;
    mrcnn_pass st;
    mrcnn_model_train_step(&f->m, &f->ws, &b, backward, &st);
    f->m.count_sum = NULL;
    assert_int_equal(c->k, 1);
    mrcnn_losses l;
    mrcnn_model_read_losses(&f->m, &st, &l);
    mrcnn_pass_free(&st);
    return l;
}

static void test_split_batch(void **state) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    fixture *f = MRCNN_CALLOC(1, sizeof *f, "fixture");
    fixture_init(f, &cfg, 17);
    size_t bytes = f->m.params.grads.size;
    int64_t n = (int64_t)(bytes / sizeof(float));
    mrcnn_tensor all = mrcnn_tensor_view(f->m.params.grads.base, MRCNN_DTYPE_F32, f->be->device, 1, &n);
    float *g2 = malloc(bytes), *g11 = malloc(bytes);
    mrcnn_model_zero_grads(&f->m);
    mrcnn_pass st;
    run_step(f, true, &st);
    mrcnn_losses whole = st.losses;
    mrcnn_pass_free(&st);
    f->be->mem.read(f->be, &all, g2);
    fake_ranks r0 = {0}, r1 = {0};
    run_single(f, 0, &r0, false); // each rank's own counts
    run_single(f, 1, &r1, false);
    memcpy(r0.other, r1.rec, sizeof r0.other);
    memcpy(r1.other, r0.rec, sizeof r1.other);
    r0.add = r1.add = true;
    mrcnn_model_zero_grads(&f->m);
    mrcnn_losses a = run_single(f, 0, &r0, true), b = run_single(f, 1, &r1, true);
    f->be->mem.read(f->be, &all, g11);
    double lw[5] = {whole.rpn_objectness, whole.rpn_box_reg, whole.classifier, whole.box_reg, whole.mask};
    double ls[5] = {a.rpn_objectness + b.rpn_objectness, a.rpn_box_reg + b.rpn_box_reg,
                    a.classifier + b.classifier, a.box_reg + b.box_reg, a.mask + b.mask};
    for (int k = 0; k < 5; k++) {
        printf("  loss term %d: 2 images %.7f, 1 + 1 images %.7f\n", k, lw[k], ls[k]);
        assert_true(fabs(lw[k] - ls[k]) <= 1e-5 * fabs(lw[k]) + 1e-7);
    }
    double e = test_max_rel_err(g11, g2, n);
    printf("  gradients: max|a-b|/max|b| = %.2e over %lld values\n", e, (long long)n);
    assert_true(e < 1e-5);
    // loss_mult scales the gradients, not the reported losses
    f->m.loss_mult = 1024.0f;
    mrcnn_model_zero_grads(&f->m);
    run_step(f, true, &st);
    f->m.loss_mult = 0;
    assert_true(fabs(st.losses.total - whole.total) <= 1e-6 * whole.total);
    mrcnn_pass_free(&st);
    f->be->mem.read(f->be, &all, g11);
    for (int64_t i = 0; i < n; i++) g11[i] /= 1024.0f;
    e = test_max_rel_err(g11, g2, n);
    printf("  loss_mult 1024: gradients / 1024 vs plain: %.2e\n", e);
    assert_true(e < 1e-5);
    free(g2);
    free(g11);
    fixture_free(f);
    free(f);
}

/* grad_ready: every trainable parameter reported exactly once per step, frozen ones
 * never, and nothing changes a gradient after its report (so a bucket may start its
 * all-reduce right then). Heads come before the backbone. */
typedef struct {
    mrcnn_model *m;
    int count, *order;
    float **snap;
} ready_log;

static void on_ready(int i, void *ctx) {
    ready_log *r = ctx;
    mrcnn_tensor *g = mrcnn_arena_get(&r->m->params.grads, i);
    assert_null(r->snap[i]);
    r->snap[i] = malloc(mrcnn_tensor_nbytes(g));
    r->m->be->mem.read(r->m->be, g, r->snap[i]);
    r->order[r->count++] = i;
}

static void test_grad_ready(void **state) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    cfg.backbone_freeze_at = 2;
    fixture *f = MRCNN_CALLOC(1, sizeof *f, "fixture");
    fixture_init(f, &cfg, 19);
    int n = mrcnn_params_count(&f->m.params);
    ready_log r = {&f->m, 0, calloc(n, sizeof(int)), calloc(n, sizeof(float *))};
    for (int step = 0; step < 2; step++) {
        r.count = 0;
        for (int i = 0; i < n; i++) {
            free(r.snap[i]);
            r.snap[i] = NULL;
        }
        f->m.grad_ready = on_ready;
        f->m.grad_ready_ctx = &r;
        mrcnn_model_zero_grads(&f->m);
        run_step(f, true, NULL);
        f->m.grad_ready = NULL;
        int trainable = 0, changed = 0;
        for (int i = 0; i < n; i++) {
            trainable += f->m.params.trainable[i];
            if (!f->m.params.trainable[i]) {
                assert_null(r.snap[i]);
                continue;
            }
            assert_non_null(r.snap[i]);
            mrcnn_tensor *g = mrcnn_arena_get(&f->m.params.grads, i);
            float *now = malloc(mrcnn_tensor_nbytes(g));
            f->be->mem.read(f->be, g, now);
            if (memcmp(now, r.snap[i], mrcnn_tensor_nbytes(g)) != 0) {
                printf("  %s changed after its report\n", f->m.params.values.entries[i].name);
                changed++;
            }
            free(now);
        }
        printf("step %d: %d reports for %d trainable of %d; first %s, last %s\n", step, r.count, trainable, n,
               f->m.params.values.entries[r.order[0]].name, f->m.params.values.entries[r.order[r.count - 1]].name);
        assert_int_equal(r.count, trainable);
        assert_int_equal(changed, 0);
        assert_non_null(strstr(f->m.params.values.entries[r.order[0]].name, "roi_heads.mask"));
        assert_non_null(strstr(f->m.params.values.entries[r.order[r.count - 1]].name, "backbone.body.layer2"));
    }
    for (int i = 0; i < n; i++) free(r.snap[i]);
    free(r.snap);
    free(r.order);
    fixture_free(f);
    free(f);
}

/* The CPU backend's rounded-storage mode (every op output rounded to bf16 / fp16, math
 * in fp32) runs the whole step; losses and gradients stay near fp32's. bf16 keeps 8
 * mantissa bits (2^-9 relative per rounding), fp16 11 bits (8x tighter); measured on
 * this batch: loss 2.2e-3 / 4.5e-4 relative, gradient cosine 0.9996 / 0.9999. The
 * bounds leave ~4x room. */
static void test_rounded_storage(void **state) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    fixture *f = MRCNN_CALLOC(1, sizeof *f, "fixture");
    fixture_init(f, &cfg, 23);
    int64_t n = (int64_t)(f->m.params.grads.size / sizeof(float));
    mrcnn_tensor all = mrcnn_tensor_view(f->m.params.grads.base, MRCNN_DTYPE_F32, f->be->device, 1, &n);
    float *g32 = malloc(n * sizeof(float)), *g16 = malloc(n * sizeof(float));
    mrcnn_model_zero_grads(&f->m);
    double l32 = run_step(f, true, NULL);
    f->be->mem.read(f->be, &all, g32);
    mrcnn_dtype dts[2] = {MRCNN_DTYPE_BF16, MRCNN_DTYPE_F16};
    double tol_l[2] = {1e-2, 2e-3}, tol_cos[2] = {0.995, 0.999}; // measured 2.2e-3, 4.5e-4; 0.9996, 0.9999
    for (int k = 0; k < 2; k++) {
        f->be->set_precision(f->be, dts[k]);
        mrcnn_model_zero_grads(&f->m);
        double l = run_step(f, true, NULL);
        f->be->set_precision(f->be, MRCNN_DTYPE_F32);
        f->be->mem.read(f->be, &all, g16);
        double cos = dot(g32, g16, n) / sqrt(dot(g32, g32, n) * dot(g16, g16, n));
        printf("  %s storage: loss %.5f (fp32 %.5f, rel %.1e), gradient cosine %.5f\n", mrcnn_dtype_name(dts[k]), l,
               l32, fabs(l - l32) / l32, cos);
        assert_true(fabs(l - l32) <= tol_l[k] * l32);
        assert_true(cos >= tol_cos[k]);
    }
    free(g32);
    free(g16);
    fixture_free(f);
    free(f);
}

/* Save, load into a fresh model, same bytes; a wrong shape is refused by name. */
static void test_checkpoint(void **state) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_model a, b;
    mrcnn_model_init(&a, &cfg, be);
    mrcnn_model_init_random(&a, 11);
    mrcnn_model_init(&b, &cfg, be);
    char path[256];
    snprintf(path, sizeof path, "/tmp/mrcnn_net_ckpt_%d.h5", (int)getpid());
    mrcnn_checkpoint_save_model(&a, path);
    mrcnn_checkpoint_load_model(&b, path);
    assert_int_equal(a.params.values.size, b.params.values.size);
    assert_memory_equal(a.params.values.base, b.params.values.base, a.params.values.size);
    mrcnn_model c;
    cfg.fpn_out_channels = 16;
    mrcnn_model_init(&c, &cfg, be);
    EXPECT_FAIL(mrcnn_checkpoint_load_model(&c, path), "backbone.fpn.inner_blocks.0.0.weight has shape");
    unlink(path);
    mrcnn_model_free(&a);
    mrcnn_model_free(&b);
    mrcnn_model_free(&c);
    mrcnn_backend_destroy(be);
}

/* The ROI heads on the whole capacity (count_hint off, as on a GPU: padding rows with
 * image -1, label -1, weight 0) give the losses and gradients of the heads on the valid
 * rows alone: padding adds exact zeros, so only the summation order (GEMM blocking, the
 * loss reductions' partition) may differ. */
static void test_padded_heads(void **state) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    cfg.backbone_freeze_at = 0;
    cfg.roi_batch_size_per_image = 1024; // more than the candidates: the box head gets padding rows too
    fixture *f = MRCNN_CALLOC(1, sizeof *f, "fixture");
    fixture_init(f, &cfg, 29);
    int64_t n = (int64_t)(f->m.params.grads.size / sizeof(float));
    mrcnn_tensor all = mrcnn_tensor_view(f->m.params.grads.base, MRCNN_DTYPE_F32, f->be->device, 1, &n);
    float *gt = malloc(n * sizeof(float)), *gp = malloc(n * sizeof(float));
    mrcnn_pass st;
    mrcnn_model_zero_grads(&f->m);
    run_step(f, true, &st);
    mrcnn_losses trimmed = st.losses;
    int rois = st.n_rois, fg = st.n_fg;
    mrcnn_pass_free(&st);
    f->be->mem.read(f->be, &all, gt);
    int64_t (*hint)(const mrcnn_backend *, const mrcnn_tensor *) = f->be->det.count_hint;
    f->be->det.count_hint = NULL;
    mrcnn_model_zero_grads(&f->m);
    run_step(f, true, &st);
    f->be->det.count_hint = hint;
    mrcnn_losses padded = st.losses;
    printf("  trimmed: %d rois, %d fg; padded: %d rois, %d fg\n", rois, fg, st.n_rois, st.n_fg);
    assert_int_equal(st.n_rois, NI * cfg.roi_batch_size_per_image);
    assert_int_equal(st.n_fg, NI * cfg.mask_head_max_fg_per_image);
    assert_true(rois < st.n_rois && fg > 0 && fg < st.n_fg);
    mrcnn_pass_free(&st);
    f->be->mem.read(f->be, &all, gp);
    double lt[5], lp[5];
    test_losses_to_array(&trimmed, lt);
    test_losses_to_array(&padded, lp);
    for (int k = 0; k < 5; k++) {
        printf("  %s: trimmed %.9g padded %.9g\n", mrcnn_loss_names[k], lt[k], lp[k]);
        assert_true(fabs(lt[k] - lp[k]) <= 1e-6 * fabs(lt[k]) + 1e-9);
    }
    double e = test_max_rel_err(gp, gt, n);
    printf("  gradients: max|a-b|/max|b| = %.2e over %lld values\n", e, (long long)n);
    assert_true(e < 1e-5);
    free(gt);
    free(gp);
    fixture_free(f);
    free(f);
}

/* A CPU training step reads nothing back (the detection stages are backend ops, the
 * normalizers device counts): the step costs no read, the losses exactly one. */
static void test_no_reads(void **state) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    fixture *f = MRCNN_CALLOC(1, sizeof *f, "fixture");
    fixture_init(f, &cfg, 31);
    mrcnn_ws_reset(&f->ws);
    f->b.images = mrcnn_ws_tensor(&f->ws, MRCNN_DTYPE_F32, 4, (int64_t[]){NI, HH, WW, 3});
    f->be->mem.write(f->be, &f->b.images, f->s.images);
    mrcnn_model_zero_grads(&f->m);
    mrcnn_backend_stats s0 = mrcnn_backend_stats_get(f->be);
    mrcnn_pass st;
    mrcnn_model_train_step(&f->m, &f->ws, &f->b, true, &st);
    mrcnn_backend_stats s1 = mrcnn_backend_stats_get(f->be);
    mrcnn_losses l;
    mrcnn_model_read_losses(&f->m, &st, &l);
    mrcnn_backend_stats s2 = mrcnn_backend_stats_get(f->be);
    printf("  step: %llu reads, %llu syncs, %llu uploads; read_losses: %llu reads (total %.4f)\n",
           (unsigned long long)(s1.reads - s0.reads), (unsigned long long)(s1.syncs - s0.syncs),
           (unsigned long long)(s1.uploads - s0.uploads), (unsigned long long)(s2.reads - s1.reads), l.total);
    assert_int_equal(s1.reads, s0.reads);
    assert_int_equal(s1.syncs, s0.syncs);
    assert_int_equal(s2.reads, s1.reads + 1);
    assert_true(isfinite(l.total) && l.total > 0);
    mrcnn_pass_free(&st);
    fixture_free(f);
    free(f);
}

static float *read_all_grads(fixture *f) {
    int64_t n = (int64_t)(f->m.params.grads.size / sizeof(float));
    mrcnn_tensor all = mrcnn_tensor_view(f->m.params.grads.base, MRCNN_DTYPE_F32, f->be->device, 1, &n);
    float *g = malloc((size_t)n * sizeof(float));
    f->be->mem.read(f->be, &all, g);
    return g;
}

/* The fixture's batch with its images in host memory (stage uploads them). */
static mrcnn_batch host_batch(fixture *f, int h, int w, const int *hw, const mrcnn_image_gt *gt) {
    return (mrcnn_batch){.images = mrcnn_tensor_view(NULL, MRCNN_DTYPE_F32, f->be->device, 4, (int64_t[]){NI, h, w, 3}),
                         .host_images = f->s.images, .image_hw = hw, .gt = gt};
}

static uint64_t uploads_since(fixture *f, const mrcnn_backend_stats *s0) {
    return mrcnn_backend_stats_get(f->be).uploads - s0->uploads;
}

/* stream.run_if as a GPU issues it in a capture: its body's calls whatever the count. */
static void run_if_issued(const mrcnn_backend *be, const mrcnn_tensor *count, int64_t above, void (*body)(void *ctx),
                          void *ctx) {
    body(ctx);
}

/* The two halves of the training step (model.h). stage + run equal the one-call step
 * exactly (host images: the same numbers). Stage uploads twice (the images, everything
 * else; the anchors once per size), run neither uploads nor reads nor waits. With
 * count_hint off (the calls of a GPU step): equal shapes give equal keys and staging
 * addresses whatever the data, another ground-truth bucket or batch size another key; with
 * the CPU's trimming count_hint the key is 0 (the heads' rows follow the data). The
 * staged RNG streams are mrcnn_rng_make's for (SEED, epoch, image index). */
static void test_stage_run(void **state) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    cfg.backbone_freeze_at = 0;
    fixture *f = MRCNN_CALLOC(1, sizeof *f, "fixture");
    fixture_init(f, &cfg, 37);
    const size_t gbytes = f->m.params.grads.size;
    mrcnn_pass st;
    mrcnn_model_zero_grads(&f->m);
    run_step(f, true, &st);
    const mrcnn_losses ref = st.losses;
    mrcnn_pass_free(&st);
    float *g_ref = read_all_grads(f);

    // the same batch through stage (host images) and run: identical; the CPU trims: key 0
    mrcnn_batch b = host_batch(f, HH, WW, f->s.hw, f->s.gt);
    mrcnn_ws_reset(&f->ws);
    mrcnn_model_zero_grads(&f->m);
    assert_true(mrcnn_model_stage(&f->m, 0, &b) == 0);
    mrcnn_backend_stats s0 = mrcnn_backend_stats_get(f->be);
    mrcnn_model_run(&f->m, 0, &f->ws, true, &st);
    mrcnn_backend_stats s1 = mrcnn_backend_stats_get(f->be);
    assert_int_equal(s1.uploads, s0.uploads);
    assert_int_equal(s1.reads, s0.reads);
    assert_int_equal(s1.syncs, s0.syncs);
    test_model_read_pass(&f->m, &st);
    float *g = read_all_grads(f);
    printf("  stage + run: total %.9g (one call %.9g), gradients %s\n", st.losses.total, ref.total,
           memcmp(g, g_ref, gbytes) ? "differ" : "identical");
    assert_true(memcmp(&st.losses, &ref, sizeof ref) == 0);
    assert_true(memcmp(g, g_ref, gbytes) == 0);
    mrcnn_pass_free(&st);
    free(g);

    // count_hint off: replayable keys
    int64_t (*hint)(const mrcnn_backend *, const mrcnn_tensor *) = f->be->det.count_hint;
    f->be->det.count_hint = NULL;
    s0 = mrcnn_backend_stats_get(f->be);
    const uint64_t k1 = mrcnn_model_stage(&f->m, 0, &b);
    assert_int_equal(uploads_since(f, &s0), 2);
    const mrcnn_staged *sg = &f->m.staged[0];
    void *addr[3] = {sg->images.data, sg->gt.mask_pool.data, sg->rngs.data};
    // other data, same shapes: fewer instances (the same bucket), other image indices and epoch
    mrcnn_image_gt gt2[NI] = {f->s.gt[0], f->s.gt[1]};
    gt2[0].n = 1;
    const int64_t index[NI] = {1234567890123LL, 7};
    mrcnn_batch b2 = host_batch(f, HH, WW, f->s.hw, gt2);
    b2.image_index = index;
    b2.epoch = 3;
    const uint64_t k2 = mrcnn_model_stage(&f->m, 0, &b2);
    printf("  keys: %016llx, other data %016llx (gt bucket %d)\n", (unsigned long long)k1, (unsigned long long)k2,
           sg->gt_cap);
    assert_true(k1 != 0 && k2 == k1);
    assert_ptr_equal(sg->images.data, addr[0]);
    assert_ptr_equal(sg->gt.mask_pool.data, addr[1]);
    assert_ptr_equal(sg->rngs.data, addr[2]);
    const int32_t *words = sg->rngs.data; // the CPU backend's memory is the host's
    for (int i = 0; i < NI; i++) {
        mrcnn_rng rpn = mrcnn_rng_make((uint64_t)cfg.seed, 3, index[i], MRCNN_RNG_RPN_SAMPLE);
        mrcnn_rng roi = mrcnn_rng_make((uint64_t)cfg.seed, 3, index[i], MRCNN_RNG_ROI_SAMPLE);
        assert_memory_equal(words + i * MRCNN_RNG_WORDS, &rpn, sizeof rpn);
        assert_memory_equal(words + (NI + i) * MRCNN_RNG_WORDS, &roi, sizeof roi);
    }
    // the calls a GPU captures: every mask-head chunk's, whatever the data's positives
    void (*run_if)(const mrcnn_backend *, const mrcnn_tensor *, int64_t, void (*)(void *), void *) =
        f->be->stream.run_if;
    f->be->stream.run_if = run_if_issued;
    // equal keys, equal calls: the device half of b and of b2 traced (backend_trace.h), the
    // workspace released inside the window as the trainable's run releases it
    mrcnn_backend_trace_install(f->be);
    mrcnn_backend_trace_keep_listing(f->be, 1);
    mrcnn_trace_summary tr[2];
    for (int k = 0; k < 2; k++) {
        assert_true(mrcnn_model_stage(&f->m, 0, k ? &b2 : &b) == k1);
        mrcnn_ws_reset(&f->ws);
        mrcnn_backend_trace_begin(f->be);
        mrcnn_model_run(&f->m, 0, &f->ws, true, &st);
        mrcnn_pass_free(&st);
        mrcnn_ws_reset(&f->ws);
        mrcnn_backend_trace_end(f->be, &tr[k]);
    }
    char msg[2048] = "";
    const int64_t at = test_trace_diff(&tr[0], &tr[1], msg, sizeof msg);
    printf("  run traced: %llu calls, hash %016llx / %016llx, %llu uploads, %llu reads, %llu syncs, %llu live%s%s\n",
           (unsigned long long)tr[0].calls, (unsigned long long)tr[0].hash, (unsigned long long)tr[1].hash,
           (unsigned long long)tr[1].uploads, (unsigned long long)tr[1].reads, (unsigned long long)tr[1].syncs,
           (unsigned long long)tr[1].live, at >= 0 ? "; first difference " : "", msg);
    assert_true(tr[0].calls > 100);
    assert_true(tr[1].hash == tr[0].hash && at < 0);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(tr[k].uploads + tr[k].reads + tr[k].syncs, 0);
        assert_int_equal(tr[k].stats.uploads + tr[k].stats.reads + tr[k].stats.syncs, 0);
        assert_int_equal(tr[k].live, 0);
        mrcnn_trace_summary_free(&tr[k]);
    }
    mrcnn_backend_trace_uninstall(f->be);
    f->be->stream.run_if = run_if;
    // 9 instances: the next bucket (16), another key; 65 (bucket 128) further below
    enum { NBIG = 65 };
    float boxes9[NBIG * 4];
    int32_t labels9[NBIG];
    uint8_t *masks9 = malloc((size_t)NBIG * HH * WW);
    for (int j = 0; j < NBIG; j++) {
        memcpy(boxes9 + 4 * j, f->s.boxes[0] + 4 * (j % NG), 4 * sizeof(float));
        labels9[j] = f->s.labels[0][j % NG];
        memcpy(masks9 + (size_t)j * HH * WW, f->s.masks[0] + (size_t)(j % NG) * HH * WW, (size_t)HH * WW);
    }
    mrcnn_image_gt gt9[NI] = {{9, boxes9, labels9, masks9}, f->s.gt[1]};
    mrcnn_batch b9 = host_batch(f, HH, WW, f->s.hw, gt9);
    void *const base = sg->buf;
    const uint64_t k9 = mrcnn_model_stage(&f->m, 0, &b9);
    assert_int_equal(sg->gt_cap, 16);
    const uint64_t k9b = mrcnn_model_stage(&f->m, 0, &b9);
    /* Bucket 16 fits in the room the first allocation reserved (bucket 64): the base stays,
     * so back to 3 instances the common shape has its old key again (no second capture
     * after one large batch); only G differs from bucket 16's. */
    assert_ptr_equal(sg->buf, base);
    const uint64_t k1b = mrcnn_model_stage(&f->m, 0, &b);
    assert_int_equal(sg->gt_cap, 8);
    assert_true(k1b == k1 && k1b != k9 && mrcnn_model_stage(&f->m, 0, &b9) == k9);
    // 65 instances, bucket 128, past the reserve: the buffer grows to at least twice its size
    const size_t cap0 = sg->cap;
    mrcnn_image_gt gt65[NI] = {{NBIG, boxes9, labels9, masks9}, f->s.gt[1]};
    mrcnn_batch b65 = host_batch(f, HH, WW, f->s.hw, gt65);
    const uint64_t k65 = mrcnn_model_stage(&f->m, 0, &b65);
    assert_int_equal(sg->gt_cap, 128);
    assert_true(k65 != 0 && sg->cap >= 2 * cap0);
    void *const base2 = sg->buf;
    assert_true(mrcnn_model_stage(&f->m, 0, &b) != 0 && mrcnn_model_stage(&f->m, 0, &b9) != 0);
    assert_ptr_equal(sg->buf, base2);
    // a smaller batch (96 x 128): another key, and its anchors are uploaded once
    const int hw96[2 * NI] = {96, 128, 90, 100};
    mrcnn_batch b96 = host_batch(f, 96, WW, hw96, gt2);
    s0 = mrcnn_backend_stats_get(f->be);
    const uint64_t k96 = mrcnn_model_stage(&f->m, 0, &b96);
    const uint64_t up96 = uploads_since(f, &s0);
    s0 = mrcnn_backend_stats_get(f->be);
    const uint64_t k96b = mrcnn_model_stage(&f->m, 0, &b96);
    const uint64_t up96b = uploads_since(f, &s0);
    printf("  keys: 16 gt %016llx, 96x128 %016llx (%llu uploads, then %llu)\n", (unsigned long long)k9,
           (unsigned long long)k96, (unsigned long long)up96, (unsigned long long)up96b);
    assert_true(k9 != 0 && k9 != k1 && k9b == k9);
    assert_true(k96 != 0 && k96 != k9 && k96 != k1 && k96b == k96);
    assert_int_equal(up96, 3);
    assert_int_equal(up96b, 2);
    mrcnn_ws_reset(&f->ws);
    mrcnn_model_run(&f->m, 0, &f->ws, true, &st); // runs on the 96 x 128 batch
    assert_int_equal(st.img_h, 96);
    mrcnn_pass_free(&st);
    mrcnn_ws_reset(&f->ws);
    f->be->det.count_hint = hint;
    free(masks9);
    free(g_ref);
    fixture_free(f);
    free(f);
}

/* The shared model trainable (model_trainable.h): stage takes the source's batch and
 * gives the model's key; run adds acc_mult x the terms into the accumulator and the
 * gradients of the staged batch (those of the one-call step), reports every parameter
 * ready when given buckets, and leaves its workspace empty. */
typedef struct {
    fixture *f;
    int calls;
} source_ctx;

static double source_next(void *ctx, int64_t step, int micro, mrcnn_batch *b) {
    source_ctx *c = ctx;
    c->calls++;
    *b = host_batch(c->f, HH, WW, c->f->s.hw, c->f->s.gt);
    return 0.25;
}

static void test_model_trainable(void **state) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    fixture *f = MRCNN_CALLOC(1, sizeof *f, "fixture");
    fixture_init(f, &cfg, 41);
    const size_t gbytes = f->m.params.grads.size;
    mrcnn_pass st;
    mrcnn_model_zero_grads(&f->m);
    run_step(f, true, &st);
    const mrcnn_losses ref = st.losses;
    mrcnn_pass_free(&st);
    float *g_ref = read_all_grads(f);
    source_ctx sc = {f, 0};
    mrcnn_model_trainable mt;
    mrcnn_model_trainable_init(&mt, &f->m, source_next, &sc);
    assert_ptr_equal(mt.tm.ctx, &mt);
    assert_true(mt.tm.stage && mt.tm.run && mt.tm.scales_loss && mt.tm.n_losses == MRCNN_N_LOSSES);
    mrcnn_tensor acc = mrcnn_tensor_view(NULL, MRCNN_DTYPE_F32, f->be->device, 1, (int64_t[]){MRCNN_N_LOSSES});
    acc.data = f->be->mem.alloc(f->be, mrcnn_tensor_nbytes(&acc), "loss accumulator");
    f->be->mem.zero(f->be, &acc);
    mrcnn_model_zero_grads(&f->m);
    uint64_t key = 99;
    assert_true(mt.tm.stage(mt.tm.ctx, 0, 0, &key) == 0.25);
    assert_int_equal(sc.calls, 1);
    assert_true(key == 0); // the CPU backend trims
    mt.tm.run(mt.tm.ctx, 0, 1.0f, NULL, &acc, 0.5f, NULL);
    printf("  trainable run: workspace %d tensors, %zu bytes after it (peak %zu)\n", mt.ws.n, mt.ws.bytes,
           mt.ws.peak_bytes);
    assert_int_equal(mt.ws.n, 0);
    assert_int_equal(mt.ws.bytes, 0);
    assert_true(mt.ws.peak_bytes > 0);
    float a[MRCNN_N_LOSSES];
    f->be->mem.read(f->be, &acc, a);
    double r[MRCNN_N_LOSSES];
    test_losses_to_array(&ref, r);
    for (int k = 0; k < MRCNN_N_LOSSES; k++) assert_true(a[k] == (float)(0.5 * (float)r[k]));
    float *g = read_all_grads(f);
    assert_true(memcmp(g, g_ref, gbytes) == 0);
    free(g);
    mrcnn_ws_reset(&f->ws);
    f->be->mem.free(f->be, acc.data);
    mrcnn_model_trainable_free(&mt);
    free(g_ref);
    fixture_free(f);
    free(f);
}

int main(void) {
    // the tiny model's ops are too small to gain from threads; on a shared machine
    // OpenMP's spinning workers cost far more than they give
    omp_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checkpoint),
        cmocka_unit_test(test_frozen),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_split_batch),
        cmocka_unit_test(test_grad_ready),
        cmocka_unit_test(test_padded_heads),
        cmocka_unit_test(test_no_reads),
        cmocka_unit_test(test_stage_run),
        cmocka_unit_test(test_model_trainable),
        cmocka_unit_test(test_rounded_storage),
        cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_overfit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
