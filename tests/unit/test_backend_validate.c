/* The shared argument checks of every backend (src/backend/backend_validate.c): a tensor
 * in the wrong layout (NCHW for NHWC, KCRS for KRSC, (in, out) for (out, in)) with the
 * right element count fails naming the op, the argument and both shapes, on the full
 * CPU backend and on a backend whose own entries check nothing (as the CUDA kernels,
 * which compare element counts only); the device entries (be->info) of the CPU
 * backend; mrcnn_backend_open's choice and its fallback. */
#include <stdlib.h>
#include <string.h>

#include "mrcnn/backend.h"
#include "mrcnn/backend_open.h"
#include "test_support.h"
#include "test_util.h"

static mrcnn_tensor tz(int ndim, const int64_t *shape) { return test_tensor_alloc(MRCNN_DTYPE_F32, ndim, shape); }

static mrcnn_backend *open_cpu(void) {
    const mrcnn_backend_open_opts o = {.device = MRCNN_DEVICE_CPU, .gpu = -1};
    mrcnn_backend *be = mrcnn_backend_open(&o, NULL);
    assert_non_null(be);
    assert_int_equal(be->device, MRCNN_DEVICE_CPU);
    assert_non_null(be->unchecked); // the checks are in front
    return be;
}

/* ---- the full CPU backend ---- */

static void test_cpu_transposed(void **state) {
    mrcnn_backend *be = open_cpu();
    /* conv: x (N, H, W, C) = (2, 7, 5, 3), w (K, R, S, C) = (4, 3, 3, 3) */
    mrcnn_conv2d_desc d = mrcnn_conv2d_desc_make(2, 7, 5, 3, 4, 3, 2, 1);
    int64_t xs[4] = {2, 7, 5, 3}, xt[4] = {2, 3, 7, 5}, ws[4] = {4, 3, 3, 3}, ys[4] = {2, 4, 3, 4},
            yt[4] = {2, 4, 4, 3};
    mrcnn_tensor x = tz(4, xs), xnchw = tz(4, xt), w = tz(4, ws), y = tz(4, ys), ynchw = tz(4, yt);
    EXPECT_FAIL(be->nn.conv2d_forward(be, &d, &xnchw, &w, NULL, MRCNN_ACT_NONE, &y),
                "conv2d_forward x: shape (2, 3, 7, 5) but expected (2, 7, 5, 3)");
    EXPECT_FAIL(be->nn.conv2d_forward(be, &d, &x, &w, NULL, MRCNN_ACT_NONE, &ynchw),
                "conv2d_forward y: shape (2, 4, 4, 3) but expected (2, 4, 3, 4)");
    EXPECT_FAIL(be->nn.conv2d_backward(be, &d, &x, &w, &ynchw, MRCNN_ACT_NONE, NULL, NULL, MRCNN_GRAD_ADD, NULL, NULL),
                "conv2d_backward dy: shape (2, 4, 4, 3) but expected (2, 4, 3, 4)");
    be->nn.conv2d_forward(be, &d, &x, &w, NULL, MRCNN_ACT_NONE, &y); // the right layout runs

    /* filters KCRS instead of KRSC: C = 2 so that the two orders differ */
    mrcnn_conv2d_desc d2 = mrcnn_conv2d_desc_make(1, 4, 4, 2, 3, 3, 1, 1);
    int64_t x2s[4] = {1, 4, 4, 2}, kcrs[4] = {3, 2, 3, 3}, y2s[4] = {1, 4, 4, 3};
    mrcnn_tensor x2 = tz(4, x2s), wk = tz(4, kcrs), y2 = tz(4, y2s);
    EXPECT_FAIL(be->nn.conv2d_forward(be, &d2, &x2, &wk, NULL, MRCNN_ACT_NONE, &y2),
                "conv2d_forward w: shape (3, 2, 3, 3) but expected (3, 3, 3, 2)");

    /* linear: w (in, out) instead of (out, in) */
    int64_t ls[2] = {4, 6}, lwt[2] = {6, 5}, lys[2] = {4, 5};
    mrcnn_tensor lx = tz(2, ls), lw = tz(2, lwt), ly = tz(2, lys);
    EXPECT_FAIL(be->nn.linear_forward(be, &lx, &lw, NULL, MRCNN_ACT_NONE, &ly),
                "linear_forward w: shape (6, 5) but expected (-1, 6)");

    /* elementwise: the second operand transposed */
    int64_t as[2] = {2, 3}, at[2] = {3, 2};
    mrcnn_tensor a = tz(2, as), b = tz(2, at), s = tz(2, as);
    EXPECT_FAIL(be->nn.add_forward(be, &a, &b, MRCNN_ACT_NONE, &s), "add_forward b: shape (3, 2) but expected (2, 3)");
    EXPECT_FAIL(be->nn.relu_forward(be, &a, &b), "relu_forward y: shape (3, 2) but expected (2, 3)");

    /* ROIAlign: rois (5, R) instead of (R, 5) */
    int lh[1] = {8}, lw1[1] = {8};
    mrcnn_roi_align_desc rd = mrcnn_roi_align_desc_make(1, 2, 1, 0, lh, lw1, 2, 2, 0);
    int64_t fs[4] = {1, 8, 8, 2}, rt[2] = {5, 6}, rys[4] = {6, 2, 2, 2};
    mrcnn_tensor f = tz(4, fs), rois_t = tz(2, rt), ry = tz(4, rys);
    EXPECT_FAIL(be->nn.roi_align_forward(be, &rd, &f, &rois_t, &ry), "roi_align rois: shape (5, 6) but expected (-1, 5)");

    /* bias gradient: db (K) against dy's last extent, C = 3 */
    int64_t kb[1] = {4};
    mrcnn_tensor bg = tz(1, kb);
    EXPECT_FAIL(be->nn.bias_grad(be, &x, &bg), "bias_grad db: shape (4) but expected (3)");

    /* channel copy: y's rows against x's (2 rows of 3 channels into 3 rows of 2) */
    EXPECT_FAIL(be->nn.channel_copy(be, &a, &b), "channel_copy y: shape (3, 2) but expected (2, -1)");

    /* a device tensor handed to the CPU */
    mrcnn_tensor xg = x;
    xg.device = MRCNN_DEVICE_GPU;
    EXPECT_FAIL(be->nn.conv2d_forward(be, &d, &xg, &w, NULL, MRCNN_ACT_NONE, &y),
                "conv2d_forward x: tensor is on the GPU, the cpu backend needs host memory");
    /* cast: element counts */
    EXPECT_FAIL(be->nn.cast(be, &x, &y), "cast y: shape (2, 4, 3, 4) has 96 elements but x (2, 7, 5, 3) has 210");

    mrcnn_tensor *all[] = {&x, &xnchw, &w, &y, &ynchw, &x2, &wk, &y2, &lx, &lw, &ly, &a, &b, &s, &f, &ry, &rois_t, &bg};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) test_tensor_free(all[i]);
    mrcnn_backend_destroy(be);
}

/* ---- a backend that checks nothing itself ---- */

static int g_calls;
static void stub_conv(const mrcnn_backend *be, const mrcnn_conv2d_desc *d, const mrcnn_tensor *x, const mrcnn_tensor *w,
                      const mrcnn_tensor *b, mrcnn_activation act, mrcnn_tensor *y) {
    g_calls++;
}
static void stub_linear(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w, const mrcnn_tensor *b,
                        mrcnn_activation act, mrcnn_tensor *y) {
    g_calls++;
}
static void stub_upsample(const mrcnn_backend *be, const mrcnn_tensor *top, const mrcnn_tensor *lateral,
                          mrcnn_tensor *y) {
    g_calls++;
}
static void stub_deconv(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w, const mrcnn_tensor *b,
                        mrcnn_activation act, mrcnn_tensor *y) {
    g_calls++;
}

static void stub_add(const mrcnn_backend *be, const mrcnn_tensor *a, const mrcnn_tensor *b, mrcnn_activation act,
                     mrcnn_tensor *y) {
    g_calls++;
}

static void test_unchecking_backend(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create_generic();
    be->nn.conv2d_forward = stub_conv;
    be->nn.linear_forward = stub_linear;
    be->nn.upsample_add_forward = stub_upsample;
    be->nn.deconv2x2_forward = stub_deconv;
    be->nn.add_forward = stub_add;
    mrcnn_backend_validate(be);
    mrcnn_backend_validate(be); // twice: wraps once
    assert_true(be->unchecked->nn.conv2d_forward == stub_conv);
    assert_null(be->nn.roi_align_forward); // not installed by the generic backend: stays NULL
    g_calls = 0;

    mrcnn_conv2d_desc d = mrcnn_conv2d_desc_make(2, 7, 5, 3, 4, 1, 1, 0);
    int64_t xs[4] = {2, 7, 5, 3}, xt[4] = {2, 3, 7, 5}, ws[4] = {4, 1, 1, 3}, ys[4] = {2, 7, 5, 4};
    mrcnn_tensor x = tz(4, xs), xnchw = tz(4, xt), w = tz(4, ws), y = tz(4, ys);
    EXPECT_FAIL(be->nn.conv2d_forward(be, &d, &xnchw, &w, NULL, MRCNN_ACT_NONE, &y),
                "conv2d_forward x: shape (2, 3, 7, 5) but expected (2, 7, 5, 3)");
    mrcnn_tensor xh = x;
    xh.dtype = MRCNN_DTYPE_I32; // same element size, not a float
    EXPECT_FAIL(be->nn.conv2d_forward(be, &d, &xh, &w, NULL, MRCNN_ACT_NONE, &y),
                "conv2d_forward x: dtype int32 but expected a float dtype");
    xh = x;
    xh.stride[3] = 2; // not contiguous
    EXPECT_FAIL(be->nn.conv2d_forward(be, &d, &xh, &w, NULL, MRCNN_ACT_NONE, &y),
                "conv2d_forward x: tensor must be contiguous");
    EXPECT_FAIL(be->nn.conv2d_forward(be, &d, &x, &w, NULL, (mrcnn_activation)3, &y), "unknown activation 3");
    assert_int_equal(g_calls, 0);
    be->nn.conv2d_forward(be, &d, &x, &w, NULL, MRCNN_ACT_RELU, &y);
    assert_int_equal(g_calls, 1);

    /* fc6 flattens (R, 7, 7, C) rows: x (3, 2, 2, 5) against w (out, 20) */
    int64_t fx[4] = {3, 2, 2, 5}, fw[2] = {6, 20}, fwt[2] = {20, 6}, fy[2] = {3, 6};
    mrcnn_tensor lx = tz(4, fx), lw = tz(2, fw), lwt = tz(2, fwt), ly = tz(2, fy);
    EXPECT_FAIL(be->nn.linear_forward(be, &lx, &lwt, NULL, MRCNN_ACT_NONE, &ly),
                "linear_forward w: shape (20, 6) but expected (-1, 20)");
    be->nn.linear_forward(be, &lx, &lw, NULL, MRCNN_ACT_NONE, &ly);
    assert_int_equal(g_calls, 2);

    /* FPN top-down: top (N, h, w, C) in NCHW */
    int64_t lat[4] = {1, 8, 6, 4}, top[4] = {1, 4, 3, 4}, topt[4] = {1, 4, 4, 3};
    mrcnn_tensor ul = tz(4, lat), ut = tz(4, top), utt = tz(4, topt), uy = tz(4, lat);
    EXPECT_FAIL(be->nn.upsample_add_forward(be, &utt, &ul, &uy),
                "upsample_add_forward top: shape (1, 4, 4, 3) but expected (1, -1, -1, 4)");
    be->nn.upsample_add_forward(be, &ut, &ul, &uy);
    assert_int_equal(g_calls, 3);

    /* mask head deconv: w (K, C, 2, 2) instead of (K, 2, 2, C) */
    int64_t dx[4] = {1, 3, 3, 5}, dw[4] = {4, 2, 2, 5}, dwt[4] = {4, 5, 2, 2}, dy[4] = {1, 6, 6, 4};
    mrcnn_tensor vx = tz(4, dx), vw = tz(4, dw), vwt = tz(4, dwt), vy = tz(4, dy);
    EXPECT_FAIL(be->nn.deconv2x2_forward(be, &vx, &vwt, NULL, MRCNN_ACT_NONE, &vy),
                "deconv2x2_forward w: shape (4, 5, 2, 2) but expected (-1, 2, 2, 5)");
    be->nn.deconv2x2_forward(be, &vx, &vw, NULL, MRCNN_ACT_NONE, &vy);
    assert_int_equal(g_calls, 4);

    /* the residual join: the activation is checked before the backend sees it */
    EXPECT_FAIL(be->nn.add_forward(be, &ul, &uy, (mrcnn_activation)5, &uy), "add_forward: unknown activation 5");
    EXPECT_FAIL(be->nn.add_forward(be, &ul, &ut, MRCNN_ACT_RELU, &uy), "add_forward b: shape (1, 4, 3, 4)");
    assert_int_equal(g_calls, 4);
    be->nn.add_forward(be, &ul, &uy, MRCNN_ACT_RELU, &uy);
    assert_int_equal(g_calls, 5);

    mrcnn_tensor *all[] = {&x, &xnchw, &w, &y, &lx, &lw, &lwt, &ly, &ul, &ut, &utt, &uy, &vx, &vw, &vwt, &vy};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) test_tensor_free(all[i]);
    mrcnn_backend_destroy(be); // frees the copy of the entries too (ASan in SANITIZE builds)
}

/* ---- device entries and the backend choice ---- */

static void test_cpu_info(void **state) {
    mrcnn_backend *be = open_cpu();
    void (**fp)(void) = (void (**)(void)) & be->info;
    for (size_t i = 0; i < sizeof be->info / sizeof *fp; i++)
        if (!fp[i]) fail_msg("info entry %zu is NULL", i);
    char buf[64];
    assert_string_equal(be->info.device_name(be, buf, sizeof buf), "cpu");
    assert_int_equal(be->info.compute_capability(be), 0);
    be->info.set_tf32(be, 1); // no tensor cores: nothing to set, nothing fails
    assert_true(be->info.memory_used_mb(be) > 0);
    assert_true(be->info.peak_mb(be, 1) > 0); // max RSS
    mrcnn_backend_destroy(be);
}

static void test_open(void **state) {
    const char *why = "unset";
    /* no GPU for this rank: NULL and the reason without a fallback, else the CPU */
    const mrcnn_backend_open_opts strict = {.device = MRCNN_DEVICE_GPU, .gpu = -1};
    assert_null(mrcnn_backend_open(&strict, &why));
    assert_string_equal(why, "no GPU visible");
    const mrcnn_backend_open_opts lenient = {.device = MRCNN_DEVICE_GPU, .gpu = -1, .fallback = "running on the CPU"};
    mrcnn_backend *be = mrcnn_backend_open(&lenient, &why);
    assert_non_null(be);
    assert_null(why);
    assert_int_equal(be->device, MRCNN_DEVICE_CPU);
    mrcnn_backend_destroy(be);

    assert_int_equal(mrcnn_backend_device_parse("cpu"), MRCNN_DEVICE_CPU);
    assert_int_equal(mrcnn_backend_device_parse("cuda"), MRCNN_DEVICE_GPU);
    EXPECT_FAIL(mrcnn_backend_device_parse("tpu"), "MODEL.DEVICE 'tpu' is unknown (cpu or cuda)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_transposed),
        cmocka_unit_test(test_unchecking_backend),
        cmocka_unit_test(test_cpu_info),
        cmocka_unit_test(test_open),
    };
    return cmocka_run_group_tests_name("backend_validate", tests, NULL, NULL);
}
