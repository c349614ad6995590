/* The CUDA detection ops (cuda_ops.h) against their host references (boxes.h,
 * roi_targets.h) on random data with ties: IoU, matches, NMS keep lists, mask
 * targets and the Philox-keyed balanced sampling must agree exactly (the kernels pin the host's float arithmetic); the box
 * coder within 1e-5 (device logf/expf differ by an ulp). Outputs are poisoned first.
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
#include "mrcnn/rle.h"
#include "mrcnn/roi_align.h"
#include "mrcnn/roi_targets.h"
#include "test_util.h"
#ifdef MRCNN_HAVE_CUDA_HEADERS
#include "mrcnn/cuda_ops.h"

static mrcnn_backend *G;
static uint64_t g_seed = 5000;

/* A device copy of n bytes of host data (or of 0xff bytes, a NaN / -1 poison, when h is NULL). */
static void *up(const void *h, size_t bytes) {
    void *d = G->alloc(G, bytes + 16, "test buffer");
    unsigned char *tmp = NULL;
    if (!h) {
        tmp = malloc(bytes + 1);
        memset(tmp, 0xff, bytes + 1);
        h = tmp;
    }
    int64_t n = (int64_t)bytes;
    mrcnn_tensor t = mrcnn_tensor_view(d, MRCNN_DTYPE_U8, G->device, 1, &n);
    G->write(G, &t, h);
    G->sync(G);
    free(tmp);
    return d;
}

static void down(void *h, const void *d, size_t bytes) {
    int64_t n = (int64_t)bytes;
    mrcnn_tensor t = mrcnn_tensor_view((void *)d, MRCNN_DTYPE_U8, G->device, 1, &n);
    G->read(G, &t, h);
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
    G->free(G, da), G->free(G, db), G->free(G, dio);
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
    G->free(G, dd);
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
    G->free(G, db), G->free(G, dt), G->free(G, dd), G->free(G, dout);
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
                G->free(G, dm);
            }
        }
    }
    printf("  matcher: 12 settings identical\n");
    G->free(G, diou);
    free(gt), free(pred), free(iou), free(ref), free(got);
}

static void nms_case(int64_t n, int classes, float thresh) {
    float *boxes = random_boxes(n), *scores = malloc((size_t)n * sizeof(float));
    test_fill_uniform(scores, n, 0, 1, g_seed++);
    for (int64_t i = 0; i < n; i += 5) scores[i] = 0.5f; // ties: lower index first
    int32_t *cls = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) cls[i] = (int32_t)(i * 7 % (classes ? classes : 1));
    int64_t *ref = malloc((size_t)n * 8), *got = malloc((size_t)n * 8), cnt = -5;
    int64_t nref = classes ? mrcnn_batched_nms(boxes, scores, cls, n, thresh, ref) : mrcnn_nms(boxes, scores, n, thresh, ref);
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
    G->free(G, db), G->free(G, ds), G->free(G, dc), G->free(G, dk), G->free(G, dn);
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
    G->free(G, dm), G->free(G, db), G->free(G, dg), G->free(G, dt);
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
    void *dc = up(NULL, 16);
    mrcnn_cuda_sample_balanced(G, dl, n, batch, fraction, &rng, dp, dn, dc);
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
    G->free(G, dl), G->free(G, dp), G->free(G, dn), G->free(G, dc);
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
    G->free(G, d);
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
            G->free(G, dx), G->free(G, dd), G->free(G, dy);
            free(x), free(ref), free(got), free(dout);
        }
    }
    G->free(G, dl);
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
    G->free(G, dx), G->free(G, dv), G->free(G, di);
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
        mrcnn_cuda_cast(G, &tx, &ty);
        down_dtype(back, dy, n, dts[d]);
        for (int64_t i = 0; i < n; i++) {
            float want = mrcnn_round_to(x[i], dts[d]);
            if (memcmp(&back[i], &want, 4) != 0)
                fail_msg("cast %s [%lld]: gpu %g, host %g", mrcnn_dtype_name(dts[d]), (long long)i, back[i], want);
        }
    }
    printf("  cast fp32 -> fp16/bf16 identical to half.h\n");
    G->free(G, dx), G->free(G, dy);
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
    G->free(G, dc), G->free(G, doff), G->free(G, dm);
    free(masks), free(got), free(u), free(cnts);
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

int main(void) {
    const char *why = NULL;
    G = mrcnn_backend_cuda_create(0, &why);
    if (!G) return test_gpu_skip(why);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_box_iou), cmocka_unit_test(test_box_coder), cmocka_unit_test(test_matcher),
        cmocka_unit_test(test_nms),     cmocka_unit_test(test_mask_targets), cmocka_unit_test(test_sampler),
        cmocka_unit_test(test_anchors), cmocka_unit_test(test_gathers),
        cmocka_unit_test(test_topk),    cmocka_unit_test(test_cast),
        cmocka_unit_test(test_rle_decode),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mrcnn_test_catch_end();
    mrcnn_backend_destroy(G);
    return rc;
}
#else
int main(void) { return test_gpu_skip("this build has no CUDA (built with GPU=0)"); }
#endif
