/* box_math.h, the box math both backends run, on cases whose answers are known
 * exactly: IoU, the box coder and its clamp, clamping, the FPN level mapper at its
 * boundaries, ROIAlign's frame (non-finite and oversized boxes, MRCNN_ROI_ALIGN_MAX_GRID),
 * sampling points and bilinear taps (borders, NaN), the double instantiation against
 * the float one, and the binary-mask sampling of the mask targets. It also checks that
 * the array functions of boxes.h are these per-box functions, bit for bit. */
#include "mrcnn/box_math.h" // first: the header must stand alone in C

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/boxes.h"
#include "mrcnn/roi_targets.h"
#include "test_util.h"

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void test_iou(void **state) {
    const float a[4] = {0, 0, 2, 2}, b[4] = {1, 0, 3, 2}, far[4] = {5, 5, 6, 6}, touch[4] = {2, 0, 4, 2};
    const float empty[4] = {1, 1, 1, 3};
    assert_true(mrcnn_box_iou_pair(a, a) == 1.0f);
    assert_true(mrcnn_box_iou_pair(a, b) == 2.0f / 6.0f);
    assert_true(mrcnn_box_iou_pair(b, a) == 2.0f / 6.0f);
    assert_true(mrcnn_box_iou_pair(a, far) == 0.0f);
    assert_true(mrcnn_box_iou_pair(a, touch) == 0.0f);
    assert_true(isnan(mrcnn_box_iou_pair(empty, empty))); // 0/0, as torchvision
    assert_true(mrcnn_box_area(a) == 4.0f);
    /* The matrix and NMS use the same arithmetic. */
    float boxes[6 * 4], u[6 * 4], iou[36];
    test_fill_uniform(u, 24, 0, 1, 7);
    for (int i = 0; i < 6; i++) {
        boxes[4 * i] = 100 * u[4 * i], boxes[4 * i + 1] = 100 * u[4 * i + 1];
        boxes[4 * i + 2] = boxes[4 * i] + 1 + 60 * u[4 * i + 2];
        boxes[4 * i + 3] = boxes[4 * i + 1] + 1 + 60 * u[4 * i + 3];
    }
    mrcnn_box_iou(boxes, 6, boxes, 6, iou);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++)
            assert_true(same_bits(iou[6 * i + j], mrcnn_box_iou_pair(boxes + 4 * i, boxes + 4 * j)));
    (void)state;
}

static void test_coder(void **state) {
    const mrcnn_box_coder c1 = mrcnn_box_coder_make(1, 1, 1, 1), c2 = mrcnn_box_coder_make(10, 10, 5, 5);
    assert_true(c1.clip == (float)log(1000.0 / 16.0)); // torch.clamp rounds the bound to float
    const float box[4] = {0, 0, 10, 20}, target[4] = {5, 10, 15, 30};
    float d[4], o[4];
    mrcnn_box_encode_one(&c1, target, box, d);
    assert_true(d[0] == 0.5f && d[1] == 0.5f && d[2] == 0.0f && d[3] == 0.0f);
    mrcnn_box_encode_one(&c2, target, box, d);
    assert_true(d[0] == 5.0f && d[1] == 5.0f && d[2] == 0.0f && d[3] == 0.0f);
    mrcnn_box_decode_one(&c2, d, box, o);
    for (int k = 0; k < 4; k++) assert_true(o[k] == target[k]);
    /* The clamp: dw far above log(1000/16) decodes as the clip itself; NaN passes it. */
    const float big[4] = {0, 0, 50, NAN};
    mrcnn_box_decode_one(&c1, big, box, o);
    const float pw = expf(c1.clip) * 10.0f, cx = 5.0f;
    assert_true(same_bits(o[0], cx - 0.5f * pw) && same_bits(o[2], cx + 0.5f * pw));
    assert_true(isnan(o[1]) && isnan(o[3]));
    /* out may alias the deltas. */
    float alias[4] = {0.3f, -0.2f, 1.0f, -0.5f}, ref[4];
    mrcnn_box_decode_one(&c2, alias, box, ref);
    mrcnn_box_decode_one(&c2, alias, box, alias);
    assert_memory_equal(alias, ref, sizeof ref);
    /* The array functions are these, bit for bit. */
    float arr[4];
    mrcnn_box_decode(&c2, 1, 1, d, box, arr);
    mrcnn_box_decode_one(&c2, d, box, o);
    assert_memory_equal(arr, o, sizeof o);
    assert_true(mrcnn_box_clamp(-1.0f, 5.0f) == 0.0f && mrcnn_box_clamp(7.0f, 5.0f) == 5.0f);
    assert_true(mrcnn_box_clamp(2.5f, 5.0f) == 2.5f && isnan(mrcnn_box_clamp(NAN, 5.0f)));
    (void)state;
}

static int level_of(float side) { return mrcnn_roi_level(10, 10, 10 + side, 10 + side, 4, 224.0f, 2, 4); }

static void test_level(void **state) {
    /* P2..P5: 224 px is the canonical level 4 (index 2), each octave one level. */
    assert_int_equal(level_of(224), 2);
    assert_int_equal(level_of(112), 1);
    assert_int_equal(level_of(448), 3);
    assert_int_equal(level_of(223), 1); // floor just below a boundary
    assert_int_equal(level_of(56), 0);
    assert_int_equal(level_of(20), 0);   // clamped below
    assert_int_equal(level_of(5000), 3); // clamped above
    assert_int_equal(level_of(0), 0);    // empty: -inf, lowest level
    assert_int_equal(mrcnn_roi_level(NAN, 0, 1, 1, 4, 224.0f, 2, 4), 0);
    assert_int_equal(mrcnn_roi_level(0, 0, 5000, 5000, 4, 224.0f, 2, 1), 0); // one level
    (void)state;
}

static void test_frame(void **state) {
    mrcnn_roi_frame f;
    const float box[4] = {8, 16, 40, 30};
    /* Scale 1/4, fixed ratio 2: width 8, height 3.5 feature px over 7 bins. */
    assert_true(mrcnn_roi_frame_make(box, 0.25f, 0, 7, 7, 2, &f));
    assert_true(f.x0 == 2.0f && f.y0 == 4.0f && f.bw == 8.0f / 7.0f && f.bh == 3.5f / 7.0f);
    assert_int_equal(f.gh, 2);
    assert_int_equal(f.count, 4);
    /* Adaptive: ceil(size / out) points; not aligned: sizes at least 1. */
    assert_true(mrcnn_roi_frame_make(box, 1.0f, 0, 7, 7, 0, &f));
    assert_int_equal(f.gw, 5);
    assert_int_equal(f.gh, 2);
    const float tiny[4] = {3, 3, 3.25f, 3.25f};
    assert_true(mrcnn_roi_frame_make(tiny, 1.0f, 0, 28, 28, 0, &f));
    assert_true(f.bw == 1.0f / 28.0f && f.count == 1);
    /* Aligned and inverted: an adaptive grid of no points is empty. */
    const float inv[4] = {10, 10, 4, 20};
    assert_false(mrcnn_roi_frame_make(inv, 1.0f, 1, 7, 7, 0, &f));
    /* Non-finite coordinates or sizes are empty. */
    const float bad[3][4] = {{NAN, 0, 1, 1}, {0, 0, INFINITY, 1}, {-3e38f, 0, 3e38f, 1}};
    for (int i = 0; i < 3; i++) assert_false(mrcnn_roi_frame_make(bad[i], 1.0f, 0, 7, 7, 2, &f));
    /* The adaptive grid bound, exactly at and just past it. */
    const float at[4] = {0, 0, 7.0f * MRCNN_ROI_ALIGN_MAX_GRID, 7};
    const float past[4] = {0, 0, 7.0f * MRCNN_ROI_ALIGN_MAX_GRID + 8, 7};
    assert_true(mrcnn_roi_frame_make(at, 1.0f, 0, 7, 7, 0, &f));
    assert_int_equal(f.gw, MRCNN_ROI_ALIGN_MAX_GRID);
    assert_false(mrcnn_roi_frame_make(past, 1.0f, 0, 7, 7, 0, &f));
    assert_true(mrcnn_roi_frame_make(past, 1.0f, 0, 7, 7, 2, &f)); // a fixed ratio has no bound
    /* Sampling points: start + p * bin + (i + .5) * bin / grid. */
    assert_true(mrcnn_roi_sample_coord(2.0f, 4.0f, 3, 1, 2) == 2.0f + 12.0f + 3.0f);
    (void)state;
}

static void test_taps(void **state) {
    int64_t pos[4];
    float w[4];
    /* Interior: (1.25, 2.5) on 4 x 5. */
    assert_true(mrcnn_bilinear_taps(1.25f, 2.5f, 4, 5, pos, w));
    const int64_t want[4] = {1 * 5 + 2, 1 * 5 + 3, 2 * 5 + 2, 2 * 5 + 3};
    assert_memory_equal(pos, want, sizeof want);
    assert_true(w[0] == 0.75f * 0.5f && w[1] == 0.75f * 0.5f && w[2] == 0.25f * 0.5f && w[3] == 0.25f * 0.5f);
    /* [-1, 0] reads row 0 with full weight; past H - 1 reads the last row. */
    assert_true(mrcnn_bilinear_taps(-1.0f, 0.0f, 4, 5, pos, w));
    assert_true(pos[0] == 0 && w[0] == 1.0f && w[1] == 0.0f && w[2] == 0.0f && w[3] == 0.0f);
    assert_true(mrcnn_bilinear_taps(4.0f, 4.5f, 4, 5, pos, w));
    assert_true(pos[0] == 3 * 5 + 4 && pos[3] == 3 * 5 + 4 && w[0] == 1.0f);
    /* Outside or NaN: nothing, and the taps are left alone. */
    pos[0] = 77;
    assert_false(mrcnn_bilinear_taps(-1.001f, 0.0f, 4, 5, pos, w));
    assert_false(mrcnn_bilinear_taps(0.0f, 5.001f, 4, 5, pos, w));
    assert_false(mrcnn_bilinear_taps(NAN, 1.0f, 4, 5, pos, w));
    assert_false(mrcnn_bilinear_taps(1.0f, NAN, 4, 5, pos, w));
    assert_int_equal(pos[0], 77);
    (void)state;
}

static int close_to(double a, double b) { return fabs(a - b) <= 1e-6 * (1 + fabs(b)); }

/* The double instantiation is the float one's code: on the same float inputs the frame,
 * points and taps agree to float rounding, and the grids and tap positions exactly. */
static void test_double(void **state) {
    float u[4 * 50];
    test_fill_uniform(u, 200, 0, 1, 11);
    for (int i = 0; i < 50; i++) {
        const float x = -10 + 200 * u[4 * i], y = -10 + 150 * u[4 * i + 1];
        const float b[4] = {x, y, x + 1 + 100 * u[4 * i + 2], y + 1 + 80 * u[4 * i + 3]};
        const double bd[4] = {b[0], b[1], b[2], b[3]};
        mrcnn_roi_frame f = {0};
        mrcnn_roi_frame_f64 g = {0};
        const int aligned = i & 1, ratio = (i & 2) ? 2 : 0;
        const int okf = mrcnn_roi_frame_make(b, 0.125f, aligned, 7, 7, ratio, &f);
        const int okd = mrcnn_roi_frame_make_f64(bd, 0.125, aligned, 7, 7, ratio, &g);
        assert_int_equal(okf, okd);
        if (!okf) continue;
        assert_true(f.gh == g.gh && f.gw == g.gw && f.count == g.count);
        assert_true(close_to(f.x0, g.x0) && close_to(f.y0, g.y0) && close_to(f.bw, g.bw) && close_to(f.bh, g.bh));
        for (int p = 0; p < 7; p++)
            for (int s = 0; s < f.gh; s++) {
                const float y = mrcnn_roi_sample_coord(f.y0, f.bh, p, s, f.gh);
                const double yd = mrcnn_roi_sample_coord_f64(g.y0, g.bh, p, s, g.gh);
                assert_true(close_to(y, yd));
                int64_t pf[4], pd[4];
                float wf[4];
                double wd[4];
                const int in_f = mrcnn_bilinear_taps(y, y, 20, 30, pf, wf);
                assert_int_equal(in_f, mrcnn_bilinear_taps_f64((double)y, (double)y, 20, 30, pd, wd));
                if (!in_f) continue;
                assert_memory_equal(pf, pd, sizeof pf);
                for (int k = 0; k < 4; k++) assert_true(close_to(wf[k], wd[k]));
            }
    }
    (void)state;
}

static void test_mask(void **state) {
    enum { H = 12, W = 16, M = 7 };
    uint8_t ones[H * W], zeros[H * W];
    memset(ones, 1, sizeof ones);
    memset(zeros, 0, sizeof zeros);
    mrcnn_roi_frame f;
    const float box[4] = {2, 3, 13, 10};
    assert_true(mrcnn_roi_frame_make(box, 1.0f, 0, M, M, 0, &f));
    for (int ph = 0; ph < M; ph++)
        for (int pw = 0; pw < M; pw++) { // the four weights sum to 1 up to rounding
            assert_true(close_to(mrcnn_mask_roi_bin(ones, H, W, &f, ph, pw), 1.0));
            assert_true(mrcnn_mask_roi_bin(zeros, H, W, &f, ph, pw) == 0.0f);
        }
    assert_true(mrcnn_mask_bilinear(ones, H, W, NAN, 1.0f) == 0.0f);
    /* The host's mask targets are these bins; a NaN box gets zeros, not a crash. */
    uint8_t half[H * W];
    for (int i = 0; i < H * W; i++) half[i] = (uint8_t)((i % W) < W / 2);
    const float boxes[8] = {2, 3, 13, 10, NAN, 0, 4, 4};
    const int32_t gi[2] = {0, 0};
    float t[2 * M * M];
    mrcnn_mask_targets(half, 1, H, W, boxes, gi, 2, M, t);
    for (int ph = 0; ph < M; ph++)
        for (int pw = 0; pw < M; pw++) {
            assert_true(same_bits(t[ph * M + pw], mrcnn_mask_roi_bin(half, H, W, &f, ph, pw)));
            assert_true(t[M * M + ph * M + pw] == 0.0f);
        }
    (void)state;
}

static void test_anchor(void **state) {
    const float cell[8] = {-23, -11, 23, 11, -16, -16, 16, 16};
    assert_true(mrcnn_anchor_coord(cell, 1, 0, 3, 5, 8, 16) == 5 * 16 - 16.0f);
    assert_true(mrcnn_anchor_coord(cell, 0, 3, 3, 5, 8, 16) == 3 * 8 + 11.0f);
    (void)state;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_iou),   cmocka_unit_test(test_coder),  cmocka_unit_test(test_level),
        cmocka_unit_test(test_frame), cmocka_unit_test(test_taps),   cmocka_unit_test(test_double),
        cmocka_unit_test(test_mask),  cmocka_unit_test(test_anchor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
