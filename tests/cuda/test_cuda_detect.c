/* The CUDA detection kernels (src/backend/cuda/detect_internal.h, private to src/backend/cuda and
 * included here by path) against their host references (boxes.h, roi_targets.h) on
 * random data with ties: IoU, matches, NMS keep lists, mask targets and the
 * Philox-keyed balanced sampling must agree exactly (the kernels pin the host's float
 * arithmetic); the box coder within 1e-5 (device logf/expf differ by an ulp). Then the
 * CUDA backend's detection stages (be->det: rpn_targets, proposals, roi_sample,
 * mask_targets, the gathers, count_hint) against the CPU backend's on the same inputs:
 * integer outputs and sampling exactly, floats within rounding. Outputs are poisoned first.
 * Without a GPU, or in a GPU=0 build, it prints "skip [gpu]: ..." and exits 77; when
 * MRCNN_REQUIRE lists gpu, or the machine has a GPU but the backend did not start, that
 * is a failure, exit 1 (test_gpu_skip, tests/common/test_util.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/backend.h"
#include "mrcnn/anchors.h"
#include "mrcnn/boxes.h"
#include "mrcnn/check.h"
#include "mrcnn/half.h"
#include "mrcnn/model.h"
#include "mrcnn/rle.h"
#include "mrcnn/roi_align.h"
#include "mrcnn/roi_targets.h"
#include "test_util.h"
#ifdef MRCNN_HAVE_CUDA_HEADERS
#include "../../src/backend/cuda/detect_internal.h"

static mrcnn_backend *G;
static uint64_t g_seed = 5000;

/* A device copy of n bytes of host data (or of 0xff bytes, a NaN / -1 poison, when h is NULL). */
static void *up(const void *h, size_t bytes) {
    void *d = G->mem.alloc(G, bytes + 16, "test buffer");
    unsigned char *tmp = NULL;
    if (!h) {
        tmp = malloc(bytes + 1);
        memset(tmp, 0xff, bytes + 1);
        h = tmp;
    }
    int64_t n = (int64_t)bytes;
    mrcnn_tensor t = mrcnn_tensor_view(d, MRCNN_DTYPE_U8, G->device, 1, &n);
    G->mem.write(G, &t, h);
    G->mem.sync(G);
    free(tmp);
    return d;
}

static void down(void *h, const void *d, size_t bytes) {
    int64_t n = (int64_t)bytes;
    mrcnn_tensor t = mrcnn_tensor_view((void *)d, MRCNN_DTYPE_U8, G->device, 1, &n);
    G->mem.read(G, &t, h);
}

/* n boxes in a 200 x 300 image; every 7th repeats an earlier one (IoU ties). */
static float *random_boxes(int64_t n) {
    float *b = malloc((size_t)n * 4 * sizeof(float)), *u = malloc((size_t)n * 4 * sizeof(float));
    test_fill_uniform(u, n * 4, 0, 1, g_seed++);
    for (int64_t i = 0; i < n; i++) {
        float w = 4 + 80 * u[4 * i], h = 4 + 60 * u[4 * i + 1];
        float x = -10 + 300 * u[4 * i + 2], y = -10 + 200 * u[4 * i + 3];
        b[4 * i] = x;
        b[4 * i + 1] = y;
        b[4 * i + 2] = x + w;
        b[4 * i + 3] = y + h;
        if (i % 7 == 6) memcpy(b + 4 * i, b + 4 * (i / 2), 4 * sizeof(float));
    }
    free(u);
    return b;
}

/* A failure inside the backend (a check macro) fails the current test instead of
 * aborting the program, so the other tests still report. */
static void guarded(void (*body)(void)) {
    mrcnn_test_catch_begin();
    if (setjmp(mrcnn_test_jmp) == 0) {
        body();
        mrcnn_test_catch_end();
        return;
    }
    mrcnn_test_catch_end();
    fail_msg("failure inside the backend: %s", mrcnn_test_msg);
}
#define GUARDED_TEST(name) \
    static void name(void **state) { guarded(name##_body); }

static void test_box_iou_body(void) {
    const int64_t n = 301, m = 37;
    float *a = random_boxes(n), *b = random_boxes(m);
    float *ref = malloc((size_t)(n * m) * sizeof(float)), *got = malloc((size_t)(n * m) * sizeof(float));
    mrcnn_box_iou(a, n, b, m, ref);
    void *da = up(a, (size_t)n * 16), *db = up(b, (size_t)m * 16), *dio = up(NULL, (size_t)(n * m) * 4);
    mrcnn_cuda_box_iou(G, da, n, db, m, dio);
    down(got, dio, (size_t)(n * m) * 4);
    int64_t nz = 0;
    for (int64_t i = 0; i < n * m; i++) {
        if (memcmp(&got[i], &ref[i], 4) != 0) fail_msg("iou[%lld]: gpu %.9g, cpu %.9g", (long long)i, got[i], ref[i]);
        nz += ref[i] > 0;
    }
    printf("  box_iou %lldx%lld bit-identical (%lld overlaps)\n", (long long)n, (long long)m, (long long)nz);
    assert_true(nz > 0);
    G->mem.free(G, da), G->mem.free(G, db), G->mem.free(G, dio);
    free(a), free(b), free(ref), free(got);
}

static void test_box_coder_body(void) {
    const int64_t n = 513;
    const int k = 3;
    float *boxes = random_boxes(n), *targets = random_boxes(n);
    mrcnn_box_coder c = mrcnn_box_coder_make(10, 10, 5, 5);
    float *ref = malloc((size_t)n * 4 * k * sizeof(float)), *got = malloc((size_t)n * 4 * k * sizeof(float));
    mrcnn_box_encode(&c, n, targets, boxes, ref);
    void *db = up(boxes, (size_t)n * 16), *dt = up(targets, (size_t)n * 16), *dd = up(NULL, (size_t)n * 16 * k);
    mrcnn_cuda_box_encode(G, &c, n, dt, db, dd);
    down(got, dd, (size_t)n * 16);
    double e = test_max_rel_err(got, ref, n * 4);
    printf("  box_encode max rel err %.3g\n", e);
    assert_true(e < 1e-5);
    /* Decode k deltas per box, some past the clip. */
    float *deltas = malloc((size_t)n * 4 * k * sizeof(float));
    test_fill_uniform(deltas, n * 4 * k, -6, 6, g_seed++);
    G->mem.free(G, dd);
    dd = up(deltas, (size_t)n * 16 * k);
    void *dout = up(NULL, (size_t)n * 16 * k);
    mrcnn_box_decode(&c, n, k, deltas, boxes, ref);
    mrcnn_cuda_box_decode(G, &c, n, k, dd, db, dout);
    down(got, dout, (size_t)n * 16 * k);
    e = test_max_rel_err(got, ref, n * 4 * k);
    printf("  box_decode max rel err %.3g\n", e);
    assert_true(e < 1e-5);
    /* Clip in place, of the same (GPU-decoded) boxes on both sides: exact. */
    mrcnn_box_clip(n * k, got, 180, 250);
    mrcnn_cuda_box_clip(G, n * k, dout, 180, 250);
    float *got2 = malloc((size_t)n * 4 * k * sizeof(float));
    down(got2, dout, (size_t)n * 16 * k);
    for (int64_t i = 0; i < n * 4 * k; i++)
        if (got2[i] != got[i]) fail_msg("clip[%lld]: gpu %g, cpu %g", (long long)i, got2[i], got[i]);
    G->mem.free(G, db), G->mem.free(G, dt), G->mem.free(G, dd), G->mem.free(G, dout);
    free(boxes), free(targets), free(ref), free(got), free(got2), free(deltas);
}

static void test_matcher_body(void) {
    const int g = 9;
    const int64_t n = 2000;
    float *gt = random_boxes(g), *pred = random_boxes(n);
    /* Some predictions equal to a gt box: IoU 1 ties for that gt's best. */
    memcpy(pred + 4 * 10, gt, 16);
    memcpy(pred + 4 * 20, gt, 16);
    memcpy(pred + 4 * 30, gt + 8, 16);
    float *iou = malloc((size_t)g * n * sizeof(float));
    mrcnn_box_iou(gt, g, pred, n, iou);
    void *diou = up(iou, (size_t)g * n * 4);
    int32_t *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    const float th[3][2] = {{0.7f, 0.3f}, {0.5f, 0.5f}, {0.4f, 0.1f}};
    for (int t = 0; t < 3; t++) {
        for (int allow = 0; allow < 2; allow++) {
            for (int gg = 0; gg <= g; gg += g) { // g = 0 and g = 9
                void *dm = up(NULL, (size_t)n * 4);
                mrcnn_matcher_match(iou, gg, n, th[t][0], th[t][1], allow, ref);
                mrcnn_cuda_matcher_match(G, diou, gg, n, th[t][0], th[t][1], allow, dm);
                down(got, dm, (size_t)n * 4);
                for (int64_t j = 0; j < n; j++)
                    if (got[j] != ref[j])
                        fail_msg("matcher (g %d, %g/%g, allow %d) pred %lld: gpu %d, cpu %d", gg, th[t][0], th[t][1],
                                 allow, (long long)j, got[j], ref[j]);
                G->mem.free(G, dm);
            }
        }
    }
    printf("  matcher: 12 settings identical\n");
    G->mem.free(G, diou);
    free(gt), free(pred), free(iou), free(ref), free(got);
}

static void nms_case(int64_t n, int classes, float thresh) {
    float *boxes = random_boxes(n), *scores = malloc((size_t)n * sizeof(float));
    test_fill_uniform(scores, n, 0, 1, g_seed++);
    for (int64_t i = 0; i < n; i += 5) scores[i] = 0.5f; // ties: lower index first
    int32_t *cls = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) cls[i] = (int32_t)(i * 7 % (classes ? classes : 1));
    int64_t *ref = malloc((size_t)n * 8), *got = malloc((size_t)n * 8), cnt = -5;
    int64_t nref = classes ? mrcnn_batched_nms(boxes, scores, cls, n, thresh, ref) : mrcnn_batched_nms(boxes, scores, NULL, n, thresh, ref);
    void *db = up(boxes, (size_t)n * 16), *ds = up(scores, (size_t)n * 4), *dc = up(cls, (size_t)n * 4);
    void *dk = up(NULL, (size_t)n * 8), *dn = up(NULL, 8);
    mrcnn_cuda_nms(G, db, ds, classes ? dc : NULL, n, thresh, dk, dn);
    down(got, dk, (size_t)n * 8);
    down(&cnt, dn, 8);
    printf("  nms n=%lld classes=%d thresh %.2f: cpu keeps %lld, gpu %lld\n", (long long)n, classes, thresh,
           (long long)nref, (long long)cnt);
    assert_int_equal(cnt, nref);
    if (n > 100) assert_true(nref < n); // something was suppressed
    for (int64_t i = 0; i < n; i++) {
        int64_t want = i < nref ? ref[i] : -1;
        if (got[i] != want) fail_msg("nms keep[%lld]: gpu %lld, cpu %lld", (long long)i, (long long)got[i], (long long)want);
    }
    G->mem.free(G, db), G->mem.free(G, ds), G->mem.free(G, dc), G->mem.free(G, dk), G->mem.free(G, dn);
    free(boxes), free(scores), free(cls), free(ref), free(got);
}

static void test_nms_body(void) {
    nms_case(1, 0, 0.7f);
    nms_case(700, 0, 0.5f);
    nms_case(1000, 5, 0.3f);
    nms_case(4096, 0, 0.7f);
    nms_case(MRCNN_CUDA_NMS_MAX, 0, 0.7f);
    nms_case(MRCNN_CUDA_NMS_MAX - 37, 5, 0.7f); // proposals: 5 levels of up to 2000 boxes
}

static void test_mask_targets_body(void) {
    const int n_gt = 5, H = 64, W = 80, n = 50, m = 28;
    uint8_t *masks = calloc((size_t)n_gt * H * W, 1);
    float *u = malloc((size_t)n_gt * H * W * sizeof(float));
    test_fill_uniform(u, (int64_t)n_gt * H * W, 0, 1, g_seed++);
    for (int g = 0; g < n_gt; g++) /* an ellipse-ish blob plus speckle */
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                float dy = (y - 20.0f - 4 * g) / 15.0f, dx = (x - 30.0f - 5 * g) / 22.0f;
                int64_t i = ((int64_t)g * H + y) * W + x;
                masks[i] = (dx * dx + dy * dy < 1.0f) ^ (u[i] < 0.05f) ? (uint8_t)(1 + g) : 0;
            }
    float *boxes = random_boxes(n);
    for (int i = 0; i < n; i++) /* boxes within (and a little past) the 80 x 64 image */
        for (int k = 0; k < 4; k++) boxes[4 * i + k] *= (k & 1) ? 64.0f / 200.0f : 80.0f / 300.0f;
    boxes[0] = boxes[1] = 10.0f, boxes[2] = boxes[3] = 10.5f; // smaller than a pixel
    /* Boxes the shared ROIAlign frame (box_math.h) refuses get zeros on both sides: a
     * non-finite coordinate, a width that overflows, an adaptive grid past
     * MRCNN_ROI_ALIGN_MAX_GRID. */
    boxes[4 * 5 + 1] = NAN;
    boxes[4 * 6 + 2] = INFINITY;
    boxes[4 * 7 + 0] = -3e38f, boxes[4 * 7 + 2] = 3e38f;
    boxes[4 * 8 + 2] = boxes[4 * 8 + 0] + (float)m * (MRCNN_ROI_ALIGN_MAX_GRID + 2);
    int32_t *gi = malloc((size_t)n * 4);
    for (int i = 0; i < n; i++) gi[i] = (i * 3) % n_gt;
    float *ref = malloc((size_t)n * m * m * sizeof(float)), *got = malloc((size_t)n * m * m * sizeof(float));
    mrcnn_mask_targets(masks, n_gt, H, W, boxes, gi, n, m, ref);
    void *dm = up(masks, (size_t)n_gt * H * W), *db = up(boxes, (size_t)n * 16), *dg = up(gi, (size_t)n * 4);
    void *dt = up(NULL, (size_t)n * m * m * 4);
    mrcnn_cuda_mask_targets(G, dm, n_gt, H, W, db, dg, n, m, dt);
    down(got, dt, (size_t)n * m * m * 4);
    double mx = 0;
    for (int64_t i = 0; i < (int64_t)n * m * m; i++) {
        if (!(fabsf(got[i] - ref[i]) <= 1e-6f))
            fail_msg("mask target %lld: gpu %.9g, cpu %.9g", (long long)i, got[i], ref[i]);
        mx = ref[i] > mx ? ref[i] : mx;
    }
    printf("  mask_targets %dx%dx%d agree (max value %.3f)\n", n, m, m, mx);
    assert_true(mx > 0.5);
    for (int i = 5; i <= 8; i++)
        for (int64_t p = 0; p < (int64_t)m * m; p++)
            if (ref[(int64_t)i * m * m + p] != 0.0f) fail_msg("mask target of unsampleable box %d is not 0", i);
    G->mem.free(G, dm), G->mem.free(G, db), G->mem.free(G, dg), G->mem.free(G, dt);
    free(masks), free(u), free(boxes), free(gi), free(ref), free(got);
}

static void sampler_case(int64_t n, float p_pos, float p_neg, int batch, float fraction, uint64_t seed) {
    int32_t *labels = malloc((size_t)n * 4);
    float *u = malloc((size_t)n * sizeof(float));
    test_fill_uniform(u, n, 0, 1, g_seed++);
    for (int64_t i = 0; i < n; i++) labels[i] = u[i] < p_pos ? 1 + (int32_t)(i % 3) : (u[i] < p_pos + p_neg ? 0 : -1);
    mrcnn_rng rng = mrcnn_rng_make(seed, 3, 17, MRCNN_RNG_RPN_SAMPLE);
    int64_t *rp = malloc((size_t)(batch + 1) * 8), *rn = malloc((size_t)(batch + 1) * 8), np = -1, nn = -1;
    mrcnn_sample_balanced(labels, n, batch, fraction, &rng, rp, &np, rn, &nn);
    void *dl = up(labels, (size_t)n * 4), *dp = up(NULL, (size_t)(batch + 1) * 8), *dn = up(NULL, (size_t)(batch + 1) * 8);
    void *dc = up(NULL, 16), *dr = up(&rng, sizeof rng); // the kernel reads the stream on the device
    mrcnn_cuda_sample_balanced(G, dl, n, batch, fraction, dr, dp, dn, dc);
    int64_t cnt[2], *gp = malloc((size_t)(batch + 1) * 8), *gn = malloc((size_t)(batch + 1) * 8);
    down(cnt, dc, 16);
    down(gp, dp, (size_t)(batch + 1) * 8);
    down(gn, dn, (size_t)(batch + 1) * 8);
    printf("  sample_balanced n=%lld batch %d: cpu %lld+%lld, gpu %lld+%lld\n", (long long)n, batch, (long long)np,
           (long long)nn, (long long)cnt[0], (long long)cnt[1]);
    assert_int_equal(cnt[0], np);
    assert_int_equal(cnt[1], nn);
    for (int64_t i = 0; i < np; i++)
        if (gp[i] != rp[i]) fail_msg("positive %lld: gpu %lld, cpu %lld", (long long)i, (long long)gp[i], (long long)rp[i]);
    for (int64_t i = 0; i < nn; i++)
        if (gn[i] != rn[i]) fail_msg("negative %lld: gpu %lld, cpu %lld", (long long)i, (long long)gn[i], (long long)rn[i]);
    G->mem.free(G, dl), G->mem.free(G, dp), G->mem.free(G, dn), G->mem.free(G, dc), G->mem.free(G, dr);
    free(labels), free(u), free(rp), free(rn), free(gp), free(gn);
}

static void test_sampler_body(void) {
    sampler_case(20000, 0.02f, 0.7f, 256, 0.5f, 1);  // both sides drawn at random
    sampler_case(20000, 0.002f, 0.7f, 256, 0.5f, 2); // few positives: all taken, negatives drawn
    sampler_case(700, 0.3f, 0.2f, 512, 0.25f, 3);   // ROI-head shape: negatives all taken
    sampler_case(241101, 0.001f, 0.9f, 256, 0.5f, 4); // an R50-FPN image's anchors
}

static void test_anchors_body(void) {
    const float ratios[3] = {0.5f, 1.0f, 2.0f};
    float cell[12];
    mrcnn_anchors_cell(64.0f, ratios, 3, cell);
    const int gh = 25, gw = 38, st = 32;
    const int64_t n = (int64_t)gh * gw * 3 * 4;
    float *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    mrcnn_anchors_grid(cell, 3, gh, gw, st, st, ref);
    void *d = up(NULL, (size_t)n * 4);
    mrcnn_cuda_anchors_grid(G, cell, 3, gh, gw, st, st, d);
    down(got, d, (size_t)n * 4);
    assert_memory_equal(got, ref, (size_t)n * 4);
    printf("  anchors_grid %dx%dx3 identical\n", gh, gw);
    G->mem.free(G, d);
    free(ref), free(got);
}

/* Host copy of x rounded to dt and its device encoding. */
static void *up_dtype(float *x, int64_t n, mrcnn_dtype dt) {
    if (dt == MRCNN_DTYPE_F32) return up(x, (size_t)n * 4);
    uint16_t *b = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) {
        x[i] = mrcnn_round_to(x[i], dt);
        b[i] = dt == MRCNN_DTYPE_F16 ? mrcnn_f32_to_f16(x[i]) : mrcnn_f32_to_bf16(x[i]);
    }
    void *d = up(b, (size_t)n * 2);
    free(b);
    return d;
}

static void down_dtype(float *x, const void *d, int64_t n, mrcnn_dtype dt) {
    if (dt == MRCNN_DTYPE_F32) {
        down(x, d, (size_t)n * 4);
        return;
    }
    uint16_t *b = malloc((size_t)n * 2);
    down(b, d, (size_t)n * 2);
    for (int64_t i = 0; i < n; i++) x[i] = dt == MRCNN_DTYPE_F16 ? mrcnn_f16_to_f32(b[i]) : mrcnn_bf16_to_f32(b[i]);
    free(b);
}

static void test_gathers_body(void) {
    const int n = 37, k = 91, m = 28;
    int32_t labels[37];
    for (int i = 0; i < n; i++) labels[i] = i % 5 == 2 ? -1 : (i * 13) % k;
    void *dl = up(labels, sizeof labels);
    const mrcnn_dtype dts[2] = {MRCNN_DTYPE_F32, MRCNN_DTYPE_BF16};
    for (int di = 0; di < 2; di++) {
        const mrcnn_dtype dt = dts[di];
        for (int masks = 0; masks < 2; masks++) {
            const int64_t per = masks ? (int64_t)m * m : 4, nx = n * per * k, no = n * per;
            float *x = malloc((size_t)nx * 4), *ref = malloc((size_t)nx * 4), *got = malloc((size_t)nx * 4);
            float *dout = malloc((size_t)no * 4);
            test_fill_uniform(x, nx, -3, 3, g_seed++);
            test_fill_uniform(dout, no, -1, 1, g_seed++);
            void *dx = up_dtype(x, nx, dt), *dd = up(dout, (size_t)no * 4), *dy = up(NULL, (size_t)no * 4);
            if (masks) {
                mrcnn_gather_class_masks(n, m, k, x, labels, ref);
                mrcnn_cuda_gather_class_masks(G, n, m, k, dx, dt, dl, dy);
            } else {
                mrcnn_gather_class_deltas(n, k, x, labels, ref);
                mrcnn_cuda_gather_class_deltas(G, n, k, dx, dt, dl, dy);
            }
            down(got, dy, (size_t)no * 4);
            assert_memory_equal(got, ref, (size_t)no * 4);
            /* Backward into the (prefilled) logits: one rounding of x + dout on both sides. */
            memcpy(ref, x, (size_t)nx * 4);
            if (masks) {
                mrcnn_gather_class_masks_backward(n, m, k, dout, labels, ref);
                mrcnn_cuda_gather_class_masks_backward(G, n, m, k, dd, dl, dx, dt);
            } else {
                mrcnn_gather_class_deltas_backward(n, k, dout, labels, ref);
                mrcnn_cuda_gather_class_deltas_backward(G, n, k, dd, dl, dx, dt);
            }
            mrcnn_round_array(ref, (size_t)nx, dt);
            down_dtype(got, dx, nx, dt);
            assert_memory_equal(got, ref, (size_t)nx * 4);
            printf("  gather_class_%s %s forward and backward identical\n", masks ? "masks" : "deltas",
                   mrcnn_dtype_name(dt));
            G->mem.free(G, dx), G->mem.free(G, dd), G->mem.free(G, dy);
            free(x), free(ref), free(got), free(dout);
        }
    }
    G->mem.free(G, dl);
}

typedef struct {
    float v;
    int64_t i;
} topk_ref;

static int topk_cmp(const void *pa, const void *pb) {
    const topk_ref *a = pa, *b = pb;
    if (a->v != b->v) return a->v > b->v ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

static void topk_case(int rows, int64_t n, int k) {
    float *x = malloc((size_t)rows * n * 4);
    test_fill_uniform(x, rows * n, -8, 8, g_seed++);
    for (int64_t i = 0; i < rows * n; i++) x[i] = floorf(x[i] * 64.0f) / 64.0f; // many ties
    x[0] = -0.0f, x[1] = 0.0f; // ties across the sign of zero
    const int kk = (int64_t)k < n ? k : (int)n;
    float *vals = malloc((size_t)rows * k * 4);
    int64_t *idx = malloc((size_t)rows * k * 8);
    void *dx = up(x, (size_t)rows * n * 4), *dv = up(NULL, (size_t)rows * k * 4), *di = up(NULL, (size_t)rows * k * 8);
    mrcnn_cuda_topk(G, dx, rows, n, k, dv, di);
    down(vals, dv, (size_t)rows * k * 4);
    down(idx, di, (size_t)rows * k * 8);
    topk_ref *ref = malloc((size_t)n * sizeof(topk_ref));
    for (int r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++) ref[i] = (topk_ref){x[r * n + i], i};
        qsort(ref, (size_t)n, sizeof(topk_ref), topk_cmp);
        for (int t = 0; t < kk; t++)
            if (idx[(int64_t)r * k + t] != ref[t].i || vals[(int64_t)r * k + t] != ref[t].v)
                fail_msg("topk row %d rank %d: gpu (%g, %lld), cpu (%g, %lld)", r, t, vals[(int64_t)r * k + t],
                         (long long)idx[(int64_t)r * k + t], ref[t].v, (long long)ref[t].i);
    }
    printf("  topk rows %d n %lld k %d identical\n", rows, (long long)n, k);
    G->mem.free(G, dx), G->mem.free(G, dv), G->mem.free(G, di);
    free(x), free(vals), free(idx), free(ref);
}

static void test_topk_body(void) {
    topk_case(3, 50000, 2000);
    topk_case(2, 700, 2000); // fewer than k: all, sorted
    topk_case(8, 182400, 2000); // P2 of an 800x1216 batch
    topk_case(1, 100000, MRCNN_CUDA_TOPK_MAX);
}

static void test_cast_body(void) {
    const int64_t n = 10007;
    float *x = malloc((size_t)n * 4), *back = malloc((size_t)n * 4);
    test_fill_uniform(x, n, -70000, 70000, g_seed++); // past fp16's range: Inf, as on the host
    void *dx = up(x, (size_t)n * 4), *dy = up(NULL, (size_t)n * 2);
    const mrcnn_dtype dts[2] = {MRCNN_DTYPE_F16, MRCNN_DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        mrcnn_tensor tx = mrcnn_tensor_view(dx, MRCNN_DTYPE_F32, G->device, 1, &n);
        mrcnn_tensor ty = mrcnn_tensor_view(dy, dts[d], G->device, 1, &n);
        G->nn.cast(G, &tx, &ty);
        down_dtype(back, dy, n, dts[d]);
        for (int64_t i = 0; i < n; i++) {
            float want = mrcnn_round_to(x[i], dts[d]);
            if (memcmp(&back[i], &want, 4) != 0)
                fail_msg("cast %s [%lld]: gpu %g, host %g", mrcnn_dtype_name(dts[d]), (long long)i, back[i], want);
        }
    }
    printf("  cast fp32 -> fp16/bf16 identical to half.h\n");
    G->mem.free(G, dx), G->mem.free(G, dy);
    free(x), free(back);
}

static void test_rle_decode_body(void) {
    const int n = 6, h = 37, w = 53;
    uint8_t *masks = calloc((size_t)n * h * w, 1), *got = malloc((size_t)n * h * w);
    float *u = malloc((size_t)n * h * w * sizeof(float));
    test_fill_uniform(u, (int64_t)n * h * w, 0, 1, g_seed++);
    for (int i = 0; i < n; i++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int64_t at = ((int64_t)i * h + y) * w + x;
                int inside = (x - 20 - 2 * i) * (x - 20 - 2 * i) + (y - 15) * (y - 15) < 100 + 40 * i;
                if (i == 0) inside = 0;          // empty mask: one run
                if (i == 1) inside = 1;          // full mask: a zero-length first run
                if (i == 5) inside = u[at] < 0.5f; // noise: many short runs
                masks[at] = inside ? 1 : 0;
            }
    mrcnn_rle rles[6];
    int64_t offsets[7] = {0};
    for (int i = 0; i < n; i++) {
        mrcnn_rle_from_mask(&rles[i], masks + (int64_t)i * h * w, h, w);
        offsets[i + 1] = offsets[i] + rles[i].m;
    }
    uint32_t *cnts = malloc((size_t)offsets[n] * 4);
    for (int i = 0; i < n; i++) memcpy(cnts + offsets[i], rles[i].cnts, (size_t)rles[i].m * 4);
    void *dc = up(cnts, (size_t)offsets[n] * 4), *doff = up(offsets, sizeof offsets), *dm = up(NULL, (size_t)n * h * w);
    mrcnn_cuda_rle_decode(G, n, h, w, dc, doff, offsets[n], dm);
    down(got, dm, (size_t)n * h * w);
    assert_memory_equal(got, masks, (size_t)n * h * w);
    printf("  rle_decode %d masks %dx%d (%lld runs) identical\n", n, h, w, (long long)offsets[n]);
    for (int i = 0; i < n; i++) mrcnn_rle_free(&rles[i]);
    G->mem.free(G, dc), G->mem.free(G, doff), G->mem.free(G, dm);
    free(masks), free(got), free(u), free(cnts);
}

/* ---- be->det: the CUDA backend's detection stages against the CPU backend's ---------- */

static mrcnn_backend *C; // the full CPU backend (model ops included)

/* One tensor twice: in host memory for the CPU backend, on the GPU for the CUDA one,
 * with the same contents (init, or a 0xff poison when NULL). */
typedef struct {
    mrcnn_tensor h, d;
    size_t bytes;
} tpair;

static tpair tp_make(mrcnn_dtype dt, int ndim, const int64_t *shape, const void *init) {
    tpair p;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    p.bytes = (size_t)n * mrcnn_dtype_size(dt);
    void *h = malloc(p.bytes + 16);
    if (init) memcpy(h, init, p.bytes);
    else memset(h, 0xff, p.bytes);
    p.h = mrcnn_tensor_view(h, dt, MRCNN_DEVICE_CPU, ndim, shape);
    p.d = mrcnn_tensor_view(up(h, p.bytes), dt, G->device, ndim, shape);
    return p;
}

static void tp_free(tpair *p) {
    free(p->h.data);
    G->mem.free(G, p->d.data);
}

/* The GPU copy's contents, malloc'd. */
static void *tp_got(const tpair *p) {
    void *h = malloc(p->bytes + 16);
    down(h, p->d.data, p->bytes);
    return h;
}

static void expect_same_i32(const tpair *p, const char *what) {
    int32_t *got = tp_got(p), *ref = p->h.data;
    for (size_t i = 0; i < p->bytes / 4; i++)
        if (got[i] != ref[i]) fail_msg("%s[%zu]: gpu %d, cpu %d", what, i, got[i], ref[i]);
    free(got);
}

/* Floats within tol relative to max(1, |cpu|); exact when tol is 0. */
static void expect_close_f32(const tpair *p, double tol, const char *what) {
    float *got = tp_got(p), *ref = p->h.data;
    double worst = 0;
    for (size_t i = 0; i < p->bytes / 4; i++) {
        double e = fabs((double)got[i] - ref[i]) / fmax(1.0, fabs((double)ref[i]));
        if (!(e <= tol) && !(got[i] == ref[i]))
            fail_msg("%s[%zu]: gpu %.9g, cpu %.9g", what, i, got[i], ref[i]);
        worst = e > worst ? e : worst;
    }
    if (tol > 0) printf("    %s: max rel err %.3g\n", what, worst);
    free(got);
}

/* A batch's ground truth: gt counts cnt[i] (<= NG); boxes near the centre of each
 * image, labels 1..7, masks of blobs inside each image's own (smaller) region. */
typedef struct {
    mrcnn_gt_batch h, d;
    tpair boxes, labels, counts, masks, hw;
} gt_pair;

static gt_pair gt_make(int N, int NG, int H, int W, const int32_t *cnt, const int32_t *hw) {
    gt_pair g;
    float *b = calloc((size_t)N * NG * 4, sizeof(float));
    int32_t *lab = malloc((size_t)N * NG * 4);
    uint8_t *m = calloc((size_t)N * NG * H * W, 1);
    for (int i = 0; i < N; i++) {
        float *r = random_boxes(NG);
        for (int j = 0; j < NG; j++) {
            float sx = hw[2 * i + 1] / 300.0f, sy = hw[2 * i] / 200.0f;
            if (j < cnt[i]) {
                float *o = b + ((size_t)i * NG + j) * 4;
                o[0] = fmaxf(0, r[4 * j] * sx), o[1] = fmaxf(0, r[4 * j + 1] * sy);
                o[2] = fminf(hw[2 * i + 1], r[4 * j + 2] * sx + 6), o[3] = fminf(hw[2 * i], r[4 * j + 3] * sy + 6);
                lab[i * NG + j] = 1 + (i * 3 + j) % 7;
                for (int y = 0; y < hw[2 * i]; y++) // an ellipse in the box, in the image's region
                    for (int x = 0; x < hw[2 * i + 1]; x++) {
                        float cx = (o[0] + o[2]) / 2, cy = (o[1] + o[3]) / 2;
                        float dx = (x + 0.5f - cx) / fmaxf(1, (o[2] - o[0]) / 2), dy = (y + 0.5f - cy) / fmaxf(1, (o[3] - o[1]) / 2);
                        m[(((size_t)i * NG + j) * H + y) * W + x] = dx * dx + dy * dy < 1.0f;
                    }
            } else {
                lab[i * NG + j] = -1;
            }
        }
        free(r);
    }
    g.boxes = tp_make(MRCNN_DTYPE_F32, 3, (int64_t[]){N, NG, 4}, b);
    g.labels = tp_make(MRCNN_DTYPE_I32, 2, (int64_t[]){N, NG}, lab);
    g.counts = tp_make(MRCNN_DTYPE_I32, 1, (int64_t[]){N}, cnt);
    g.masks = tp_make(MRCNN_DTYPE_U8, 4, (int64_t[]){N, NG, H, W}, m);
    g.hw = tp_make(MRCNN_DTYPE_I32, 2, (int64_t[]){N, 2}, hw);
    g.h = (mrcnn_gt_batch){N, NG, H, W, g.boxes.h, g.labels.h, g.counts.h, g.masks.h, g.hw.h, {0}, {0}};
    g.d = (mrcnn_gt_batch){N, NG, H, W, g.boxes.d, g.labels.d, g.counts.d, g.masks.d, g.hw.d, {0}, {0}};
    free(b), free(lab), free(m);
    return g;
}

static void gt_free(gt_pair *g) {
    tp_free(&g->boxes), tp_free(&g->labels), tp_free(&g->counts), tp_free(&g->masks), tp_free(&g->hw);
}

/* Anchors of 3 levels (stride 8, 16, 32; 3 cells each) over a 320 x 320 batch, as the
 * model makes them; level_counts get H_l * W_l * 3. */
static float *det_anchors(int64_t *counts, int64_t *total) {
    const float ratios[3] = {0.5f, 1.0f, 2.0f};
    const int strides[3] = {8, 16, 32};
    float *a = malloc((size_t)(40 * 40 + 20 * 20 + 10 * 10) * 3 * 16);
    int64_t off = 0;
    for (int l = 0; l < 3; l++) {
        float cell[12];
        mrcnn_anchors_cell(32.0f * (1 << l), ratios, 3, cell);
        int g = 320 / strides[l];
        mrcnn_anchors_grid(cell, 3, g, g, strides[l], strides[l], a + off * 4);
        counts[l] = (int64_t)g * g * 3;
        off += counts[l];
    }
    *total = off;
    return a;
}

static void test_det_rpn_targets_body(void) {
    const int N = 3, NG = 10, L = 3;
    int64_t counts[3], na;
    float *anchors = det_anchors(counts, &na);
    const int32_t gcnt[3] = {5, 0, 10}, hw[6] = {320, 300, 256, 320, 300, 288};
    gt_pair gt = gt_make(N, NG, 320, 320, gcnt, hw);
    /* gt 0 of image 0 equal to an anchor: IoU 1, and a tie for the low-quality rule. */
    memcpy(gt.boxes.h.data, anchors + 4 * 1234, 16);
    G->mem.write(G, &gt.boxes.d, gt.boxes.h.data);
    tpair an = tp_make(MRCNN_DTYPE_F32, 2, (int64_t[]){na, 4}, anchors);
    tpair lab[3], ow[3], rt[3], rw[3];
    for (int l = 0; l < L; l++) {
        int g = 40 >> l;
        lab[l] = tp_make(MRCNN_DTYPE_F32, 4, (int64_t[]){N, g, g, 3}, NULL);
        ow[l] = tp_make(MRCNN_DTYPE_F32, 4, (int64_t[]){N, g, g, 3}, NULL);
        rt[l] = tp_make(MRCNN_DTYPE_F32, 4, (int64_t[]){N, g, g, 12}, NULL);
        rw[l] = tp_make(MRCNN_DTYPE_F32, 4, (int64_t[]){N, g, g, 12}, NULL);
    }
    tpair ns = tp_make(MRCNN_DTYPE_F32, 1, (int64_t[]){1}, NULL);
    mrcnn_rpn_targets_desc d = {.n_images = N, .n_levels = L, .fg_iou = 0.7f, .bg_iou = 0.3f,
                                .batch_size_per_image = 256, .positive_fraction = 0.5f};
    for (int l = 0; l < L; l++) d.level_counts[l] = counts[l];
    mrcnn_rng streams[3];
    for (int i = 0; i < N; i++) streams[i] = mrcnn_rng_make(7, 2, 100 + i, MRCNN_RNG_RPN_SAMPLE);
    tpair rngs = tp_make(MRCNN_DTYPE_I32, 2, (int64_t[]){N, MRCNN_RNG_WORDS}, streams); // device data on both
    mrcnn_tensor h_lab[3], h_ow[3], h_rt[3], h_rw[3], d_lab[3], d_ow[3], d_rt[3], d_rw[3];
    for (int l = 0; l < L; l++) {
        h_lab[l] = lab[l].h, h_ow[l] = ow[l].h, h_rt[l] = rt[l].h, h_rw[l] = rw[l].h;
        d_lab[l] = lab[l].d, d_ow[l] = ow[l].d, d_rt[l] = rt[l].d, d_rw[l] = rw[l].d;
    }
    C->det.rpn_targets(C, &d, &an.h, &gt.h, &rngs.h, h_lab, h_ow, h_rt, h_rw, &ns.h);
    G->det.rpn_targets(G, &d, &an.d, &gt.d, &rngs.d, d_lab, d_ow, d_rt, d_rw, &ns.d);
    for (int l = 0; l < L; l++) {
        expect_close_f32(&lab[l], 0, "rpn labels");
        expect_close_f32(&ow[l], 0, "rpn objectness weights");
        expect_close_f32(&rw[l], 0, "rpn regression weights");
        expect_close_f32(&rt[l], 1e-5, "rpn regression targets");
    }
    expect_close_f32(&ns, 0, "rpn sampled count");
    printf("  det.rpn_targets %d images x %lld anchors: identical (%g sampled)\n", N, (long long)na,
           ((float *)ns.h.data)[0]);
    assert_true(((float *)ns.h.data)[0] > 256);
    for (int l = 0; l < L; l++) tp_free(&lab[l]), tp_free(&ow[l]), tp_free(&rt[l]), tp_free(&rw[l]);
    tp_free(&ns), tp_free(&an), tp_free(&rngs), gt_free(&gt);
    free(anchors);
}

/* exact_decode: deltas with dw = dh = 0, so that the decode has no exp and the boxes,
 * hence the NMS decisions, are bit-identical; otherwise the device's expf may move a
 * box by an ulp, and the counts are compared within a margin. */
static void proposals_case(mrcnn_dtype dt, int exact_decode) {
    const int N = 2, L = 3, P = 300;
    int64_t counts[3], na;
    float *anchors = det_anchors(counts, &na);
    anchors[4 * 7 + 2] = anchors[4 * 7]; // an empty anchor: dropped by min_size
    const int32_t hw[4] = {320, 300, 250, 320};
    tpair an = tp_make(MRCNN_DTYPE_F32, 2, (int64_t[]){na, 4}, anchors);
    tpair ih = tp_make(MRCNN_DTYPE_I32, 2, (int64_t[]){N, 2}, hw);
    tpair lg[3], dl[3];
    mrcnn_tensor h_lg[3], h_dl[3], d_lg[3], d_dl[3];
    for (int l = 0; l < L; l++) {
        int g = 40 >> l;
        int64_t n = (int64_t)N * counts[l];
        float *x = malloc((size_t)n * 4), *dd = malloc((size_t)n * 16);
        test_fill_uniform(x, n, -8, 8, g_seed++);
        for (int64_t i = 0; i < n; i++) x[i] = floorf(x[i] * 64.0f) / 64.0f; // ties
        test_fill_uniform(dd, n * 4, -0.5f, 0.5f, g_seed++);
        if (exact_decode)
            for (int64_t i = 0; i < n; i++) dd[4 * i + 2] = dd[4 * i + 3] = 0.0f;
        void *xb = x, *db = dd;
        uint16_t *x16 = NULL, *d16 = NULL;
        if (dt != MRCNN_DTYPE_F32) {
            x16 = malloc((size_t)n * 2), d16 = malloc((size_t)n * 8);
            for (int64_t i = 0; i < n; i++) x16[i] = mrcnn_f32_to_bf16(x[i]);
            for (int64_t i = 0; i < 4 * n; i++) d16[i] = mrcnn_f32_to_bf16(dd[i]);
            xb = x16, db = d16;
        }
        lg[l] = tp_make(dt, 4, (int64_t[]){N, g, g, 3}, xb);
        dl[l] = tp_make(dt, 4, (int64_t[]){N, g, g, 12}, db);
        h_lg[l] = lg[l].h, h_dl[l] = dl[l].h, d_lg[l] = lg[l].d, d_dl[l] = dl[l].d;
        free(x), free(dd), free(x16), free(d16);
    }
    tpair bx = tp_make(MRCNN_DTYPE_F32, 3, (int64_t[]){N, P, 4}, NULL);
    tpair sc = tp_make(MRCNN_DTYPE_F32, 2, (int64_t[]){N, P}, NULL);
    tpair ct = tp_make(MRCNN_DTYPE_I32, 1, (int64_t[]){N}, NULL);
    mrcnn_proposals_desc d = {.n_images = N, .n_levels = L, .pre_nms_top_n = 1000, .post_nms_top_n = P,
                              .nms_thresh = 0.7f, .min_size = 1e-3f, .score_thresh = 0.0f};
    for (int l = 0; l < L; l++) d.level_counts[l] = counts[l];
    C->det.proposals(C, &d, h_lg, h_dl, &an.h, &ih.h, &bx.h, &sc.h, &ct.h);
    G->det.proposals(G, &d, d_lg, d_dl, &an.d, &ih.d, &bx.d, &sc.d, &ct.d);
    int32_t *gc = tp_got(&ct), *rc = ct.h.data;
    printf("  det.proposals %s%s: cpu keeps %d, %d; gpu %d, %d\n", mrcnn_dtype_name(dt),
           exact_decode ? " (exact decode)" : "", rc[0], rc[1], gc[0], gc[1]);
    if (exact_decode) {
        expect_same_i32(&ct, "proposal counts");
        expect_close_f32(&bx, 0, "proposal boxes");
        expect_close_f32(&sc, 1e-6, "proposal scores");
        assert_int_equal(rc[0], P); // the early exit at post_nms_top_n was reached
    } else {
        for (int i = 0; i < N; i++) assert_true(abs(gc[i] - rc[i]) <= 3);
        /* Rows agree up to the first decision an ulp flipped. */
        float *gb = tp_got(&bx), *rb = bx.h.data;
        int same = 0;
        while (same < rc[0] && fabsf(gb[4 * same] - rb[4 * same]) <= 1e-3f * fmaxf(1, fabsf(rb[4 * same]))) same++;
        printf("    first %d rows of image 0 agree within 1e-3\n", same);
        assert_true(same >= rc[0] / 2);
        free(gb);
    }
    free(gc);
    for (int l = 0; l < L; l++) tp_free(&lg[l]), tp_free(&dl[l]);
    tp_free(&an), tp_free(&ih), tp_free(&bx), tp_free(&sc), tp_free(&ct);
    free(anchors);
}

static void test_det_proposals_body(void) {
    proposals_case(MRCNN_DTYPE_F32, 1);
    proposals_case(MRCNN_DTYPE_BF16, 1);
    proposals_case(MRCNN_DTYPE_F32, 0);
}

/* N per-image ROI streams (seed, epoch; image i keyed base + i) as the (N, MRCNN_RNG_WORDS)
 * int32 tensor both backends read (detect_ops.h). */
static tpair roi_rngs(int N, uint64_t seed, uint32_t epoch, int base) {
    mrcnn_rng *r = malloc(sizeof(mrcnn_rng) * (size_t)N);
    for (int i = 0; i < N; i++) r[i] = mrcnn_rng_make(seed, epoch, base + i, MRCNN_RNG_ROI_SAMPLE);
    tpair t = tp_make(MRCNN_DTYPE_I32, 2, (int64_t[]){N, MRCNN_RNG_WORDS}, r);
    free(r);
    return t;
}

/* The ROI-sampling outputs of both backends (CPU in .h, CUDA in .d). */
typedef struct {
    tpair rois, labels, box_labels, reg_t, reg_w, fg_rois, fg_labels, fg_gt, n_rois, n_fg;
} roi_pair;

static void roi_sample_both(const mrcnn_roi_sample_desc *d, const tpair *props, const tpair *pc, const gt_pair *gt,
                            const tpair *rngs, roi_pair *o) {
    const int64_t NS = (int64_t)d->n_images * d->batch_size_per_image, NF = (int64_t)d->n_images * d->max_fg;
    o->rois = tp_make(MRCNN_DTYPE_F32, 2, (int64_t[]){NS, 5}, NULL);
    o->labels = tp_make(MRCNN_DTYPE_I32, 1, (int64_t[]){NS}, NULL);
    o->box_labels = tp_make(MRCNN_DTYPE_I32, 1, (int64_t[]){NS}, NULL);
    o->reg_t = tp_make(MRCNN_DTYPE_F32, 2, (int64_t[]){NS, 4}, NULL);
    o->reg_w = tp_make(MRCNN_DTYPE_F32, 2, (int64_t[]){NS, 4}, NULL);
    o->fg_rois = tp_make(MRCNN_DTYPE_F32, 2, (int64_t[]){NF, 5}, NULL);
    o->fg_labels = tp_make(MRCNN_DTYPE_I32, 1, (int64_t[]){NF}, NULL);
    o->fg_gt = tp_make(MRCNN_DTYPE_I32, 1, (int64_t[]){NF}, NULL);
    o->n_rois = tp_make(MRCNN_DTYPE_F32, 1, (int64_t[]){1}, NULL);
    o->n_fg = tp_make(MRCNN_DTYPE_F32, 1, (int64_t[]){1}, NULL);
    C->det.roi_sample(C, d, &props->h, &pc->h, &gt->h, &rngs->h, &o->rois.h, &o->labels.h, &o->box_labels.h,
                      &o->reg_t.h, &o->reg_w.h, &o->fg_rois.h, &o->fg_labels.h, &o->fg_gt.h, &o->n_rois.h, &o->n_fg.h);
    G->det.roi_sample(G, d, &props->d, &pc->d, &gt->d, &rngs->d, &o->rois.d, &o->labels.d, &o->box_labels.d,
                      &o->reg_t.d, &o->reg_w.d, &o->fg_rois.d, &o->fg_labels.d, &o->fg_gt.d, &o->n_rois.d, &o->n_fg.d);
}

static void roi_pair_free(roi_pair *o) {
    tp_free(&o->rois), tp_free(&o->labels), tp_free(&o->box_labels), tp_free(&o->reg_t), tp_free(&o->reg_w);
    tp_free(&o->fg_rois), tp_free(&o->fg_labels), tp_free(&o->fg_gt), tp_free(&o->n_rois), tp_free(&o->n_fg);
}

/* Proposals jittered around the gt (so there are positives) plus random ones. */
static tpair roi_proposals(int N, int P, const gt_pair *gt, const int32_t *gcnt) {
    float *p = calloc((size_t)N * P * 4, sizeof(float)), *u = malloc((size_t)N * P * 4 * sizeof(float));
    test_fill_uniform(u, (int64_t)N * P * 4, -6, 6, g_seed++);
    const float *gb = gt->boxes.h.data;
    for (int i = 0; i < N; i++) {
        float *r = random_boxes(P);
        for (int j = 0; j < P; j++) {
            float *o = p + ((size_t)i * P + j) * 4;
            if (gcnt[i] > 0 && j % 3 != 2) {
                const float *g = gb + ((size_t)i * gt->h.max_gt + j % gcnt[i]) * 4;
                for (int k = 0; k < 4; k++) o[k] = g[k] + u[((size_t)i * P + j) * 4 + k];
                if (o[2] <= o[0]) o[2] = o[0] + 1;
                if (o[3] <= o[1]) o[3] = o[1] + 1;
            } else {
                memcpy(o, r + 4 * j, 16);
            }
        }
        free(r);
    }
    tpair t = tp_make(MRCNN_DTYPE_F32, 3, (int64_t[]){N, P, 4}, p);
    free(p), free(u);
    return t;
}

static void test_det_roi_sample_body(void) {
    const int N = 3, NG = 8, P = 200;
    const int32_t gcnt[3] = {8, 0, 3}, hw[6] = {200, 300, 180, 240, 160, 280}, pcnt[3] = {200, 57, 10};
    gt_pair gt = gt_make(N, NG, 200, 300, gcnt, hw);
    tpair props = roi_proposals(N, P, &gt, gcnt);
    tpair pc = tp_make(MRCNN_DTYPE_I32, 1, (int64_t[]){N}, pcnt);
    tpair rngs = roi_rngs(N, 11, 1, 40);
    mrcnn_roi_sample_desc d = {.n_images = N, .prop_cap = P, .batch_size_per_image = 64, .max_fg = 16,
                               .positive_fraction = 0.25f, .iou_thresh = 0.5f,
                               .coder = mrcnn_box_coder_make(10, 10, 5, 5)};
    roi_pair o;
    roi_sample_both(&d, &props, &pc, &gt, &rngs, &o);
    expect_close_f32(&o.n_rois, 0, "n_rois");
    expect_close_f32(&o.n_fg, 0, "n_fg");
    expect_close_f32(&o.rois, 0, "rois");
    expect_same_i32(&o.labels, "roi labels");
    expect_same_i32(&o.box_labels, "roi box labels");
    expect_close_f32(&o.reg_t, 1e-5, "roi regression targets");
    expect_close_f32(&o.reg_w, 0, "roi regression weights");
    expect_close_f32(&o.fg_rois, 0, "fg rois");
    expect_same_i32(&o.fg_labels, "fg labels");
    expect_same_i32(&o.fg_gt, "fg gt");
    printf("  det.roi_sample %d images: identical (%g rois, %g fg)\n", N, ((float *)o.n_rois.h.data)[0],
           ((float *)o.n_fg.h.data)[0]);
    assert_true(((float *)o.n_fg.h.data)[0] > 0 && ((float *)o.n_rois.h.data)[0] < N * 64);
    roi_pair_free(&o);
    tp_free(&props), tp_free(&pc), tp_free(&rngs), gt_free(&gt);
}

/* Many images (more than one block of 64, the sampler's former launch chunk), each
 * drawing on its own device-resident stream: image i's rows must come from stream i. */
static void test_det_roi_sample_many_body(void) {
    enum { N = 67, NG = 4, P = 40 };
    int32_t gcnt[N], hw[2 * N], pcnt[N];
    for (int i = 0; i < N; i++) {
        gcnt[i] = i % 5 == 4 ? 0 : 1 + i % 4;
        hw[2 * i] = 120, hw[2 * i + 1] = 160;
        pcnt[i] = P - i % 7;
    }
    gt_pair gt = gt_make(N, NG, 120, 160, gcnt, hw);
    tpair props = roi_proposals(N, P, &gt, gcnt);
    tpair pc = tp_make(MRCNN_DTYPE_I32, 1, (int64_t[]){N}, pcnt);
    tpair rngs = roi_rngs(N, 13, 4, 40);
    mrcnn_roi_sample_desc d = {.n_images = N, .prop_cap = P, .batch_size_per_image = 16, .max_fg = 8,
                               .positive_fraction = 0.25f, .iou_thresh = 0.5f,
                               .coder = mrcnn_box_coder_make(10, 10, 5, 5)};
    roi_pair o;
    roi_sample_both(&d, &props, &pc, &gt, &rngs, &o);
    expect_close_f32(&o.n_rois, 0, "n_rois");
    expect_close_f32(&o.rois, 0, "rois");
    expect_same_i32(&o.labels, "roi labels");
    expect_same_i32(&o.fg_gt, "fg gt");
    printf("  det.roi_sample %d images: identical (%g rois, %g fg)\n", N, ((float *)o.n_rois.h.data)[0],
           ((float *)o.n_fg.h.data)[0]);
    roi_pair_free(&o);
    tp_free(&props), tp_free(&pc), tp_free(&rngs), gt_free(&gt);
}

static void test_det_mask_targets_body(void) {
    const int N = 3, NG = 8, P = 200, M = 28;
    const int32_t gcnt[3] = {8, 2, 3}, hw[6] = {200, 300, 150, 220, 160, 280}, pcnt[3] = {120, 57, 10};
    gt_pair gt = gt_make(N, NG, 200, 300, gcnt, hw);
    tpair props = roi_proposals(N, P, &gt, gcnt);
    tpair pc = tp_make(MRCNN_DTYPE_I32, 1, (int64_t[]){N}, pcnt);
    tpair rngs = roi_rngs(N, 12, 0, 0);
    mrcnn_roi_sample_desc d = {.n_images = N, .prop_cap = P, .batch_size_per_image = 64, .max_fg = 16,
                               .positive_fraction = 0.25f, .iou_thresh = 0.5f,
                               .coder = mrcnn_box_coder_make(10, 10, 5, 5)};
    roi_pair o;
    roi_sample_both(&d, &props, &pc, &gt, &rngs, &o);
    expect_same_i32(&o.fg_gt, "fg gt");
    /* Both backends on the CPU's fg rows (equal to the GPU's, checked above), all rows
     * (padding included) and then a trimmed prefix. */
    const int64_t NF = (int64_t)N * d.max_fg, nf = (int64_t)((float *)o.n_fg.h.data)[0];
    assert_true(nf > 0 && nf < NF);
    for (int trim = 0; trim < 2; trim++) {
        const int64_t rows = trim ? nf : NF;
        tpair fr = tp_make(MRCNN_DTYPE_F32, 2, (int64_t[]){rows, 5}, o.fg_rois.h.data);
        tpair fg = tp_make(MRCNN_DTYPE_I32, 1, (int64_t[]){rows}, o.fg_gt.h.data);
        tpair tg = tp_make(MRCNN_DTYPE_F32, 3, (int64_t[]){rows, M, M}, NULL);
        tpair wt = tp_make(MRCNN_DTYPE_F32, 3, (int64_t[]){rows, M, M}, NULL);
        C->det.mask_targets(C, &gt.h, &fr.h, &fg.h, M, &tg.h, &wt.h);
        G->det.mask_targets(G, &gt.d, &fr.d, &fg.d, M, &tg.d, &wt.d);
        expect_close_f32(&tg, 1e-6, "mask targets");
        expect_close_f32(&wt, 0, "mask weights");
        tp_free(&fr), tp_free(&fg), tp_free(&tg), tp_free(&wt);
    }
    printf("  det.mask_targets %lld fg rows of %lld: agree\n", (long long)nf, (long long)NF);
    /* Compact masks (what the step stages): the GPU's targets from the crops equal its
     * targets from the full masks bit for bit (one sampling routine, box_math.h's). */
    {
        const int H = 200, W = 300;
        uint8_t *dense[3];
        const uint8_t *full = gt.masks.h.data;
        for (int i = 0; i < N; i++) {
            dense[i] = malloc((size_t)gcnt[i] * hw[2 * i] * hw[2 * i + 1] + 1);
            for (int j = 0; j < gcnt[i]; j++)
                for (int y = 0; y < hw[2 * i]; y++)
                    memcpy(dense[i] + ((size_t)j * hw[2 * i] + y) * hw[2 * i + 1],
                           full + (((size_t)i * NG + j) * H + y) * W, (size_t)hw[2 * i + 1]);
        }
        int32_t crops[3 * 8 * MRCNN_MASK_CROP_WORDS];
        const uint8_t *first_rows[3 * 8];
        for (int i = 0; i < N; i++)
            for (int j = 0; j < NG; j++)
                first_rows[i * NG + j] = j < gcnt[i] ? dense[i] + (size_t)j * hw[2 * i] * hw[2 * i + 1] : NULL;
        const size_t need = mrcnn_mask_crops_make(first_rows, NULL, gcnt, hw, N, NG, crops);
        uint8_t *pool = calloc(need + 1, 1);
        mrcnn_mask_crops_copy(first_rows, NULL, gcnt, hw, N, NG, crops, pool);
        tpair cr = tp_make(MRCNN_DTYPE_I32, 3, (int64_t[]){N, NG, MRCNN_MASK_CROP_WORDS}, crops);
        tpair pl = tp_make(MRCNN_DTYPE_U8, 1, (int64_t[]){(int64_t)need + 1}, pool);
        tpair fr = tp_make(MRCNN_DTYPE_F32, 2, (int64_t[]){NF, 5}, o.fg_rois.h.data);
        tpair fg = tp_make(MRCNN_DTYPE_I32, 1, (int64_t[]){NF}, o.fg_gt.h.data);
        tpair tg = tp_make(MRCNN_DTYPE_F32, 3, (int64_t[]){NF, M, M}, NULL);
        tpair wt = tp_make(MRCNN_DTYPE_F32, 3, (int64_t[]){NF, M, M}, NULL);
        G->det.mask_targets(G, &gt.d, &fr.d, &fg.d, M, &tg.d, &wt.d); // full masks: the reference
        float *ref = tp_got(&tg);
        memcpy(tg.h.data, ref, tg.bytes);
        free(ref);
        mrcnn_gt_batch gc = gt.d;
        gc.masks.data = NULL;
        gc.mask_crops = cr.d;
        gc.mask_pool = pl.d;
        G->det.mask_targets(G, &gc, &fr.d, &fg.d, M, &tg.d, &wt.d);
        expect_close_f32(&tg, 0, "mask targets from crops");
        printf("  det.mask_targets from %zu bytes of crops: identical\n", need);
        tp_free(&cr), tp_free(&pl), tp_free(&fr), tp_free(&fg), tp_free(&tg), tp_free(&wt);
        for (int i = 0; i < N; i++) free(dense[i]);
        free(pool);
    }
    roi_pair_free(&o);
    tp_free(&props), tp_free(&pc), tp_free(&rngs), gt_free(&gt);
}

static void test_det_gathers_body(void) {
    const int R = 29, K = 9, M = 14;
    int32_t lab[29];
    for (int i = 0; i < R; i++) lab[i] = i % 4 == 3 ? -1 : (i * 5) % K;
    float *x = malloc((size_t)R * M * M * K * 4), *dy = malloc((size_t)R * M * M * 4);
    test_fill_uniform(x, (int64_t)R * M * M * K, -2, 2, g_seed++);
    test_fill_uniform(dy, (int64_t)R * M * M, -1, 1, g_seed++);
    tpair lb = tp_make(MRCNN_DTYPE_I32, 1, (int64_t[]){R}, lab);
    for (int masks = 0; masks < 2; masks++) {
        tpair xx = masks ? tp_make(MRCNN_DTYPE_F32, 4, (int64_t[]){R, M, M, K}, x)
                         : tp_make(MRCNN_DTYPE_F32, 2, (int64_t[]){R, 4 * K}, x);
        tpair yy = masks ? tp_make(MRCNN_DTYPE_F32, 3, (int64_t[]){R, M, M}, NULL)
                         : tp_make(MRCNN_DTYPE_F32, 2, (int64_t[]){R, 4}, NULL);
        tpair gg = masks ? tp_make(MRCNN_DTYPE_F32, 3, (int64_t[]){R, M, M}, dy)
                         : tp_make(MRCNN_DTYPE_F32, 2, (int64_t[]){R, 4}, dy);
        if (masks) {
            C->det.gather_class_masks(C, &xx.h, &lb.h, &yy.h);
            G->det.gather_class_masks(G, &xx.d, &lb.d, &yy.d);
            C->det.gather_class_masks_backward(C, &gg.h, &lb.h, &xx.h);
            G->det.gather_class_masks_backward(G, &gg.d, &lb.d, &xx.d);
        } else {
            C->det.gather_class_deltas(C, &xx.h, &lb.h, &yy.h);
            G->det.gather_class_deltas(G, &xx.d, &lb.d, &yy.d);
            C->det.gather_class_deltas_backward(C, &gg.h, &lb.h, &xx.h);
            G->det.gather_class_deltas_backward(G, &gg.d, &lb.d, &xx.d);
        }
        expect_close_f32(&yy, 0, masks ? "det.gather_class_masks" : "det.gather_class_deltas");
        expect_close_f32(&xx, 0, masks ? "det.gather_class_masks_backward" : "det.gather_class_deltas_backward");
        tp_free(&xx), tp_free(&yy), tp_free(&gg);
    }
    printf("  det.gather_class_* forward and backward identical to the CPU backend's\n");
    /* count_hint: the CUDA backend never offers a count without waiting. */
    tpair one = tp_make(MRCNN_DTYPE_F32, 1, (int64_t[]){1}, (float[]){5.0f});
    assert_true(G->det.count_hint == NULL || G->det.count_hint(G, &one.d) == -1);
    assert_int_equal(C->det.count_hint(C, &one.h), 5);
    tp_free(&one), tp_free(&lb);
    free(x), free(dy);
}

GUARDED_TEST(test_box_iou)
GUARDED_TEST(test_box_coder)
GUARDED_TEST(test_matcher)
GUARDED_TEST(test_nms)
GUARDED_TEST(test_mask_targets)
GUARDED_TEST(test_sampler)
GUARDED_TEST(test_anchors)
GUARDED_TEST(test_gathers)
GUARDED_TEST(test_topk)
GUARDED_TEST(test_cast)
GUARDED_TEST(test_rle_decode)
GUARDED_TEST(test_det_rpn_targets)
GUARDED_TEST(test_det_proposals)
GUARDED_TEST(test_det_roi_sample)
GUARDED_TEST(test_det_roi_sample_many)
GUARDED_TEST(test_det_mask_targets)
GUARDED_TEST(test_det_gathers)

int main(void) {
    const char *why = NULL;
    G = mrcnn_backend_cuda_create(0, &why);
    if (!G) return test_gpu_skip(why);
    C = mrcnn_backend_cpu_create();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_box_iou), cmocka_unit_test(test_box_coder), cmocka_unit_test(test_matcher),
        cmocka_unit_test(test_nms),     cmocka_unit_test(test_mask_targets), cmocka_unit_test(test_sampler),
        cmocka_unit_test(test_anchors), cmocka_unit_test(test_gathers),
        cmocka_unit_test(test_topk),    cmocka_unit_test(test_cast),
        cmocka_unit_test(test_rle_decode),
        cmocka_unit_test(test_det_rpn_targets), cmocka_unit_test(test_det_proposals),
        cmocka_unit_test(test_det_roi_sample), cmocka_unit_test(test_det_roi_sample_many),
        cmocka_unit_test(test_det_mask_targets),
        cmocka_unit_test(test_det_gathers),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mrcnn_test_catch_end();
    mrcnn_backend_destroy(C);
    mrcnn_backend_destroy(G);
    return rc;
}
#else
int main(void) { return test_gpu_skip("this build has no CUDA (built with GPU=0)"); }
#endif
