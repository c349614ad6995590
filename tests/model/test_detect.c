/* Properties of the detection functions that the torchvision parity script cannot
 * see: random sampling (counts, determinism, the no-draw take-all rule), fixed-capacity
 * outputs, tie order, the per-class gathers and argument errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/anchors.h"
#include "mrcnn/backend.h"
#include "mrcnn/model.h" // mrcnn_backend_cpu_create
#include "mrcnn/half.h"
#include "mrcnn/boxes.h"
#include "mrcnn/postprocess.h"
#include "mrcnn/proposals.h"
#include "mrcnn/roi_targets.h"
#include "test_support.h"
#include "test_util.h"

static void test_sampler(void **state) {
    enum { N = 1000 };
    int32_t labels[N];
    for (int i = 0; i < N; i++) labels[i] = i % 10 == 0 ? 1 + i % 3 : (i % 10 == 1 ? -1 : 0); // 100 pos, 100 ignored
    int64_t pos[N], neg[N], pos2[N], neg2[N], np, nn, np2, nn2;
    mrcnn_rng r1 = mrcnn_rng_make(7, 0, 3, MRCNN_RNG_RPN_SAMPLE);
    mrcnn_sample_balanced(labels, N, 256, 0.25f, &r1, pos, &np, neg, &nn);
    assert_int_equal(np, 64);
    assert_int_equal(nn, 192);
    for (int64_t i = 0; i < np; i++) {
        assert_true(labels[pos[i]] > 0);
        if (i) assert_true(pos[i] > pos[i - 1]); // ascending, no repeats
    }
    for (int64_t i = 0; i < nn; i++) {
        assert_true(labels[neg[i]] == 0);
        if (i) assert_true(neg[i] > neg[i - 1]);
    }
    /* The same key draws the same sample; another image index another one. */
    mrcnn_sample_balanced(labels, N, 256, 0.25f, &r1, pos2, &np2, neg2, &nn2);
    assert_memory_equal(pos, pos2, sizeof(int64_t) * 64);
    assert_memory_equal(neg, neg2, sizeof(int64_t) * 192);
    mrcnn_rng r2 = mrcnn_rng_make(7, 0, 4, MRCNN_RNG_RPN_SAMPLE);
    mrcnn_sample_balanced(labels, N, 256, 0.25f, &r2, pos2, &np2, neg2, &nn2);
    assert_true(memcmp(pos, pos2, sizeof(int64_t) * 64) != 0);
    assert_true(memcmp(neg, neg2, sizeof(int64_t) * 192) != 0);
    /* Fewer positives than the quota: negatives fill up; all positives are taken. */
    mrcnn_sample_balanced(labels, N, 512, 0.5f, &r1, pos, &np, neg, &nn);
    assert_int_equal(np, 100);
    assert_int_equal(nn, 412);
    /* Batch above the candidates: everything, in index order, and no RNG needed. */
    mrcnn_sample_balanced(labels, N, 100000, 0.25f, NULL, pos, &np, neg, &nn);
    assert_int_equal(np, 100);
    assert_int_equal(nn, 800);
    for (int64_t i = 0; i < np; i++) assert_int_equal(pos[i], 10 * i);
    EXPECT_FAIL(mrcnn_sample_balanced(labels, N, 256, 0.25f, NULL, pos, &np, neg, &nn), "NULL rng");
    EXPECT_FAIL(mrcnn_sample_balanced(labels, N, 256, 1.5f, &r1, pos, &np, neg, &nn), "positive fraction 1.5");
}

static void sampler_uniform_case(int n, int k) {
    enum { T = 4000 };
    int32_t labels[64];
    for (int i = 0; i < n; i++) labels[i] = 1;
    int hits[64] = {0};
    int64_t pos[64], neg[1], np, nn;
    for (int t = 0; t < T; t++) {
        mrcnn_rng r = mrcnn_rng_make(1, 0, t, MRCNN_RNG_ROI_SAMPLE);
        mrcnn_sample_balanced(labels, n, k, 1.0f, &r, pos, &np, neg, &nn);
        assert_int_equal(np, k);
        for (int i = 0; i < np; i++) hits[pos[i]]++;
    }
    double p = (double)k / n, sigma = sqrt(T * p * (1 - p));
    for (int i = 0; i < n; i++) assert_true(fabs(hits[i] - T * p) < 5 * sigma);
}

static void test_sampler_uniform(void **state) {
    /* Every candidate is about equally likely to be chosen over many images, also
     * when all but one are taken. */
    sampler_uniform_case(40, 10);
    sampler_uniform_case(11, 10);
}

static void test_nms_ties_and_classes(void **state) {
    /* Three identical boxes with equal scores: the lowest index survives. */
    float boxes[5 * 4] = {0, 0, 10, 10, 0, 0, 10, 10, 0, 0, 10, 10, 50, 50, 60, 60, 0, 0, 10, 10};
    float scores[5] = {0.5f, 0.5f, 0.5f, 0.9f, 0.7f};
    int64_t keep[5];
    int64_t k = mrcnn_batched_nms(boxes, scores, NULL, 5, 0.5f, keep);
    assert_int_equal(k, 2);
    assert_int_equal(keep[0], 3);
    assert_int_equal(keep[1], 4);
    int32_t cls[5] = {1, 2, 1, 1, 3};
    k = mrcnn_batched_nms(boxes, scores, cls, 5, 0.5f, keep);
    /* Per class: {0, 2} -> 0, {1} -> 1, {3}, {4}; ordered by score, ties by index. */
    int64_t want[4] = {3, 4, 0, 1};
    assert_int_equal(k, 4);
    assert_memory_equal(keep, want, sizeof want);
    /* IoU exactly at the threshold is kept (suppression needs IoU > thresh). */
    float b2[8] = {0, 0, 10, 10, 0, 0, 10, 5};
    float s2[2] = {1, 0.5f};
    assert_int_equal(mrcnn_batched_nms(b2, s2, NULL, 2, 0.5f, keep), 2);
    assert_int_equal(mrcnn_batched_nms(b2, s2, NULL, 2, 0.49f, keep), 1);
}

static void test_rpn_sample_weights(void **state) {
    enum { A = 600 };
    float labels[A], ow[A], bw[A * 4];
    for (int i = 0; i < A; i++) labels[i] = i < 20 ? 1.0f : (i < 50 ? -1.0f : 0.0f);
    mrcnn_rng r = mrcnn_rng_make(3, 1, 9, MRCNN_RNG_RPN_SAMPLE);
    int64_t n = mrcnn_rpn_sample(labels, A, 256, 0.5f, &r, ow, bw);
    assert_int_equal(n, 256);
    double so = 0, sb = 0;
    for (int i = 0; i < A; i++) {
        so += ow[i];
        for (int k = 0; k < 4; k++) {
            sb += bw[4 * i + k];
            assert_true(bw[4 * i + k] == (labels[i] > 0 ? ow[i] : 0.0f));
        }
        if (labels[i] < 0) assert_true(ow[i] == 0.0f);
    }
    assert_true(so == 256 && sb == 80); // all 20 positives, 236 negatives
}

static void test_rpn_targets_no_gt(void **state) {
    float anchors[8] = {0, 0, 10, 10, 5, 5, 20, 20}, labels[2], reg[8];
    mrcnn_rpn_assign_targets(anchors, 2, NULL, 0, 0.7f, 0.3f, labels, reg);
    for (int i = 0; i < 2; i++) assert_true(labels[i] == 0.0f);
    for (int i = 0; i < 8; i++) assert_true(reg[i] == 0.0f);
}

static void test_roi_sample_capacity(void **state) {
    enum { P = 2000, S = 512, F = 128 };
    float *prop = malloc(sizeof(float) * P * 4);
    float gt[3 * 4] = {10, 10, 60, 80, 100, 40, 180, 120, 30, 150, 90, 200};
    int32_t gl[3] = {2, 5, 1};
    for (int i = 0; i < P; i++) {
        /* Jittered copies of the gt boxes (many positives) and random boxes. */
        float j[4];
        test_fill_uniform(j, 4, -6, 6, 1000 + i);
        const float *g = gt + 4 * (i % 3);
        if (i % 2)
            for (int k = 0; k < 4; k++) prop[4 * i + k] = g[k] + j[k];
        else {
            float xy[2];
            test_fill_uniform(xy, 2, 0, 200, 5000 + i);
            prop[4 * i + 0] = xy[0], prop[4 * i + 1] = xy[1];
            prop[4 * i + 2] = xy[0] + 20 + fabsf(j[0]) * 5, prop[4 * i + 3] = xy[1] + 20 + fabsf(j[1]) * 5;
        }
    }
    mrcnn_roi_sample_params p = {S, 0.25f, 0.5f, F, mrcnn_box_coder_make(10, 10, 5, 5)};
    float rois[S * 4], reg[S * 4];
    int32_t labels[S], mg[S], fg[F];
    int nfg;
    mrcnn_rng r = mrcnn_rng_make(5, 2, 17, MRCNN_RNG_ROI_SAMPLE);
    int n = mrcnn_roi_sample(&p, prop, P, gt, gl, 3, &r, rois, labels, mg, reg, fg, &nfg);
    assert_int_equal(n, S);
    assert_int_equal(nfg, F); // 25% of 512
    float iou[3];
    for (int t = 0; t < nfg; t++) {
        int i = fg[t];
        assert_true(labels[i] == gl[mg[i]]);
        mrcnn_box_iou(rois + 4 * i, 1, gt, 3, iou);
        assert_true(iou[mg[i]] >= 0.5f);
        /* Its target decodes back to the matched gt box. */
        float back[4];
        mrcnn_box_decode(&p.coder, 1, 1, reg + 4 * i, rois + 4 * i, back);
        for (int k = 0; k < 4; k++) assert_true(fabsf(back[k] - gt[4 * mg[i] + k]) < 1e-3f);
    }
    int bg = 0;
    for (int i = 0; i < n; i++)
        if (labels[i] == 0) {
            bg++;
            for (int k = 0; k < 4; k++) assert_true(reg[4 * i + k] == 0.0f);
        }
    assert_int_equal(bg, S - F);
    /* More positives than the mask head's capacity is an error naming the key. */
    mrcnn_roi_sample_params q = p;
    q.max_fg = 64;
    EXPECT_FAIL(mrcnn_roi_sample(&q, prop, P, gt, gl, 3, &r, rois, labels, mg, reg, fg, &nfg),
                "MAX_FG_PER_IMAGE = 64");
    /* No proposals: the gt boxes themselves are the samples; rows past the count are
     * padding (label -1, zero box). */
    n = mrcnn_roi_sample(&p, NULL, 0, gt, gl, 3, &r, rois, labels, mg, reg, fg, &nfg);
    assert_int_equal(n, 3);
    assert_int_equal(nfg, 3);
    assert_memory_equal(rois, gt, sizeof gt);
    for (int i = 0; i < 3; i++) assert_int_equal(labels[i], gl[i]);
    assert_int_equal(labels[3], -1);
    assert_true(rois[4 * 3 + 2] == 0.0f);
    int32_t bad[3] = {2, 0, 1};
    EXPECT_FAIL(mrcnn_roi_sample(&p, NULL, 0, gt, bad, 3, &r, rois, labels, mg, reg, fg, &nfg), "label 0");
    free(prop);
}

static void test_class_gathers(void **state) {
    enum { N = 3, K = 4, M = 2 };
    float deltas[N * K * 4], out[N * 4], g[N * K * 4] = {0};
    for (int i = 0; i < N * K * 4; i++) deltas[i] = (float)i;
    int32_t labels[N] = {2, -1, 3};
    mrcnn_gather_class_deltas(N, K, deltas, labels, out);
    for (int j = 0; j < 4; j++) {
        assert_true(out[j] == (float)(0 * 16 + 2 * 4 + j));
        assert_true(out[4 + j] == 0.0f);
        assert_true(out[8 + j] == (float)(2 * 16 + 3 * 4 + j));
    }
    mrcnn_gather_class_deltas_backward(N, K, out, labels, g);
    mrcnn_gather_class_deltas_backward(N, K, out, labels, g); // accumulates
    assert_true(g[2 * 4 + 1] == 2 * out[1]);
    assert_true(g[16 + 0] == 0.0f);
    float logits[N * M * M * K], mo[N * M * M], mg[N * M * M * K] = {0};
    for (int i = 0; i < N * M * M * K; i++) logits[i] = (float)i;
    mrcnn_gather_class_masks(N, M, K, logits, labels, mo);
    for (int p = 0; p < M * M; p++) {
        assert_true(mo[p] == (float)(p * K + 2));
        assert_true(mo[M * M + p] == 0.0f);
        assert_true(mo[2 * M * M + p] == (float)(2 * M * M * K + p * K + 3));
    }
    mrcnn_gather_class_masks_backward(N, M, K, mo, labels, mg);
    assert_true(mg[3 * K + 2] == mo[3]);
    assert_true(mg[3 * K + 1] == 0.0f);
    int32_t bad[N] = {4, 0, 0};
    EXPECT_FAIL(mrcnn_gather_class_masks(N, M, K, logits, bad, mo), "label 4 outside [0, 4)");
    float probs[M * M];
    mrcnn_mask_probs(1, M, K, logits, labels, probs);
    assert_true(fabsf(probs[1] - 1.0f / (1.0f + expf(-(float)(K + 2)))) < 1e-7f);
}

static void test_argument_errors(void **state) {
    float iou[4] = {0};
    int32_t m[4];
    EXPECT_FAIL(mrcnn_matcher_match(iou, 1, 4, 0.3f, 0.7f, 1, m), "low threshold 0.7 above high threshold 0.3");
    EXPECT_FAIL(mrcnn_box_coder_make(10, 10, 0, 5), "weights (10, 10, 0, 5) must be positive");
    float ratios[3] = {0.5f, 1, 2};
    int gh[1] = {10}, gw[1] = {10}, sz[1] = {32};
    EXPECT_FAIL(mrcnn_anchors_generate(1, sz, ratios, 3, gh, gw, 8, 8, NULL, NULL), "does not fit the image");
    EXPECT_FAIL(mrcnn_box_clip(1, iou, 0, 5), "image size 0x5");
    /* An image without gt in the matcher: every prediction is below the low threshold. */
    mrcnn_matcher_match(NULL, 0, 4, 0.7f, 0.3f, 1, m);
    for (int i = 0; i < 4; i++) assert_int_equal(m[i], MRCNN_MATCH_BELOW_LOW);
    mrcnn_detect_params dp = {1, 0.05f, 0.5f, 100, 1e-2f, mrcnn_box_coder_make(10, 10, 5, 5)};
    float b[400], s[100];
    int32_t l[100];
    EXPECT_FAIL(mrcnn_detect_postprocess(&dp, 0, NULL, NULL, NULL, 10, 10, b, s, l), "1 classes");
}

static void test_proposals_topk_ties(void **state) {
    /* Equal logits: the per-level top-k keeps the lower anchor indices (a stable
     * top-k), whatever the quickselect pivots do. Anchors are disjoint, so NMS keeps all. */
    enum { A = 40 };
    float anchors[A * 4], obj[A], del[A * 4] = {0};
    for (int i = 0; i < A; i++) {
        anchors[4 * i + 0] = (float)(20 * i), anchors[4 * i + 1] = 0;
        anchors[4 * i + 2] = (float)(20 * i + 10), anchors[4 * i + 3] = 10;
        obj[i] = i % 7 == 3 ? 2.0f : 1.0f; // indices 3, 10, 17, 24, 31, 38 on top
    }
    int64_t counts[1] = {A};
    const float *o[1] = {obj}, *d[1] = {del};
    int hw[2] = {20, 1000};
    mrcnn_proposal_params p = {9, 9, 0.7f, 1e-3f, 0.0f};
    float boxes[9 * 4], scores[9];
    int64_t n;
    mrcnn_rpn_proposals(&p, 1, 1, counts, o, d, anchors, hw, boxes, scores, &n);
    assert_int_equal(n, 9);
    int want[9] = {3, 10, 17, 24, 31, 38, 0, 1, 2};
    for (int t = 0; t < 9; t++) assert_true(boxes[4 * t] == anchors[4 * want[t]]);
}

static void test_backend_roi_align(void **state) {
    /* The CPU backend's entries: the same numbers as the op, accumulation into the
     * gradients, rounded storage at bf16, and shape errors that name the tensor. */
    enum { N = 2, C = 8, R = 6, P = 7 };
    int lh[4] = {16, 8, 4, 2}, lw[4] = {20, 10, 5, 3};
    mrcnn_roi_align_desc d = mrcnn_roi_align_desc_make(N, C, 4, 2, lh, lw, P, 2, 0);
    mrcnn_tensor f[4], g[4];
    const float *fp[4];
    float *gp[4];
    for (int l = 0; l < 4; l++) {
        int64_t sh[4] = {N, lh[l], lw[l], C};
        f[l] = test_tensor_alloc(MRCNN_DTYPE_F32, 4, sh);
        g[l] = test_tensor_alloc(MRCNN_DTYPE_F32, 4, sh);
        test_fill_uniform(f[l].data, mrcnn_tensor_numel(&f[l]), -1, 1, 40 + l);
        fp[l] = f[l].data;
        gp[l] = calloc((size_t)mrcnn_tensor_numel(&f[l]), sizeof(float));
    }
    /* Levels 2, 2, 3, padding, 4, 5. */
    float rois[R * 5] = {0, 2, 3, 30, 40, 1, 0, 0, 70, 60, 0, 0, 0, 150, 140, -1, 0, 0, 9, 9, 1, 1, 1, 250, 250, 0, 0, 0, 500, 480};
    int64_t rs[2] = {R, 5}, ys[4] = {R, P, P, C};
    mrcnn_tensor rt = mrcnn_tensor_view(rois, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 2, rs);
    mrcnn_tensor y = test_tensor_alloc(MRCNN_DTYPE_F32, 4, ys), dy = test_tensor_alloc(MRCNN_DTYPE_F32, 4, ys);
    float *yref = malloc(sizeof(float) * R * P * P * C);
    test_fill_uniform(dy.data, mrcnn_tensor_numel(&dy), -1, 1, 77);
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    assert_non_null(be->nn.roi_align_forward);
    be->nn.roi_align_forward(be, &d, f, &rt, &y);
    mrcnn_roi_align_forward(&d, fp, R, rois, yref);
    assert_memory_equal(y.data, yref, sizeof(float) * R * P * P * C);
    be->nn.roi_align_backward(be, &d, &rt, &dy, g);
    be->nn.roi_align_backward(be, &d, &rt, &dy, g); // accumulates
    mrcnn_roi_align_backward(&d, R, rois, dy.data, gp);
    for (int l = 0; l < 4; l++) {
        const float *a = g[l].data;
        double worst = 0, mx = 0;
        for (int64_t i = 0; i < mrcnn_tensor_numel(&g[l]); i++) {
            worst = fmax(worst, fabs(a[i] - 2 * gp[l][i]));
            mx = fmax(mx, fabs(gp[l][i]));
        }
        assert_true(mx > 0 && worst <= 1e-6 * mx);
    }
    be->set_precision(be, MRCNN_DTYPE_BF16);
    be->nn.roi_align_forward(be, &d, f, &rt, &y);
    const float *yb = y.data;
    for (int64_t i = 0; i < mrcnn_tensor_numel(&y); i++) assert_true(yb[i] == mrcnn_round_to(yref[i], MRCNN_DTYPE_BF16));
    int64_t bad_shape[2] = {R, 4};
    mrcnn_tensor bad = mrcnn_tensor_view(rois, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 2, bad_shape);
    EXPECT_FAIL(be->nn.roi_align_forward(be, &d, f, &bad, &y), "roi_align rois: shape (6, 4) but expected (-1, 5)");
    mrcnn_roi_align_desc d2 = d;
    d2.channels = 4;
    EXPECT_FAIL(be->nn.roi_align_forward(be, &d2, f, &rt, &y), "roi_align features: shape (2, 16, 20, 8)");
    mrcnn_backend_destroy(be);
    for (int l = 0; l < 4; l++) test_tensor_free(&f[l]), test_tensor_free(&g[l]), free(gp[l]);
    test_tensor_free(&y);
    test_tensor_free(&dy);
    free(yref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampler),
        cmocka_unit_test(test_sampler_uniform),
        cmocka_unit_test(test_nms_ties_and_classes),
        cmocka_unit_test(test_rpn_sample_weights),
        cmocka_unit_test(test_rpn_targets_no_gt),
        cmocka_unit_test(test_roi_sample_capacity),
        cmocka_unit_test(test_class_gathers),
        cmocka_unit_test(test_argument_errors),
        cmocka_unit_test(test_proposals_topk_ties),
        cmocka_unit_test(test_backend_roi_align),
    };
    return cmocka_run_group_tests_name("detect", tests, NULL, NULL);
}
