/* Tensor-core shapes on the CPU backend: the mask logits computed with their output
 * channels padded to a multiple of the model's pad_align (zero filters, a step-scoped
 * padded copy of the weights; the parameters keep their shapes).
 *
 * Bit-identity with the unpadded layer holds on OpenBLAS's Sandybridge kernels but not
 * on its Haswell and Zen ones: with 91 output channels the last ones fall in the
 * kernel's edge path, which sums the 256 products in another order than a full tile
 * (the forward's channels 88-90 differ in the last bits; 96 channels have no edge).
 * So the CPU backend leaves the layer unpadded (pad_align 1, the default) and a GPU
 * backend pads it (8); these tests drive the flag on the CPU and check what holds on
 * every kernel:
 *   - the layer alone at the R50 shapes (91 classes from 256 channels; forward, and a
 *     backward adding into nonzero gradients): the padding channels are exactly zero,
 *     and every value is within the rounding bound of a reordered sum of the same
 *     products, 2 g_n sum|terms| (g_n = n u / (1 - n u), u = 2^-24), per element;
 *   - the tiny model's training step over two accumulated micro-batches: the RPN and
 *     box losses and the box head's gradients, which the mask logits do not reach, are
 *     bit-identical; the mask loss and every gradient within test_net_train's
 *     padded-heads bounds (the same products summed in another order); inference's
 *     boxes, scores and labels bit-identical and its masks within 1e-5.
 * Whether each tensor came out bit-identical is printed (the evidence for the above). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/model.h"
#include "test_model.h"
#include "test_scene.h"
#include "test_util.h"

/* ---- the layer alone ---------------------------------------------------------- */

enum { LR = 8, LM = 28, LC = 256, LK = 91, LROWS = LR * LM * LM };

/* Inputs of the layer test, made once on the host. */
typedef struct {
    float *x;        // (LROWS, LC) ReLU features, exact zeros among them
    float *dy;       // (LROWS, LK) the real channels' output gradient
    float *dx0;      // (LROWS, LC) what dx holds before the backward adds into it
    float *b, *g0, *gb0; // (LK) bias; (LK, LC), (LK) the gradients before the backward
} layer_in;

typedef struct {
    float *w;       // (LK, LC) the layer's weight (the model's random init)
    float *y;       // (LROWS, LK) the first LK channels of the output
    float *dx;      // (LROWS, LC)
    float *dw, *db; // (LK, LC), (LK) gradients after the backward
    int64_t pad_nonzero; // padding-channel outputs that are not exactly zero (NaN included)
} layer_out;

static void layer_in_make(layer_in *in) {
    in->x = malloc(sizeof(float) * LROWS * LC);
    in->dy = malloc(sizeof(float) * LROWS * LK);
    in->dx0 = malloc(sizeof(float) * LROWS * LC);
    in->b = malloc(sizeof(float) * LK);
    in->g0 = malloc(sizeof(float) * LK * LC);
    in->gb0 = malloc(sizeof(float) * LK);
    test_fill_uniform(in->x, (int64_t)LROWS * LC, -1.0f, 1.0f, 24);
    for (int64_t i = 0; i < (int64_t)LROWS * LC; i++) in->x[i] = in->x[i] < 0 ? 0 : in->x[i];
    test_fill_uniform(in->dy, (int64_t)LROWS * LK, -1e-2f, 1e-2f, 25);
    test_fill_uniform(in->dx0, (int64_t)LROWS * LC, -1e-3f, 1e-3f, 26);
    test_fill_uniform(in->b, LK, -0.5f, 0.5f, 21);
    test_fill_uniform(in->g0, (int64_t)LK * LC, -1.0f, 1.0f, 22);
    test_fill_uniform(in->gb0, LK, -1.0f, 1.0f, 23);
}

static void layer_in_free(layer_in *in) {
    free(in->x), free(in->dy), free(in->dx0), free(in->b), free(in->g0), free(in->gb0);
}

/* The R50 mask predictor's 1x1 conv (256 -> 91 channels) on LR rows of 28x28
 * features, padded to `align`. */
static void run_layer(int align, const layer_in *in, layer_out *o) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    cfg.roi_num_classes = LK - 1;
    cfg.mask_head_conv_dim = LC;
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_model m;
    mrcnn_model_init(&m, &cfg, be);
    mrcnn_model_init_random(&m, 11);
    m.pad_align = align;
    const mrcnn_conv_layer *l = &m.mask.logits;
    const int Kp = mrcnn_conv_layer_out_channels(&m, l);
    assert_int_equal(l->cout, LK);
    assert_int_equal(Kp, align > 1 ? (LK + align - 1) / align * align : LK);
    mrcnn_ws ws;
    mrcnn_ws_init(&ws, be);
    mrcnn_tensor *w = mrcnn_arena_get(&m.params.values, l->w);
    o->w = malloc(sizeof(float) * LK * LC);
    be->mem.read(be, w, o->w);
    be->mem.write(be, mrcnn_arena_get(&m.params.values, l->b), in->b);
    be->mem.write(be, mrcnn_arena_get(&m.params.grads, l->w), in->g0);
    be->mem.write(be, mrcnn_arena_get(&m.params.grads, l->b), in->gb0);
    mrcnn_tensor x = mrcnn_ws_tensor(&ws, MRCNN_DTYPE_F32, 4, (int64_t[]){LR, LM, LM, LC});
    be->mem.write(be, &x, in->x);
    mrcnn_tensor y = mrcnn_conv_layer_forward(&m, &ws, l, &x, MRCNN_ACT_NONE);
    assert_int_equal(y.shape[3], Kp);
    float *yp = malloc(sizeof(float) * (size_t)LROWS * Kp);
    be->mem.read(be, &y, yp);
    o->y = malloc(sizeof(float) * LROWS * LK);
    o->pad_nonzero = 0;
    for (int64_t i = 0; i < LROWS; i++) {
        memcpy(o->y + i * LK, yp + i * Kp, sizeof(float) * LK);
        for (int k = LK; k < Kp; k++) o->pad_nonzero += !(yp[i * Kp + k] == 0);
    }
    // dy on the real channels only, as gather_class_masks_backward writes it
    float *g = calloc((size_t)LROWS * Kp, sizeof(float));
    for (int64_t i = 0; i < LROWS; i++) memcpy(g + i * Kp, in->dy + i * LK, sizeof(float) * LK);
    mrcnn_tensor dy = mrcnn_ws_like(&ws, &y);
    be->mem.write(be, &dy, g);
    mrcnn_tensor dx = mrcnn_ws_like(&ws, &x);
    be->mem.write(be, &dx, in->dx0);
    mrcnn_conv_layer_backward(&m, &ws, l, &x, NULL, MRCNN_ACT_NONE, &dy, &dx, MRCNN_GRAD_ADD);
    o->dx = malloc(sizeof(float) * LROWS * LC);
    be->mem.read(be, &dx, o->dx);
    const mrcnn_tensor *dw = mrcnn_arena_get(&m.params.grads, l->w), *db = mrcnn_arena_get(&m.params.grads, l->b);
    assert_int_equal(dw->shape[0], LK); // the parameters keep the users' shapes
    o->dw = malloc(sizeof(float) * LK * LC);
    o->db = malloc(sizeof(float) * LK);
    be->mem.read(be, dw, o->dw);
    be->mem.read(be, db, o->db);
    free(g);
    free(yp);
    mrcnn_ws_free(&ws);
    mrcnn_model_free(&m);
    mrcnn_backend_destroy(be);
}

static void layer_out_free(layer_out *o) {
    free(o->w), free(o->y), free(o->dx), free(o->dw), free(o->db);
}

/* 2 g_n: the most two orders of summing n terms can differ by, per unit of sum|terms|. */
static double reorder_bound(int64_t n) {
    const double u = 0x1p-24, g = (double)n * u;
    return 2 * g / (1 - g);
}

/* How many of a[i], b[i] differ by more than tol * s[i] (s: sum|terms| of element i);
 * *bits: whether all are bit-identical. */
static int64_t over_bound(const float *a, const float *b, const double *s, int64_t n, double tol, bool *bits) {
    int64_t bad = 0;
    *bits = memcmp(a, b, sizeof(float) * (size_t)n) == 0;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)a[i] - (double)b[i]) <= tol * s[i])) bad++; // NaN counts
    return bad;
}

static void test_layer(void **state) {
    (void)state;
    layer_in in;
    layer_in_make(&in);
    layer_out ref, pad;
    run_layer(1, &in, &ref);
    const float *w = ref.w;
    // sum|terms| of every output: y, dx, dw, db
    double *sy = calloc((size_t)LROWS * LK, sizeof(double)), *sx = calloc((size_t)LROWS * LC, sizeof(double));
    double *sw = calloc((size_t)LK * LC, sizeof(double)), *sb = calloc(LK, sizeof(double));
    for (int64_t i = 0; i < LROWS; i++) {
        const float *xi = in.x + i * LC, *gi = in.dy + i * LK;
        for (int k = 0; k < LK; k++) {
            double t = fabs(in.b[k]);
            for (int c = 0; c < LC; c++) t += fabs((double)xi[c] * w[k * LC + c]);
            sy[i * LK + k] = t;
            sb[k] += fabs(gi[k]);
            for (int c = 0; c < LC; c++) {
                sx[i * LC + c] += fabs((double)gi[k] * w[k * LC + c]);
                sw[k * LC + c] += fabs((double)gi[k] * xi[c]);
            }
        }
    }
    for (int64_t i = 0; i < (int64_t)LROWS * LC; i++) sx[i] += fabs(in.dx0[i]);
    for (int64_t i = 0; i < (int64_t)LK * LC; i++) sw[i] += fabs(in.g0[i]);
    for (int k = 0; k < LK; k++) sb[k] += fabs(in.gb0[k]);
    const int aligns[] = {8, 4};
    for (int a = 0; a < 2; a++) {
        run_layer(aligns[a], &in, &pad);
        bool by, bx, bw, bb;
        int64_t ny = over_bound(pad.y, ref.y, sy, (int64_t)LROWS * LK, reorder_bound(LC + 1), &by);
        int64_t nx = over_bound(pad.dx, ref.dx, sx, (int64_t)LROWS * LC, reorder_bound(LK + 1), &bx);
        int64_t nw = over_bound(pad.dw, ref.dw, sw, (int64_t)LK * LC, reorder_bound(LROWS + 1), &bw);
        int64_t nb = over_bound(pad.db, ref.db, sb, LK, reorder_bound(LROWS + 1), &bb);
        printf("  pad_align %d: nonzero padding logits %lld; bit-identical: y %s, dx %s, dw %s, db %s; "
               "over the bound: %lld %lld %lld %lld\n",
               aligns[a], (long long)pad.pad_nonzero, by ? "yes" : "no", bx ? "yes" : "no", bw ? "yes" : "no", bb ? "yes" : "no",
               (long long)ny, (long long)nx, (long long)nw, (long long)nb);
        assert_true(pad.pad_nonzero == 0);
        assert_true(ny == 0 && nx == 0 && nw == 0 && nb == 0);
        layer_out_free(&pad);
    }
    free(sy), free(sx), free(sw), free(sb);
    layer_out_free(&ref);
    layer_in_free(&in);
}

/* ---- the tiny model ----------------------------------------------------------- */

typedef struct {
    mrcnn_losses losses[2];
    float *grads;    // every gradient after two micro-batches
    size_t bytes;
    float *box_grads; // the box head's gradients, in its parameters' order
    int64_t n_box;
    mrcnn_detections det;
    int mask_k;      // channels of the mask logits in the step
} model_out;

static void run_model(int align, const test_batch *s, model_out *o) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_model m;
    mrcnn_model_init(&m, &cfg, be);
    mrcnn_model_init_random(&m, 5);
    m.pad_align = align;
    // the mask logits alone padded: the stem's, the RPN's and the box predictors' padding
    // (test_pad_shapes) would change the features, proposals and box terms
    m.resnet.stem.pad_in = m.rpn.cls.pad_out = m.rpn.bbox.pad_out = m.box.pad_out = false;
    mrcnn_ws ws;
    mrcnn_ws_init(&ws, be);
    mrcnn_model_zero_grads(&m);
    const int H = TEST_BATCH_H, W = TEST_BATCH_W;
    for (int k = 0; k < 2; k++) {
        // the second micro-batch swaps neighbouring pixels: other features and ROIs,
        // added into the first one's gradients
        float *img = malloc(sizeof s->images);
        for (int64_t i = 0; i < (int64_t)TEST_BATCH_N * H * W; i++)
            for (int c = 0; c < 3; c++) img[i * 3 + c] = s->images[(k ? i ^ 1 : i) * 3 + c];
        mrcnn_batch b = {.image_hw = s->hw, .gt = s->gt};
        b.images = mrcnn_ws_tensor(&ws, MRCNN_DTYPE_F32, 4, (int64_t[]){TEST_BATCH_N, H, W, 3});
        be->mem.write(be, &b.images, img);
        free(img);
        mrcnn_pass st;
        mrcnn_model_train_step(&m, &ws, &b, true, &st);
        mrcnn_model_read_losses(&m, &st, &o->losses[k]);
        o->mask_k = (int)st.mask.logits.shape[3];
        mrcnn_pass_free(&st);
        mrcnn_ws_reset(&ws);
    }
    o->bytes = m.params.grads.size;
    o->grads = malloc(o->bytes);
    int64_t ne = (int64_t)(o->bytes / sizeof(float));
    mrcnn_tensor all = mrcnn_tensor_view(m.params.grads.base, MRCNN_DTYPE_F32, be->device, 1, &ne);
    be->mem.read(be, &all, o->grads);
    const mrcnn_box_head *h = &m.box;
    const int box[8] = {h->fc6_w, h->fc6_b, h->fc7_w, h->fc7_b, h->cls_w, h->cls_b, h->bbox_w, h->bbox_b};
    o->n_box = 0;
    for (int i = 0; i < 8; i++) o->n_box += mrcnn_tensor_numel(mrcnn_arena_get(&m.params.grads, box[i]));
    o->box_grads = malloc(sizeof(float) * (size_t)o->n_box);
    for (int i = 0, at = 0; i < 8; i++) {
        const mrcnn_tensor *t = mrcnn_arena_get(&m.params.grads, box[i]);
        be->mem.read(be, t, o->box_grads + at);
        at += (int)mrcnn_tensor_numel(t);
    }
    mrcnn_batch b = {.image_hw = s->hw, .gt = s->gt};
    b.images = mrcnn_ws_tensor(&ws, MRCNN_DTYPE_F32, 4, (int64_t[]){TEST_BATCH_N, H, W, 3});
    be->mem.write(be, &b.images, s->images);
    mrcnn_pass st;
    mrcnn_model_predict(&m, &ws, &b, &st, &o->det);
    mrcnn_pass_free(&st);
    mrcnn_ws_free(&ws);
    mrcnn_model_free(&m);
    mrcnn_backend_destroy(be);
}

static void test_model(void **state) {
    (void)state;
    test_batch *s = malloc(sizeof *s);
    test_batch_make(s, 3);
    model_out ref, pad;
    run_model(1, s, &ref);
    run_model(8, s, &pad);
    assert_int_equal(ref.mask_k, 4); // the tiny config's 3 classes and background
    assert_int_equal(pad.mask_k, 8);
    for (int k = 0; k < 2; k++) {
        double a[5], b[5];
        test_losses_to_array(&ref.losses[k], a);
        test_losses_to_array(&pad.losses[k], b);
        printf("  micro-batch %d: mask loss %.9g (unpadded) %.9g (padded), %s\n", k, a[4], b[4],
               a[4] == b[4] ? "bit-identical" : "differs");
        // the RPN and box terms come before the mask head
        assert_memory_equal(a, b, 4 * sizeof(double));
        assert_true(fabs(a[4] - b[4]) <= 1e-6 * fabs(a[4]) + 1e-9);
        assert_true(a[4] > 0);
    }
    assert_int_equal(pad.bytes, ref.bytes);
    const int64_t n = (int64_t)(ref.bytes / sizeof(float));
    double e = test_max_rel_err(pad.grads, ref.grads, n);
    printf("  gradients: %s, max|a-b|/max|b| = %.2e over %lld values\n",
           memcmp(pad.grads, ref.grads, ref.bytes) == 0 ? "bit-identical" : "differ", e, (long long)n);
    assert_true(e < 1e-5);
    // the box head's gradients come from the box losses alone
    assert_int_equal(pad.n_box, ref.n_box);
    assert_memory_equal(pad.box_grads, ref.box_grads, sizeof(float) * (size_t)ref.n_box);
    const mrcnn_detections *d = &ref.det, *f = &pad.det;
    assert_int_equal(d->n_images, f->n_images);
    assert_int_equal(d->cap, f->cap);
    assert_int_equal(d->mask_size, f->mask_size);
    const size_t nd = (size_t)d->n_images * d->cap, mm = (size_t)d->mask_size * d->mask_size;
    assert_memory_equal(d->counts, f->counts, sizeof(int) * (size_t)d->n_images);
    assert_memory_equal(d->boxes, f->boxes, sizeof(float) * nd * 4);
    assert_memory_equal(d->scores, f->scores, sizeof(float) * nd);
    assert_memory_equal(d->labels, f->labels, sizeof(int32_t) * nd);
    int total = 0;
    for (int i = 0; i < d->n_images; i++) total += d->counts[i];
    double em = test_max_rel_err(f->mask_probs, d->mask_probs, (int64_t)(nd * mm));
    printf("  inference: %d detections; masks %s, max|a-b|/max|b| = %.2e\n", total,
           memcmp(f->mask_probs, d->mask_probs, sizeof(float) * nd * mm) == 0 ? "bit-identical" : "differ", em);
    assert_true(total > 0);
    assert_true(em < 1e-5);
    free(ref.grads), free(pad.grads), free(ref.box_grads), free(pad.box_grads);
    mrcnn_detections_free(&ref.det);
    mrcnn_detections_free(&pad.det);
    free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_layer), cmocka_unit_test(test_model)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
