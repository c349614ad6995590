/* The shared argument checks (src/backend/backend_validate.c) in front of the CUDA
 * backend, on a GPU (skips without one): the CUDA entries of the checked ops no longer
 * check shapes, float dtypes or devices themselves, so each of those entries is called
 * here once with an argument in the wrong layout (mostly the right element count, which
 * the CUDA kernels alone would have run on), and must fail with the shared check's
 * words, before any kernel runs; a host tensor and an int32 tensor fail the same way.
 * The checks the CUDA entries keep (what the shared rules allow but the kernels cannot
 * take: y's dtype against x's for cuDNN, a pooling window wholly in the padding, an
 * empty GEMM or deconv extent, feature levels of two dtypes, an empty upsampled top)
 * still fail, and a call with the right shapes runs and gives the right numbers.
 * MRCNN_CUDA_VALIDATE_SELFCHECK=1 runs the shared-check cases with the CPU backend in
 * the GPU's slot (tests/cuda/test_cuda_validate_selfcheck.sh), so that the harness and
 * its expected messages are known to hold on any machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "test_util.h"

static mrcnn_backend *G;
static int g_selfcheck; // G is the CPU backend
static void *g_bufs[64];
static int g_n_bufs;

/* A zeroed tensor on G's device, in a buffer of at least 4 KiB: a call that wrongly got
 * past the checks stays inside memory the test owns (and reads zero ROIs). */
static mrcnn_tensor tdev(mrcnn_dtype dt, int ndim, const int64_t *shape) {
    mrcnn_tensor t = mrcnn_tensor_view(NULL, dt, G->device, ndim, shape);
    size_t bytes = (mrcnn_tensor_nbytes(&t) + 3) / 4 * 4;
    if (bytes < 4096) bytes = 4096;
    assert_true(g_n_bufs < (int)(sizeof g_bufs / sizeof *g_bufs));
    t.data = g_bufs[g_n_bufs++] = G->mem.alloc(G, bytes, "test tensor");
    const int64_t words = (int64_t)(bytes / 4);
    mrcnn_tensor all = mrcnn_tensor_view(t.data, MRCNN_DTYPE_F32, G->device, 1, &words);
    G->mem.zero(G, &all);
    return t;
}

static mrcnn_tensor tf(int ndim, const int64_t *shape) { return tdev(MRCNN_DTYPE_F32, ndim, shape); }

static void free_all(void) {
    G->mem.sync(G);
    for (int i = 0; i < g_n_bufs; i++) G->mem.free(G, g_bufs[i]);
    g_n_bufs = 0;
}

/* ---- every checked entry, one wrong layout each ---- */

static void test_layouts(void **state) {
    assert_non_null(G->unchecked); // the shared checks are in front
    assert_true(G->nn.conv2d_forward != G->unchecked->nn.conv2d_forward);

    /* conv: x (N, H, W, C) = (2, 7, 5, 3), w (4, 3, 3, 3), stride 2, pad 1 -> y (2, 4, 3, 4) */
    mrcnn_conv2d_desc d = mrcnn_conv2d_desc_make(2, 7, 5, 3, 4, 3, 2, 1);
    const int64_t xs[4] = {2, 7, 5, 3}, xt[4] = {2, 3, 7, 5}, ws[4] = {4, 3, 3, 3}, ys[4] = {2, 4, 3, 4},
                  yt[4] = {2, 4, 4, 3};
    mrcnn_tensor x = tf(4, xs), xnchw = tf(4, xt), w = tf(4, ws), y = tf(4, ys), ynchw = tf(4, yt);
    EXPECT_FAIL(G->nn.conv2d_forward(G, &d, &xnchw, &w, NULL, MRCNN_ACT_NONE, &y), "conv2d_forward x: shape (2, 3, 7, 5)");
    EXPECT_FAIL(G->nn.conv2d_backward(G, &d, &x, &w, &ynchw, MRCNN_ACT_NONE, NULL, &x, MRCNN_GRAD_ADD,
                                      NULL, NULL), "conv2d_backward dy: shape (2, 4, 4, 3)");

    /* deconv: x (1, 3, 4, 3), w (K, 2, 2, C) = (5, 2, 2, 3) -> y (1, 6, 8, 5) */
    const int64_t dxs[4] = {1, 3, 4, 3}, dws[4] = {5, 2, 2, 3}, dwt[4] = {5, 3, 2, 2}, dyt[4] = {1, 8, 6, 5};
    mrcnn_tensor dx = tf(4, dxs), dw = tf(4, dws), dwkcrs = tf(4, dwt), dyhw = tf(4, dyt);
    const int64_t dys[4] = {1, 6, 8, 5};
    mrcnn_tensor dy = tf(4, dys);
    EXPECT_FAIL(G->nn.deconv2x2_forward(G, &dx, &dwkcrs, NULL, MRCNN_ACT_NONE, &dy),
                "deconv2x2_forward w: shape (5, 3, 2, 2)");
    EXPECT_FAIL(G->nn.deconv2x2_backward(G, &dx, &dw, &dyhw, MRCNN_ACT_NONE, NULL, &dx, MRCNN_GRAD_ADD,
                                         NULL, NULL), "deconv2x2_backward dy: shape (1, 8, 6, 5)");

    /* elementwise: the second operand transposed */
    const int64_t as[2] = {2, 3}, at[2] = {3, 2};
    mrcnn_tensor a = tf(2, as), b = tf(2, at), s = tf(2, as);
    EXPECT_FAIL(G->nn.relu_forward(G, &a, &b), "relu_forward y: shape (3, 2)");
    EXPECT_FAIL(G->nn.relu_backward(G, &a, &b, &s), "relu_backward dy: shape (3, 2)");
    EXPECT_FAIL(G->nn.add_forward(G, &a, &b, MRCNN_ACT_NONE, &s), "add_forward b: shape (3, 2)");
    EXPECT_FAIL(G->nn.add_backward(G, &a, &b, NULL), "add_backward da: shape (3, 2)");

    /* max-pool: x (1, 4, 6, 2), 2x2 stride 2 -> y (1, 2, 3, 2) */
    mrcnn_pool2d_desc pd = {1, 4, 6, 2, 2, 2, 0};
    const int64_t pxs[4] = {1, 4, 6, 2}, pxt[4] = {1, 2, 4, 6}, pys[4] = {1, 2, 3, 2}, pyt[4] = {1, 3, 2, 2};
    mrcnn_tensor px = tf(4, pxs), pxnchw = tf(4, pxt), py = tf(4, pys), pyt_ = tf(4, pyt);
    EXPECT_FAIL(G->nn.maxpool2d_forward(G, &pd, &pxnchw, &py), "maxpool2d_forward x: shape (1, 2, 4, 6)");
    EXPECT_FAIL(G->nn.maxpool2d_backward(G, &pd, &px, &pyt_, &px), "maxpool2d_backward dy: shape (1, 3, 2, 2)");

    /* upsample + add: lateral (1, 4, 4, 3), top (1, 2, 2, 3) */
    const int64_t ls[4] = {1, 4, 4, 3}, lt[4] = {1, 3, 4, 4}, ts[4] = {1, 2, 2, 3}, tt[4] = {1, 3, 2, 2};
    mrcnn_tensor lat = tf(4, ls), latnchw = tf(4, lt), top = tf(4, ts), topnchw = tf(4, tt), uy = tf(4, ls);
    EXPECT_FAIL(G->nn.upsample_add_forward(G, &topnchw, &lat, &uy), "upsample_add_forward top: shape (1, 3, 2, 2)");
    EXPECT_FAIL(G->nn.upsample_add_backward(G, &uy, &top, &latnchw),
                "upsample_add_backward dlateral: shape (1, 3, 4, 4)");

    /* linear: x (4, 6), w (out, in) = (5, 6) -> y (4, 5) */
    const int64_t lxs[2] = {4, 6}, lws[2] = {5, 6}, lwt[2] = {6, 5}, lys[2] = {4, 5}, lyt[2] = {5, 4};
    mrcnn_tensor lx = tf(2, lxs), lw = tf(2, lws), lwio = tf(2, lwt), ly = tf(2, lys), lyt_ = tf(2, lyt);
    EXPECT_FAIL(G->nn.linear_forward(G, &lx, &lwio, NULL, MRCNN_ACT_NONE, &ly), "linear_forward w: shape (6, 5)");
    EXPECT_FAIL(G->nn.linear_backward(G, &lx, &lw, &lyt_, MRCNN_ACT_NONE, NULL, &lx, MRCNN_GRAD_ADD,
                                      NULL, NULL), "linear_backward dy: shape (5, 4)");

    /* bias gradient: db (K) against dy's last extent, K = 3 */
    const int64_t k2[1] = {2};
    mrcnn_tensor db2 = tf(1, k2);
    EXPECT_FAIL(G->nn.bias_grad(G, &a, &db2), "bias_grad db: shape (2)");

    /* ROIAlign: one 8x8 level of 2 channels, 2x2 output; rois (5, R) instead of (R, 5) */
    const int lh[1] = {8}, lw1[1] = {8};
    mrcnn_roi_align_desc rd = mrcnn_roi_align_desc_make(1, 2, 1, 0, lh, lw1, 2, 2, 0);
    const int64_t fs[4] = {1, 8, 8, 2}, rs[2] = {6, 5}, rt[2] = {5, 6}, rys[4] = {6, 2, 2, 2}, ryt[4] = {6, 2, 2, 3};
    mrcnn_tensor f = tf(4, fs), rois = tf(2, rs), rois_t = tf(2, rt), ry = tf(4, rys), ry3 = tf(4, ryt);
    EXPECT_FAIL(G->nn.roi_align_forward(G, &rd, &f, &rois_t, &ry), "roi_align rois: shape (5, 6)");
    EXPECT_FAIL(G->nn.roi_align_backward(G, &rd, &rois, &ry3, &f), "shape (6, 2, 2, 3)");

    /* cast: element counts */
    const int64_t cs[2] = {4, 2};
    mrcnn_tensor c8 = tf(2, cs);
    EXPECT_FAIL(G->nn.cast(G, &a, &c8), "cast y: shape (4, 2) has 8 elements");
    free_all();
}

/* ---- devices and dtypes ---- */

static void test_device_dtype(void **state) {
    const int64_t as[2] = {2, 3};
    mrcnn_tensor a = tf(2, as), y = tf(2, as);
    mrcnn_tensor other = a; // the same header on the other device
    other.device = G->device == MRCNN_DEVICE_GPU ? MRCNN_DEVICE_CPU : MRCNN_DEVICE_GPU;
    const char *where = G->device == MRCNN_DEVICE_GPU ? "tensor is on the CPU, the cuda backend needs device memory"
                                                      : "tensor is on the GPU, the cpu backend needs host memory";
    char buf[160];
    const char *want = buf; // a pointer: EXPECT_FAIL tests its needle for NULL
    snprintf(buf, sizeof buf, "relu_forward x: %s", where);
    EXPECT_FAIL(G->nn.relu_forward(G, &other, &y), want);
    snprintf(buf, sizeof buf, "add_forward y: %s", where);
    EXPECT_FAIL(G->nn.add_forward(G, &a, &a, MRCNN_ACT_NONE, &other), want);

    mrcnn_tensor ai = a;
    ai.dtype = MRCNN_DTYPE_I32; // same element size, not a float
    EXPECT_FAIL(G->nn.relu_forward(G, &ai, &y), "relu_forward x: dtype int32 but expected a float dtype");
    mrcnn_tensor strided = a;
    strided.stride[1] = 2; // not contiguous
    EXPECT_FAIL(G->nn.add_backward(G, &strided, &y, NULL), "add_backward dy: tensor must be contiguous");
    free_all();
}

/* ---- what the CUDA entries still check themselves ---- */

static void test_cuda_own_checks(void **state) {
    if (g_selfcheck) skip(); // the CPU backend's own needs differ
    /* cuDNN runs x and y in one dtype */
    mrcnn_conv2d_desc d = mrcnn_conv2d_desc_make(2, 7, 5, 3, 4, 3, 2, 1);
    const int64_t xs[4] = {2, 7, 5, 3}, ws[4] = {4, 3, 3, 3}, ys[4] = {2, 4, 3, 4};
    mrcnn_tensor x = tf(4, xs), w = tf(4, ws), yh = tdev(MRCNN_DTYPE_F16, 4, ys);
    EXPECT_FAIL(G->nn.conv2d_forward(G, &d, &x, &w, NULL, MRCNN_ACT_NONE, &yh), "differs from x dtype");
    mrcnn_tensor xh = tdev(MRCNN_DTYPE_F16, 4, xs), y = tf(4, ys);
    EXPECT_FAIL(G->nn.conv2d_backward(G, &d, &x, &w, &y, MRCNN_ACT_NONE, NULL, &xh, MRCNN_GRAD_ADD,
                                      NULL, NULL), "dx dtype");

    /* a 2x2 window with pad 2: windows wholly in the padding */
    mrcnn_pool2d_desc pd = {1, 4, 6, 2, 2, 2, 2};
    const int64_t pxs[4] = {1, 4, 6, 2}, pys[4] = {1, 4, 5, 2};
    mrcnn_tensor px = tf(4, pxs), py = tf(4, pys);
    EXPECT_FAIL(G->nn.maxpool2d_forward(G, &pd, &px, &py), "kernel 2, stride 2, pad 2 invalid");

    /* empty extents: rows of 0 features; a deconv to K = 0 channels; an empty top */
    const int64_t x0s[2] = {4, 0}, w0s[2] = {5, 0}, y0s[2] = {4, 5};
    mrcnn_tensor x0 = tf(2, x0s), w0 = tf(2, w0s), y0 = tf(2, y0s);
    EXPECT_FAIL(G->nn.linear_forward(G, &x0, &w0, NULL, MRCNN_ACT_NONE, &y0), "has in = 0");
    const int64_t dxs[4] = {1, 2, 2, 3}, dws[4] = {0, 2, 2, 3}, dys[4] = {1, 4, 4, 0};
    mrcnn_tensor dx = tf(4, dxs), dw = tf(4, dws), dy = tf(4, dys);
    EXPECT_FAIL(G->nn.deconv2x2_forward(G, &dx, &dw, NULL, MRCNN_ACT_NONE, &dy), "C and K must be positive");
    const int64_t ls[4] = {1, 4, 4, 3}, t0[4] = {1, 0, 0, 3};
    mrcnn_tensor lat = tf(4, ls), top = tf(4, t0), uy = tf(4, ls);
    EXPECT_FAIL(G->nn.upsample_add_forward(G, &top, &lat, &uy), "empty spatial extent");

    /* ROIAlign's feature levels in one dtype */
    const int lh[2] = {8, 4}, lw[2] = {8, 4};
    mrcnn_roi_align_desc rd = mrcnn_roi_align_desc_make(1, 2, 2, 0, lh, lw, 2, 2, 0);
    const int64_t f0s[4] = {1, 8, 8, 2}, f1s[4] = {1, 4, 4, 2}, rs[2] = {3, 5}, rys[4] = {3, 2, 2, 2};
    mrcnn_tensor feats[2] = {tf(4, f0s), tdev(MRCNN_DTYPE_F16, 4, f1s)};
    mrcnn_tensor rois = tf(2, rs), ry = tf(4, rys);
    EXPECT_FAIL(G->nn.roi_align_forward(G, &rd, feats, &rois, &ry), "level 1 dtype differs from level 0");
    free_all();
}

/* ---- the right shapes run ---- */

static void test_right_shapes_run(void **state) {
    const int64_t as[2] = {2, 3};
    mrcnn_tensor a = tf(2, as), b = tf(2, as), y = tf(2, as);
    const float ha[6] = {1, -2, 3, -4, 5, -6}, hb[6] = {10, 20, 30, 40, 50, 60};
    G->mem.write(G, &a, ha);
    G->mem.write(G, &b, hb);
    G->nn.add_forward(G, &a, &b, MRCNN_ACT_RELU, &y);
    float hy[6];
    G->mem.read(G, &y, hy);
    for (int i = 0; i < 6; i++) {
        const float want = ha[i] + hb[i] > 0 ? ha[i] + hb[i] : 0;
        assert_true(hy[i] == want);
    }
    free_all();
}

int main(void) {
    const char *sc = getenv("MRCNN_CUDA_VALIDATE_SELFCHECK");
    g_selfcheck = sc && atoi(sc) != 0;
    const char *why = NULL;
    if (g_selfcheck) {
        printf("self-check: the CPU backend in the GPU's slot\n");
        G = mrcnn_backend_cpu_create();
    } else {
        G = mrcnn_backend_cuda_create(0, &why);
        if (!G) return test_gpu_skip(why);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_device_dtype),
        cmocka_unit_test(test_cuda_own_checks),
        cmocka_unit_test(test_right_shapes_run),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mrcnn_backend_destroy(G);
    return rc;
}
