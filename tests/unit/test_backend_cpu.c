/* The CPU backend: every entry wired to the right op (same result as calling the op
 * directly), shape/dtype/device errors, rounded-storage mode, fused SGD and the
 * non-finite scan. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/backend.h"
#include "mrcnn/model.h" // mrcnn_backend_cpu_create
#include "mrcnn/half.h"
#include "mrcnn/layers.h"
#include "test_support.h"
#include "test_util.h"

static mrcnn_tensor trand(int ndim, const int64_t *shape, float lo, float hi, uint64_t seed) {
    mrcnn_tensor t = test_tensor_alloc(MRCNN_DTYPE_F32, ndim, shape);
    test_fill_uniform(t.data, mrcnn_tensor_numel(&t), lo, hi, seed);
    return t;
}
static mrcnn_tensor tzero(int ndim, const int64_t *shape) { return test_tensor_alloc(MRCNN_DTYPE_F32, ndim, shape); }
static mrcnn_tensor tcopy(const mrcnn_tensor *t) {
    mrcnn_tensor c = test_tensor_alloc(t->dtype, t->ndim, t->shape);
    memcpy(c.data, t->data, mrcnn_tensor_nbytes(t));
    return c;
}
static float *fbuf(const mrcnn_tensor *t) { return calloc((size_t)mrcnn_tensor_numel(t), sizeof(float)); }
static void expect_equal(const char *what, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!(a[i] == b[i])) fail_msg("%s: element %lld is %g, expected %g", what, (long long)i, a[i], b[i]);
}
static int is_rounded(const float *x, int64_t n, mrcnn_dtype dt) {
    for (int64_t i = 0; i < n; i++)
        if (mrcnn_round_to(x[i], dt) != x[i]) return 0;
    return 1;
}

static void test_every_entry_set(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    assert_string_equal(be->name, "cpu");
    assert_int_equal(be->device, MRCNN_DEVICE_CPU);
    assert_int_equal(be->storage, MRCNN_DTYPE_F32);
    /* Every function pointer between `name`/`device`/`storage` and `state`. */
    void (**fp)(void) = (void (**)(void)) & be->mem.alloc;
    void (**end)(void) = (void (**)(void)) & be->state;
    for (int i = 0; fp + i < end; i++)
        if (!fp[i]) fail_msg("backend entry %d is NULL", i);
    mrcnn_backend_destroy(be);
}

static void test_memory(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    int64_t shape[2] = {3, 5};
    mrcnn_tensor t = mrcnn_tensor_view(be->mem.alloc(be, 15 * sizeof(float), "test"), MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 2, shape);
    float src[15], back[15];
    for (int i = 0; i < 15; i++) src[i] = (float)i - 7.5f;
    mrcnn_backend_stats z = mrcnn_backend_stats_get(be);
    assert_true(z.reads == 0 && z.syncs == 0 && z.uploads == 0 && z.read_bytes == 0 && z.upload_bytes == 0);
    be->mem.write(be, &t, src);
    be->mem.read(be, &t, back);
    be->mem.sync(be);
    expect_equal("write/read", back, src, 15);
    be->mem.zero(be, &t);
    be->mem.read(be, &t, back);
    for (int i = 0; i < 15; i++) assert_true(back[i] == 0);
    assert_int_equal(be->opt.nonfinite(be, &t), 0);
    /* the host's round trips, in the CUDA backend's terms: 3 reads (2 + nonfinite's
     * flag), each a wait, plus the sync; zero is device-side */
    mrcnn_backend_stats c = mrcnn_backend_stats_get(be);
    assert_int_equal(c.reads, 3);
    assert_int_equal(c.read_bytes, 2 * sizeof src + sizeof(int));
    assert_int_equal(c.syncs, 4);
    assert_int_equal(c.uploads, 1);
    assert_int_equal(c.upload_bytes, sizeof src);
    be->mem.free(be, t.data);
    EXPECT_FAIL(be->set_precision(be, MRCNN_DTYPE_I32), "storage dtype int32 is not fp32, fp16 or bf16");
    mrcnn_backend_destroy(be);
}

static void test_conv_wiring_and_errors(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_conv2d_desc d = mrcnn_conv2d_desc_make(2, 7, 5, 3, 4, 3, 2, 1);
    int64_t xs[4] = {2, 7, 5, 3}, ws[4] = {4, 3, 3, 3}, bs[1] = {4}, ys[4] = {2, 4, 3, 4};
    mrcnn_tensor x = trand(4, xs, -1, 1, 1), w = trand(4, ws, -1, 1, 2), b = trand(1, bs, -1, 1, 3), y = tzero(4, ys);
    mrcnn_tensor dy = trand(4, ys, -1, 1, 4), dx = trand(4, xs, -1, 1, 5), dw = trand(4, ws, -1, 1, 6), db = trand(1, bs, -1, 1, 7);
    int64_t ny = mrcnn_tensor_numel(&y);
    float *ref = fbuf(&y);
    mrcnn_conv2d_forward(&d, x.data, w.data, b.data, ref);
    be->nn.conv2d_forward(be, &d, &x, &w, &b, MRCNN_ACT_NONE, &y);
    expect_equal("conv2d_forward", y.data, ref, ny);
    mrcnn_relu_forward(ny, ref, ref);
    be->nn.conv2d_forward(be, &d, &x, &w, &b, MRCNN_ACT_RELU, &y);
    expect_equal("conv2d_forward + relu", y.data, ref, ny);

    mrcnn_tensor dx2 = tcopy(&dx), dw2 = tcopy(&dw), db2 = tcopy(&db), db3 = tcopy(&db);
    mrcnn_conv2d_backward_data(&d, dy.data, w.data, dx2.data);
    mrcnn_conv2d_backward_filter(&d, x.data, dy.data, dw2.data, db2.data);
    be->nn.conv2d_backward(be, &d, &x, &w, &dy, MRCNN_ACT_NONE, NULL, &dx, MRCNN_GRAD_ADD, &dw, &db);
    expect_equal("conv2d_backward dx", dx.data, dx2.data, mrcnn_tensor_numel(&dx));
    expect_equal("conv2d_backward dw", dw.data, dw2.data, mrcnn_tensor_numel(&dw));
    expect_equal("conv2d_backward db", db.data, db2.data, 4);
    be->nn.conv2d_backward(be, &d, NULL, NULL, &dy, MRCNN_ACT_NONE, NULL, NULL, MRCNN_GRAD_ADD,
                           NULL, &db3); // bias gradient alone
    float *dbr = db3.data, *dbe = db2.data, *db0 = malloc(4 * sizeof(float));
    test_fill_uniform(db0, 4, -1, 1, 7);
    for (int i = 0; i < 4; i++) assert_true(fabsf((dbr[i] - db0[i]) - (dbe[i] - db0[i])) <= 1e-5f);

    /* Shape, dtype and device errors name the argument. */
    int64_t bad_ys[4] = {2, 4, 4, 4};
    mrcnn_tensor ybad = tzero(4, bad_ys);
    EXPECT_FAIL(be->nn.conv2d_forward(be, &d, &x, &w, &b, MRCNN_ACT_NONE, &ybad),
                "conv2d_forward y: shape (2, 4, 4, 4) but expected (2, 4, 3, 4)");
    int64_t bad_ws[4] = {4, 3, 3, 2};
    mrcnn_tensor wbad = tzero(4, bad_ws);
    EXPECT_FAIL(be->nn.conv2d_forward(be, &d, &x, &wbad, NULL, MRCNN_ACT_NONE, &y), "conv2d_forward w: shape (4, 3, 3, 2)");
    EXPECT_FAIL(be->nn.conv2d_backward(be, &d, &x, &w, &dy, MRCNN_ACT_NONE, NULL, &ybad, MRCNN_GRAD_ADD,
                                       NULL, NULL), "conv2d_backward dx: shape");
    mrcnn_tensor xh = test_tensor_alloc(MRCNN_DTYPE_F16, 4, xs);
    EXPECT_FAIL(be->nn.conv2d_forward(be, &d, &xh, &w, &b, MRCNN_ACT_NONE, &y), "conv2d_forward x: dtype fp16 but expected fp32");
    mrcnn_tensor xg = x;
    xg.device = MRCNN_DEVICE_GPU;
    EXPECT_FAIL(be->nn.conv2d_forward(be, &d, &xg, &w, &b, MRCNN_ACT_NONE, &y), "conv2d_forward x: tensor is on the GPU");
    EXPECT_FAIL(be->nn.conv2d_forward(be, &d, &x, &w, &b, (mrcnn_activation)7, &y), "unknown activation 7");
    mrcnn_conv2d_desc dbad = d;
    dbad.k = -4;
    EXPECT_FAIL(be->nn.conv2d_forward(be, &dbad, &x, &w, &b, MRCNN_ACT_NONE, &y), "filter (K, R, S) = (-4, 3, 3)");

    free(ref), free(db0);
    mrcnn_tensor *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db, &dx2, &dw2, &db2, &db3, &ybad, &wbad, &xh};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) test_tensor_free(all[i]);
    mrcnn_backend_destroy(be);
}

static void test_other_ops_wiring(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    /* deconv */
    int64_t xs[4] = {2, 3, 5, 6}, ws[4] = {4, 2, 2, 6}, bs[1] = {4}, ys[4] = {2, 6, 10, 4};
    mrcnn_tensor x = trand(4, xs, -1, 1, 1), w = trand(4, ws, -1, 1, 2), b = trand(1, bs, -1, 1, 3), y = tzero(4, ys);
    mrcnn_tensor dy = trand(4, ys, -1, 1, 4), dx = trand(4, xs, -1, 1, 5), dw = trand(4, ws, -1, 1, 6), db = trand(1, bs, -1, 1, 7);
    float *ref = fbuf(&y);
    mrcnn_deconv2x2_forward(2, 3, 5, 6, 4, x.data, w.data, b.data, ref);
    mrcnn_relu_forward(mrcnn_tensor_numel(&y), ref, ref);
    be->nn.deconv2x2_forward(be, &x, &w, &b, MRCNN_ACT_RELU, &y);
    expect_equal("deconv2x2_forward + relu", y.data, ref, mrcnn_tensor_numel(&y));
    mrcnn_tensor dx2 = tcopy(&dx), dw2 = tcopy(&dw), db2 = tcopy(&db);
    mrcnn_deconv2x2_backward(2, 3, 5, 6, 4, x.data, w.data, dy.data, dx2.data, dw2.data, db2.data);
    be->nn.deconv2x2_backward(be, &x, &w, &dy, MRCNN_ACT_NONE, NULL, &dx, MRCNN_GRAD_ADD, &dw, &db);
    expect_equal("deconv2x2_backward dx", dx.data, dx2.data, mrcnn_tensor_numel(&dx));
    expect_equal("deconv2x2_backward dw", dw.data, dw2.data, mrcnn_tensor_numel(&dw));
    expect_equal("deconv2x2_backward db", db.data, db2.data, 4);
    EXPECT_FAIL(be->nn.deconv2x2_forward(be, &x, &w, &b, MRCNN_ACT_NONE, &dx), "deconv2x2_forward y: shape (2, 3, 5, 6) but expected (2, 6, 10, 4)");

    /* relu, add */
    mrcnn_tensor r = tzero(4, ys), g = trand(4, ys, -1, 1, 8), gr = trand(4, ys, -1, 1, 9), gr2 = tcopy(&gr);
    be->nn.relu_forward(be, &dy, &r);
    mrcnn_relu_forward(mrcnn_tensor_numel(&r), dy.data, ref);
    expect_equal("relu_forward", r.data, ref, mrcnn_tensor_numel(&r));
    be->nn.relu_backward(be, &r, &g, &gr);
    mrcnn_relu_backward(mrcnn_tensor_numel(&r), r.data, g.data, gr2.data);
    expect_equal("relu_backward", gr.data, gr2.data, mrcnn_tensor_numel(&r));
    be->nn.add_forward(be, &dy, &g, MRCNN_ACT_NONE, &r);
    mrcnn_add_forward(mrcnn_tensor_numel(&r), dy.data, g.data, ref);
    expect_equal("add_forward", r.data, ref, mrcnn_tensor_numel(&r));
    mrcnn_tensor da = tcopy(&gr), da2 = tcopy(&gr);
    be->nn.add_backward(be, &g, &da, NULL);
    mrcnn_add_backward(mrcnn_tensor_numel(&r), g.data, da2.data, NULL);
    expect_equal("add_backward", da.data, da2.data, mrcnn_tensor_numel(&r));
    EXPECT_FAIL(be->nn.add_forward(be, &dy, &x, MRCNN_ACT_NONE, &r), "add_forward b: shape (2, 3, 5, 6) but expected (2, 6, 10, 4)");

    /* maxpool */
    mrcnn_pool2d_desc pd = {2, 6, 10, 4, 3, 2, 1};
    int64_t ps[4] = {2, 3, 5, 4};
    mrcnn_tensor p = tzero(4, ps), pdy = trand(4, ps, -1, 1, 10), pdx = trand(4, ys, -1, 1, 11), pdx2 = tcopy(&pdx);
    be->nn.maxpool2d_forward(be, &pd, &dy, &p);
    mrcnn_maxpool2d_forward(&pd, dy.data, ref);
    expect_equal("maxpool2d_forward", p.data, ref, mrcnn_tensor_numel(&p));
    be->nn.maxpool2d_backward(be, &pd, &dy, &pdy, &pdx);
    mrcnn_maxpool2d_backward(&pd, dy.data, pdy.data, pdx2.data);
    expect_equal("maxpool2d_backward", pdx.data, pdx2.data, mrcnn_tensor_numel(&pdx));
    EXPECT_FAIL(be->nn.maxpool2d_forward(be, &pd, &dy, &x), "maxpool2d_forward y: shape");

    /* upsample + add: top (2, 3, 5, 4) into (2, 6, 10, 4) */
    mrcnn_tensor u = tzero(4, ys), dt = trand(4, ps, -1, 1, 12), dt2 = tcopy(&dt), dl = trand(4, ys, -1, 1, 13), dl2 = tcopy(&dl);
    be->nn.upsample_add_forward(be, &pdy, &g, &u);
    mrcnn_upsample_add_forward(2, 3, 5, 6, 10, 4, pdy.data, g.data, ref);
    expect_equal("upsample_add_forward", u.data, ref, mrcnn_tensor_numel(&u));
    be->nn.upsample_add_backward(be, &g, &dt, &dl);
    mrcnn_upsample_add_backward(2, 3, 5, 6, 10, 4, g.data, dt2.data, dl2.data);
    expect_equal("upsample_add_backward dtop", dt.data, dt2.data, mrcnn_tensor_numel(&dt));
    expect_equal("upsample_add_backward dlateral", dl.data, dl2.data, mrcnn_tensor_numel(&dl));
    EXPECT_FAIL(be->nn.upsample_add_forward(be, &x, &g, &u), "upsample_add_forward top: shape (2, 3, 5, 6) but expected (2, -1, -1, 4)");

    /* linear over a flattened (N, 3, 5, 6) block */
    int64_t lws[2] = {7, 90}, lbs[1] = {7}, lys[2] = {2, 7};
    mrcnn_tensor lw = trand(2, lws, -1, 1, 14), lb = trand(1, lbs, -1, 1, 15), ly = tzero(2, lys), ldy = trand(2, lys, -1, 1, 16);
    mrcnn_tensor ldx = trand(4, xs, -1, 1, 17), ldw = trand(2, lws, -1, 1, 18), ldb = trand(1, lbs, -1, 1, 19);
    mrcnn_tensor ldx2 = tcopy(&ldx), ldw2 = tcopy(&ldw), ldb2 = tcopy(&ldb);
    be->nn.linear_forward(be, &x, &lw, &lb, MRCNN_ACT_NONE, &ly);
    mrcnn_linear_forward(2, 90, 7, x.data, lw.data, lb.data, ref);
    expect_equal("linear_forward", ly.data, ref, 14);
    be->nn.linear_backward(be, &x, &lw, &ldy, MRCNN_ACT_NONE, NULL, &ldx, MRCNN_GRAD_ADD, &ldw, &ldb);
    mrcnn_linear_backward(2, 90, 7, x.data, lw.data, ldy.data, ldx2.data, ldw2.data, ldb2.data);
    expect_equal("linear_backward dx", ldx.data, ldx2.data, 180);
    expect_equal("linear_backward dw", ldw.data, ldw2.data, 630);
    expect_equal("linear_backward db", ldb.data, ldb2.data, 7);
    int64_t bad_lws[2] = {7, 91};
    mrcnn_tensor lwbad = tzero(2, bad_lws);
    EXPECT_FAIL(be->nn.linear_forward(be, &x, &lwbad, NULL, MRCNN_ACT_NONE, &ly), "linear_forward w: shape (7, 91) but expected (-1, 90)");

    free(ref);
    mrcnn_tensor *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db, &dx2, &dw2, &db2, &r, &g, &gr, &gr2, &da, &da2, &p, &pdy,
                           &pdx, &pdx2, &u, &dt, &dt2, &dl, &dl2, &lw, &lb, &ly, &ldy, &ldx, &ldw, &ldb, &ldx2, &ldw2, &ldb2, &lwbad};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) test_tensor_free(all[i]);
    mrcnn_backend_destroy(be);
}

#define NORM(v) (&(mrcnn_loss_norm){.count = NULL, .scale = (v), .grad_mult = 1.0f})

static void test_losses(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    int64_t s[2] = {9, 5}, one[1] = {1}, ls[1] = {9};
    mrcnn_tensor x = trand(2, s, -3, 3, 1), t = trand(2, s, 0, 1, 2), wt = trand(2, s, 0, 2, 3), loss = tzero(1, one);
    mrcnn_tensor dx = trand(2, s, -1, 1, 4), dx2 = tcopy(&dx);
    be->loss.bce_logits(be, &x, &t, &wt, NORM(4.0f), &loss, &dx);
    float ref = mrcnn_bce_logits_forward(45, x.data, t.data, wt.data, 4.0f);
    mrcnn_bce_logits_backward(45, x.data, t.data, wt.data, 4.0f, 1.0f, dx2.data);
    assert_true(((float *)loss.data)[0] == ref);
    expect_equal("bce_logits dx", dx.data, dx2.data, 45);

    be->loss.smooth_l1(be, &x, &t, NULL, 1.0f / 9, NORM(3.0f), &loss, &dx);
    mrcnn_smooth_l1_backward(45, x.data, t.data, NULL, 1.0f / 9, 3.0f, 1.0f, dx2.data);
    assert_true(((float *)loss.data)[0] == mrcnn_smooth_l1_forward(45, x.data, t.data, NULL, 1.0f / 9, 3.0f));
    expect_equal("smooth_l1 dx", dx.data, dx2.data, 45);

    mrcnn_tensor lab = test_tensor_alloc(MRCNN_DTYPE_I32, 1, ls);
    int32_t lv[9] = {0, 4, -1, 2, 3, -1, 1, 4, 0};
    memcpy(lab.data, lv, sizeof lv);
    be->loss.softmax_ce(be, &x, &lab, NORM(7.0f), &loss, &dx);
    mrcnn_softmax_ce_backward(9, 5, x.data, lv, 7.0f, 1.0f, dx2.data);
    assert_true(((float *)loss.data)[0] == mrcnn_softmax_ce_forward(9, 5, x.data, lv, 7.0f));
    expect_equal("softmax_ce dx", dx.data, dx2.data, 45);

    /* A device count: normalizer max(count, 1) * scale, gradients times grad_mult only. */
    mrcnn_tensor cnt = tzero(1, one);
    ((float *)cnt.data)[0] = 2.5f;
    mrcnn_tensor gs = tzero(1, one); // the device-held part of the multiplier (fp16 loss scale)
    ((float *)gs.data)[0] = 2.0f;
    be->loss.bce_logits(be, &x, &t, &wt, &(mrcnn_loss_norm){.count = &cnt, .scale = 4.0f, .grad_mult = 4.0f, .grad_scale = &gs},
                   &loss, &dx);
    mrcnn_bce_logits_backward(45, x.data, t.data, wt.data, 10.0f, 8.0f, dx2.data);
    assert_true(((float *)loss.data)[0] == mrcnn_bce_logits_forward(45, x.data, t.data, wt.data, 10.0f));
    expect_equal("bce_logits dx (count)", dx.data, dx2.data, 45);
    ((float *)cnt.data)[0] = 0.0f; // no sample: the normalizer is the scale alone
    be->loss.bce_logits(be, &x, &t, &wt, &(mrcnn_loss_norm){.count = &cnt, .scale = 4.0f, .grad_mult = 1.0f}, &loss, NULL);
    assert_true(((float *)loss.data)[0] == mrcnn_bce_logits_forward(45, x.data, t.data, wt.data, 4.0f));

    EXPECT_FAIL(be->loss.softmax_ce(be, &x, &t, NORM(7.0f), &loss, NULL), "softmax_ce labels: dtype fp32 but expected int32");
    int64_t s2[2] = {9, 6};
    mrcnn_tensor t6 = tzero(2, s2);
    EXPECT_FAIL(be->loss.bce_logits(be, &x, &t6, NULL, NORM(1.0f), &loss, NULL), "bce_logits targets: 54 elements but the logits have 45");
    EXPECT_FAIL(be->loss.smooth_l1(be, &x, &t, NULL, 0.1f, NORM(1.0f), &x, NULL), "loss tensor must hold 1 element, has 45");
    EXPECT_FAIL(be->loss.smooth_l1(be, &x, &t, NULL, 0.1f, NORM(0.0f), &loss, NULL), "the loss normalizer needs a positive scale");
    EXPECT_FAIL(be->loss.bce_logits(be, &x, &t, NULL, &(mrcnn_loss_norm){.count = &t, .scale = 1.0f}, &loss, NULL),
                "the normalizer count must hold 1 element, has 45");
    mrcnn_tensor *all[] = {&x, &t, &wt, &loss, &dx, &dx2, &lab, &t6, &cnt, &gs};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) test_tensor_free(all[i]);
    mrcnn_backend_destroy(be);
}

/* Rounded storage: every activation and gradient an op writes is exactly
 * representable in the storage dtype, and close to the fp32 result. */
static void test_rounded_storage(void **state) {
    const mrcnn_dtype dts[2] = {MRCNN_DTYPE_BF16, MRCNN_DTYPE_F16};
    const double tol[2] = {1e-2, 2e-3};
    for (int k = 0; k < 2; k++) {
        mrcnn_backend *be = mrcnn_backend_cpu_create(), *ref = mrcnn_backend_cpu_create();
        be->set_precision(be, dts[k]);
        assert_int_equal(be->storage, dts[k]);
        assert_int_equal(ref->storage, MRCNN_DTYPE_F32); // instances are independent
        mrcnn_conv2d_desc d = mrcnn_conv2d_desc_make(2, 9, 7, 5, 6, 3, 1, 1);
        int64_t xs[4] = {2, 9, 7, 5}, ws[4] = {6, 3, 3, 5}, bs[1] = {6}, ys[4] = {2, 9, 7, 6};
        mrcnn_tensor x = trand(4, xs, -1, 1, 1), w = trand(4, ws, -1, 1, 2), b = trand(1, bs, -1, 1, 3);
        mrcnn_tensor y = tzero(4, ys), y32 = tzero(4, ys), dy = trand(4, ys, -1, 1, 4);
        mrcnn_tensor dx = tzero(4, xs), dw = tzero(4, ws), db = tzero(1, bs);
        mrcnn_tensor dx32 = tzero(4, xs), dw32 = tzero(4, ws), db32 = tzero(1, bs);
        be->nn.conv2d_forward(be, &d, &x, &w, &b, MRCNN_ACT_NONE, &y);
        ref->nn.conv2d_forward(ref, &d, &x, &w, &b, MRCNN_ACT_NONE, &y32);
        be->nn.conv2d_backward(be, &d, &x, &w, &dy, MRCNN_ACT_NONE, NULL, &dx, MRCNN_GRAD_ADD, &dw, &db);
        ref->nn.conv2d_backward(ref, &d, &x, &w, &dy, MRCNN_ACT_NONE, NULL, &dx32, MRCNN_GRAD_ADD, &dw32, &db32);
        const char *nm = mrcnn_dtype_name(dts[k]);
        assert_false(is_rounded(y32.data, mrcnn_tensor_numel(&y32), dts[k])); // else the check below proves nothing
        struct { const char *what; mrcnn_tensor *a, *b; } outs[4] = {{"y", &y, &y32}, {"dx", &dx, &dx32}, {"dw", &dw, &dw32}, {"db", &db, &db32}};
        for (int i = 0; i < 4; i++) {
            int64_t n = mrcnn_tensor_numel(outs[i].a);
            if (!is_rounded(outs[i].a->data, n, dts[k])) fail_msg("%s storage: conv2d %s not rounded", nm, outs[i].what);
            double e = test_max_rel_err(outs[i].a->data, outs[i].b->data, n);
            printf("  %s storage: conv2d %-2s vs fp32 max|a-b|/max|b| = %.2e\n", nm, outs[i].what, e);
            assert_true(e > 0 && e <= tol[k]);
        }
        /* The loss scalar stays fp32; its gradient is rounded. */
        int64_t one[1] = {1};
        mrcnn_tensor loss = tzero(1, one), ldx = tzero(4, ys);
        be->loss.bce_logits(be, &y32, &dy, NULL, NORM(3.0f), &loss, &ldx);
        assert_true(((float *)loss.data)[0] == mrcnn_bce_logits_forward(mrcnn_tensor_numel(&y32), y32.data, dy.data, NULL, 3.0f));
        assert_true(is_rounded(ldx.data, mrcnn_tensor_numel(&ldx), dts[k]));
        mrcnn_tensor *all[] = {&x, &w, &b, &y, &y32, &dy, &dx, &dw, &db, &dx32, &dw32, &db32, &loss, &ldx};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) test_tensor_free(all[i]);
        mrcnn_backend_destroy(be);
        mrcnn_backend_destroy(ref);
    }
}

/* add_forward with act = RELU (the bottleneck's residual join) against add_forward then
 * relu_forward, bit for bit (memcmp: -0 vs +0 and NaN payloads count), at fp32 and in
 * both rounded-storage modes, out of place and in place (y = a, as resnet.c calls it).
 * The edge values: signed zeros, Inf, NaN, sums that round to zero or across a rounding
 * boundary. */
static void test_add_relu_fused(void **state) {
    const mrcnn_dtype dts[3] = {MRCNN_DTYPE_F32, MRCNN_DTYPE_BF16, MRCNN_DTYPE_F16};
    const int64_t n = 70000; // above the ops' OpenMP threshold: the threaded loop runs too
    int64_t shape[1] = {n};
    const float edge_a[] = {0.0f, -0.0f, -0.0f, 1e-30f, -1e-30f, INFINITY, -INFINITY, NAN, 1.0f, 3e-8f, -3e-8f, 1.00390625f};
    const float edge_b[] = {-0.0f, -0.0f, 0.0f, -2e-30f, 2e-30f, 1.0f, 1.0f, 1.0f, -1.0f, -1e-8f, 1e-8f, 0.001953125f};
    const int n_edge = (int)(sizeof edge_a / sizeof *edge_a);
    for (int k = 0; k < 3; k++) {
        mrcnn_backend *be = mrcnn_backend_cpu_create();
        be->set_precision(be, dts[k]);
        mrcnn_tensor a = trand(1, shape, -1, 1, 21), b = trand(1, shape, -1, 1, 22);
        for (int i = 0; i < n_edge; i++) ((float *)a.data)[i] = edge_a[i], ((float *)b.data)[i] = edge_b[i];
        mrcnn_tensor ref = tzero(1, shape), y = tzero(1, shape), yin = tcopy(&a);
        be->nn.add_forward(be, &a, &b, MRCNN_ACT_NONE, &ref);
        be->nn.relu_forward(be, &ref, &ref);
        be->nn.add_forward(be, &a, &b, MRCNN_ACT_RELU, &y);
        be->nn.add_forward(be, &yin, &b, MRCNN_ACT_RELU, &yin);
        const char *nm = mrcnn_dtype_name(dts[k]);
        for (int64_t i = 0; i < n; i++) {
            const float *r = ref.data, *f = y.data, *g = yin.data;
            if (memcmp(&r[i], &f[i], sizeof(float)) || memcmp(&r[i], &g[i], sizeof(float)))
                fail_msg("%s storage: add+relu element %lld (a %g, b %g): fused %g, in place %g, add then relu %g", nm,
                         (long long)i, ((float *)a.data)[i], ((float *)b.data)[i], f[i], g[i], r[i]);
        }
        /* The values above hit what they are meant to: a NaN kept, a -0 kept. */
        assert_true(isnan(((float *)y.data)[7]));
        assert_true(signbit(((float *)y.data)[1]) && ((float *)y.data)[1] == 0.0f);
        for (int64_t i = 0; i < n && dts[k] != MRCNN_DTYPE_F32; i++) { // NaN != NaN: skip it
            const float v = ((float *)y.data)[i];
            if (!isnan(v) && mrcnn_round_to(v, dts[k]) != v) fail_msg("%s storage: add+relu %lld not rounded", nm, (long long)i);
        }
        EXPECT_FAIL(be->nn.add_forward(be, &a, &b, (mrcnn_activation)7, &y), "add_forward: unknown activation 7");
        mrcnn_tensor *all[] = {&a, &b, &ref, &y, &yin};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) test_tensor_free(all[i]);
        mrcnn_backend_destroy(be);
    }
}

/* The workspace: mrcnn_ws_tensor zeroes (buffers ops add into); the _uninit forms leave
 * the buffer to the op that overwrites it, and on the CPU poison it with all-ones bytes
 * (NaN in fp32) so a read before the write shows. */
static void test_ws_poison(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_ws ws;
    mrcnn_ws_init(&ws, be);
    int64_t shape[2] = {37, 5};
    for (int round = 0; round < 2; round++) { // the second round reuses freed memory
        mrcnn_tensor u = mrcnn_ws_act_uninit(&ws, 2, shape);
        mrcnn_tensor u32 = mrcnn_ws_tensor_uninit(&ws, MRCNN_DTYPE_F32, 2, shape);
        mrcnn_tensor z = mrcnn_ws_act(&ws, 2, shape);
        mrcnn_tensor zl = mrcnn_ws_like(&ws, &u);
        assert_int_equal(u.dtype, MRCNN_DTYPE_F32);
        const unsigned char *pu = u.data, *pu32 = u32.data;
        for (size_t i = 0; i < mrcnn_tensor_nbytes(&u); i++)
            if (pu[i] != 0xff || pu32[i] != 0xff) fail_msg("uninit byte %zu is not the all-ones poison", i);
        assert_true(isnan(((float *)u.data)[0]));
        for (int64_t i = 0; i < 37 * 5; i++)
            if (((float *)z.data)[i] != 0.0f || ((float *)zl.data)[i] != 0.0f) fail_msg("zeroed element %lld", (long long)i);
        /* An op that overwrites its output whole leaves no poison behind. */
        mrcnn_tensor x = mrcnn_ws_act(&ws, 2, shape);
        be->nn.add_forward(be, &z, &x, MRCNN_ACT_RELU, &u);
        for (int64_t i = 0; i < 37 * 5; i++) assert_true(((float *)u.data)[i] == 0.0f);
        for (int i = 0; i < 2; i++) memset(i ? z.data : zl.data, 0x5a, mrcnn_tensor_nbytes(&z));
        mrcnn_ws_reset(&ws);
    }
    mrcnn_ws_free(&ws);
    mrcnn_backend_destroy(be);
}

static void test_sgd_and_nonfinite(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    be->set_precision(be, MRCNN_DTYPE_BF16); // master weights must not be rounded
    int64_t s[1] = {1001};
    mrcnn_tensor p = trand(1, s, -1, 1, 1), g = trand(1, s, -1, 1, 2), v = tzero(1, s), mask = trand(1, s, 0, 1, 3);
    float *mk = mask.data;
    for (int i = 0; i < 1001; i++) mk[i] = mk[i] < 0.3f ? 0.0f : 1.0f;
    for (int use_mask = 0; use_mask < 2; use_mask++) {
        double pr[1001], vr[1001];
        for (int i = 0; i < 1001; i++) pr[i] = ((float *)p.data)[i], vr[i] = ((float *)v.data)[i];
        for (int step = 0; step < 3; step++) {
            be->opt.sgd_update(be, &p, &g, &v, use_mask ? &mask : NULL, 0.02f, 0.9f, 1e-2f, 0.5f);
            for (int i = 0; i < 1001; i++) {
                double gi = 0.5 * ((float *)g.data)[i] + 1e-2 * (use_mask ? mk[i] : 1.0) * pr[i];
                vr[i] = 0.9 * vr[i] + gi;
                pr[i] -= 0.02 * vr[i];
            }
        }
        double ep = 0, ev = 0;
        for (int i = 0; i < 1001; i++) {
            ep = fmax(ep, fabs(((float *)p.data)[i] - pr[i]));
            ev = fmax(ev, fabs(((float *)v.data)[i] - vr[i]));
        }
        printf("  sgd_update%s: max|p-ref| = %.2e, max|v-ref| = %.2e\n", use_mask ? " (decay mask)" : "", ep, ev);
        assert_true(ep < 1e-6 && ev < 1e-5);
    }
    assert_false(is_rounded(p.data, 1001, MRCNN_DTYPE_BF16));
    int64_t s3[1] = {7};
    mrcnn_tensor gbad = tzero(1, s3);
    EXPECT_FAIL(be->opt.sgd_update(be, &p, &gbad, &v, NULL, 0.1f, 0.9f, 0, 1), "sgd_update grads: 7 elements");

    assert_int_equal(be->opt.nonfinite(be, &g), 0);
    ((float *)g.data)[777] = NAN;
    assert_int_equal(be->opt.nonfinite(be, &g), 1);
    ((float *)g.data)[777] = -INFINITY;
    assert_int_equal(be->opt.nonfinite(be, &g), 1);
    int64_t big[1] = {200000};
    mrcnn_tensor gb = tzero(1, big); // the parallel path
    assert_int_equal(be->opt.nonfinite(be, &gb), 0);
    ((float *)gb.data)[199999] = INFINITY;
    assert_int_equal(be->opt.nonfinite(be, &gb), 1);
    mrcnn_tensor *all[] = {&p, &g, &v, &mask, &gbad, &gb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) test_tensor_free(all[i]);
    mrcnn_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_entry_set),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_conv_wiring_and_errors),
        cmocka_unit_test(test_other_ops_wiring),
        cmocka_unit_test(test_losses),
        cmocka_unit_test(test_rounded_storage),
        cmocka_unit_test(test_add_relu_fused),
        cmocka_unit_test(test_ws_poison),
        cmocka_unit_test(test_sgd_and_nonfinite),
    };
    return cmocka_run_group_tests_name("backend_cpu", tests, NULL, NULL);
}
