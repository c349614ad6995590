/* Tensor-core shapes on the CPU backend beyond the mask logits (test_pad_logits): the
 * stem's input channels (3 -> pad_align: zero image channels and zero weight channels),
 * the RPN head's objectness and box deltas (A = 3 and 12 output channels) and the box
 * predictors' class logits and deltas (K and 4K) computed padded, their first channels
 * taken out by mrcnn_channels_slice for the targets, losses, proposals and detection. A GPU backend pads (pad_align 8); the CPU backend does not (pad_align 1),
 * and these tests force it, as test_pad_logits does, checking what holds on every
 * OpenBLAS kernel:
 *   - mrcnn_channels_pad / _slice copy exactly: the real channels bit-identical (-0
 *     and subnormals too), the padding channels exactly zero (the slice's backward puts
 *     zero gradient into them);
 *   - the stem layer alone (7x7 stride 2, 3 -> 64 at R50's width), forward and a
 *     backward adding into nonzero gradients: every value within 2 g_n sum|terms| of
 *     the unpadded layer (a reordered sum of the same products);
 *   - the RPN head (F = 256 as R50's FPN): logits, deltas and the 1x1 convs' gradients
 *     within that bound; the P levels' gradient within the bound composed through the
 *     3x3 conv's backward (its inputs differ by the 1x1 backward's bound);
 *   - the box predictors (1024 -> 81 classes and 324 deltas, COCO's 80 classes at R50's
 *     FC_DIM): computed with zero weight rows up to a multiple of pad_align and sliced;
 *     outputs and gradients within the same bound;
 *   - the tiny model's training step over two micro-batches and its inference, every
 *     layer padded: the losses and gradients within test_pad_logits' bounds, and a
 *     checkpoint saved with padding holds the same names and shapes as one without.
 * Which tensors came out bit-identical is printed. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/checkpoint.h"
#include "mrcnn/model.h"
#include "test_scene.h"
#include "test_util.h"

/* 2 g_n: the most two orders of summing n terms can differ by, per unit of sum|terms|. */
static double reorder_bound(int64_t n) {
    const double u = 0x1p-24, g = (double)n * u;
    return 2 * g / (1 - g);
}

/* How many |a - b| exceed bound[i] (NaN counts); *bits: all bit-identical. */
static int64_t over(const float *a, const float *b, const double *bound, int64_t n, bool *bits) {
    int64_t bad = 0;
    *bits = memcmp(a, b, sizeof(float) * (size_t)n) == 0;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)a[i] - (double)b[i]) <= bound[i])) bad++;
    return bad;
}

static void report(const char *what, int64_t bad, bool bits) {
    printf("  %-28s %s, over the bound: %lld\n", what, bits ? "bit-identical" : "differs", (long long)bad);
}

static float *read_host(const mrcnn_backend *be, const mrcnn_tensor *t) {
    float *h = malloc(sizeof(float) * (size_t)(mrcnn_tensor_numel(t) ? mrcnn_tensor_numel(t) : 1));
    be->mem.read(be, t, h);
    return h;
}

static mrcnn_tensor upload(mrcnn_ws *ws, const mrcnn_backend *be, int ndim, const int64_t *shape, const float *h) {
    mrcnn_tensor t = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, ndim, shape);
    be->mem.write(be, &t, h);
    return t;
}

static void model_make(mrcnn_model *m, mrcnn_backend *be, const mrcnn_config *cfg, int align) {
    mrcnn_model_init(m, cfg, be);
    mrcnn_model_init_random(m, 11);
    m->pad_align = align;
}

/* ---- the copies ----------------------------------------------------------------- */

static void test_channels(void **state) {
    (void)state;
    enum { M = 1000, K = 3, KP = 8 };
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_model m;
    model_make(&m, be, &cfg, KP);
    mrcnn_ws ws;
    mrcnn_ws_init(&ws, be);
    float x[M * K];
    test_fill_uniform(x, M * K, -3.0f, 3.0f, 31);
    x[4] = 0x1p-140f; // a subnormal copies too
    x[5] = -0.0f;     // and -0 (a product by 1 plus products by 0 gave +0)
    mrcnn_tensor xt = upload(&ws, be, 3, (int64_t[]){10, M / 10, K}, x);
    mrcnn_tensor p = mrcnn_channels_pad(&m, &ws, &xt, KP);
    assert_int_equal(p.shape[2], KP);
    float *ph = read_host(be, &p);
    int64_t wrong = 0;
    for (int i = 0; i < M; i++)
        for (int c = 0; c < KP; c++) {
            const float want = c < K ? x[i * K + c] : 0.0f;
            wrong += memcmp(&ph[i * KP + c], &want, sizeof want) != 0;
        }
    mrcnn_tensor s = mrcnn_channels_slice(&m, &ws, &p, K);
    float *sh = read_host(be, &s);
    printf("  pad, slice: %lld padded values not exact\n", (long long)wrong);
    assert_true(wrong == 0);
    assert_memory_equal(sh, x, sizeof x);
    free(ph), free(sh);
    mrcnn_ws_free(&ws);
    mrcnn_model_free(&m);
    mrcnn_backend_destroy(be);
}

/* ---- the stem ------------------------------------------------------------------- */

enum { SN = 2, SH = 48, SW = 48, SC = 3, SK = 64, SR = 7, SO = SH / 2 };

typedef struct {
    float *y;   // (SN, SO, SO, SK)
    float *dw;  // (SK, SR, SR, SC)
    float *db;  // (SK)
    float *w;   // (SK, SR, SR, SC) the layer's weight
    float *b;   // (SK) its bias
    int64_t in_wrong; // padded input values that are not the image's or zero
} stem_out;

static void run_stem(int align, const float *img, const float *dy, const float *g0, const float *gb0, stem_out *o) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    cfg.tiny_channels.v[0] = SK; // R50's stem: 3 -> 64
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_model m;
    model_make(&m, be, &cfg, align);
    const mrcnn_conv_layer *l = &m.resnet.stem;
    assert_false(l->frozen);
    const int c = mrcnn_conv_layer_in_channels(&m, l);
    assert_int_equal(c, align > 1 ? (SC + align - 1) / align * align : SC);
    mrcnn_ws ws;
    mrcnn_ws_init(&ws, be);
    o->w = read_host(be, mrcnn_arena_get(&m.params.values, l->w));
    o->b = read_host(be, mrcnn_arena_get(&m.params.values, l->b));
    be->mem.write(be, mrcnn_arena_get(&m.params.grads, l->w), g0);
    be->mem.write(be, mrcnn_arena_get(&m.params.grads, l->b), gb0);
    mrcnn_tensor x = upload(&ws, be, 4, (int64_t[]){SN, SH, SW, SC}, img);
    mrcnn_tensor xin = c == SC ? x : mrcnn_channels_pad(&m, &ws, &x, c);
    float *xh = read_host(be, &xin);
    o->in_wrong = 0;
    for (int64_t i = 0; i < (int64_t)SN * SH * SW; i++)
        for (int k = 0; k < c; k++) o->in_wrong += !(xh[i * c + k] == (k < SC ? img[i * SC + k] : 0.0f));
    free(xh);
    mrcnn_tensor y = mrcnn_conv_layer_forward(&m, &ws, l, &xin, MRCNN_ACT_NONE);
    o->y = read_host(be, &y);
    mrcnn_tensor dyt = upload(&ws, be, 4, y.shape, dy);
    mrcnn_conv_layer_backward(&m, &ws, l, &xin, NULL, MRCNN_ACT_NONE, &dyt, NULL, MRCNN_GRAD_ADD);
    const mrcnn_tensor *dw = mrcnn_arena_get(&m.params.grads, l->w);
    assert_int_equal(dw->shape[3], SC); // the parameters keep the users' shapes
    o->dw = read_host(be, dw);
    o->db = read_host(be, mrcnn_arena_get(&m.params.grads, l->b));
    mrcnn_ws_free(&ws);
    mrcnn_model_free(&m);
    mrcnn_backend_destroy(be);
}

static void stem_out_free(stem_out *o) { free(o->y), free(o->dw), free(o->db), free(o->w), free(o->b); }

static void test_stem(void **state) {
    (void)state;
    const int64_t ny = (int64_t)SN * SO * SO * SK, nw = (int64_t)SK * SR * SR * SC, nx = (int64_t)SN * SH * SW * SC;
    float *img = malloc(sizeof(float) * nx), *dy = malloc(sizeof(float) * ny);
    float *g0 = malloc(sizeof(float) * nw), gb0[SK];
    test_fill_uniform(img, nx, -2.0f, 2.0f, 41);
    test_fill_uniform(dy, ny, -1e-2f, 1e-2f, 42);
    test_fill_uniform(g0, nw, -1.0f, 1.0f, 43);
    test_fill_uniform(gb0, SK, -1.0f, 1.0f, 44);
    stem_out ref, pad;
    run_stem(1, img, dy, g0, gb0, &ref);
    // sum|terms| of y (bias + the window's products), dw and db (over the output pixels)
    double *sy = calloc((size_t)ny, sizeof(double)), *sw = calloc((size_t)nw, sizeof(double));
    double sb[SK];
    for (int k = 0; k < SK; k++) sb[k] = fabs(gb0[k]);
    for (int64_t i = 0; i < nw; i++) sw[i] = fabs(g0[i]);
    for (int n = 0; n < SN; n++)
        for (int oy = 0; oy < SO; oy++)
            for (int ox = 0; ox < SO; ox++) {
                const int64_t q = ((int64_t)(n * SO + oy) * SO + ox) * SK;
                for (int k = 0; k < SK; k++) {
                    double t = fabs(ref.b[k]);
                    sb[k] += fabs(dy[q + k]);
                    for (int r = 0; r < SR; r++)
                        for (int s = 0; s < SR; s++) {
                            const int iy = 2 * oy - 3 + r, ix = 2 * ox - 3 + s;
                            if (iy < 0 || iy >= SH || ix < 0 || ix >= SW) continue;
                            for (int c = 0; c < SC; c++) {
                                const double xv = img[((int64_t)(n * SH + iy) * SW + ix) * SC + c];
                                const int64_t wi = ((int64_t)(k * SR + r) * SR + s) * SC + c;
                                t += fabs(xv * ref.w[wi]);
                                sw[wi] += fabs(xv * dy[q + k]);
                            }
                        }
                    sy[q + k] = t;
                }
            }
    const double by = reorder_bound(SR * SR * SC + 1), bp = reorder_bound((int64_t)SN * SO * SO + 1);
    for (int64_t i = 0; i < ny; i++) sy[i] *= by;
    for (int64_t i = 0; i < nw; i++) sw[i] *= bp;
    for (int k = 0; k < SK; k++) sb[k] *= bp;
    const int aligns[] = {8, 4};
    for (int a = 0; a < 2; a++) {
        run_stem(aligns[a], img, dy, g0, gb0, &pad);
        bool b1, b2, b3;
        const int64_t e1 = over(pad.y, ref.y, sy, ny, &b1), e2 = over(pad.dw, ref.dw, sw, nw, &b2),
                      e3 = over(pad.db, ref.db, sb, SK, &b3);
        printf("  stem, pad_align %d: padded image values wrong %lld\n", aligns[a], (long long)pad.in_wrong);
        report("stem y", e1, b1), report("stem dw", e2, b2), report("stem db", e3, b3);
        assert_true(pad.in_wrong == 0);
        assert_true(e1 == 0 && e2 == 0 && e3 == 0);
        stem_out_free(&pad);
    }
    free(sy), free(sw), free(img), free(dy), free(g0);
    stem_out_free(&ref);
}

/* ---- the RPN head --------------------------------------------------------------- */

enum { RF = 256, RA = 3, RN = 1, RL = MRCNN_FPN_LEVELS };
static const int rpn_hw[RL] = {16, 8, 4, 2, 1};

typedef struct {
    float *t[RL], *logits[RL], *deltas[RL], *dp[RL]; // (RN, h, h, F|A|4A|F)
    float *wc, *wb, *w3;     // (A, F), (4A, F), (F, 3, 3, F) weights
    float *bc, *bb;          // (A), (4A) biases
    float *dwc, *dbc, *dwb, *dbb; // the 1x1 convs' gradients
} rpn_run;

typedef struct {
    float *p[RL], *dl[RL], *dd[RL]; // inputs: levels, the outputs' gradients
    float *gwc, *gbc, *gwb, *gbb;   // the gradients before the backward
} rpn_in;

static void run_rpn(int align, const rpn_in *in, rpn_run *o) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    cfg.fpn_out_channels = RF;
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_model m;
    model_make(&m, be, &cfg, align);
    mrcnn_rpn_head *h = &m.rpn;
    assert_int_equal(h->num_anchors, RA);
    assert_int_equal(mrcnn_conv_layer_out_channels(&m, &h->cls), align > 1 ? 8 : RA);
    mrcnn_ws ws;
    mrcnn_ws_init(&ws, be);
    // nonzero biases (the init's are zero) and starting gradients
    be->mem.write(be, mrcnn_arena_get(&m.params.values, h->cls.b), in->gbc);
    be->mem.write(be, mrcnn_arena_get(&m.params.values, h->bbox.b), in->gbb);
    be->mem.write(be, mrcnn_arena_get(&m.params.grads, h->cls.w), in->gwc);
    be->mem.write(be, mrcnn_arena_get(&m.params.grads, h->cls.b), in->gbc);
    be->mem.write(be, mrcnn_arena_get(&m.params.grads, h->bbox.w), in->gwb);
    be->mem.write(be, mrcnn_arena_get(&m.params.grads, h->bbox.b), in->gbb);
    o->wc = read_host(be, mrcnn_arena_get(&m.params.values, h->cls.w));
    o->wb = read_host(be, mrcnn_arena_get(&m.params.values, h->bbox.w));
    o->w3 = read_host(be, mrcnn_arena_get(&m.params.values, h->conv.w));
    o->bc = read_host(be, mrcnn_arena_get(&m.params.values, h->cls.b));
    o->bb = read_host(be, mrcnn_arena_get(&m.params.values, h->bbox.b));
    mrcnn_backbone_out bb;
    memset(&bb, 0, sizeof bb);
    mrcnn_tensor dl[RL], dd[RL], dp[RL];
    memset(dp, 0, sizeof dp);
    for (int l = 0; l < RL; l++)
        bb.p[l] = upload(&ws, be, 4, (int64_t[]){RN, rpn_hw[l], rpn_hw[l], RF}, in->p[l]);
    mrcnn_rpn_out out;
    mrcnn_rpn_head_forward(&m, &ws, &bb, &out);
    for (int l = 0; l < RL; l++) {
        assert_int_equal(out.logits[l].shape[3], RA);
        assert_int_equal(out.deltas[l].shape[3], 4 * RA);
        o->t[l] = read_host(be, &out.t[l]);
        o->logits[l] = read_host(be, &out.logits[l]);
        o->deltas[l] = read_host(be, &out.deltas[l]);
        dl[l] = upload(&ws, be, 4, out.logits[l].shape, in->dl[l]);
        dd[l] = upload(&ws, be, 4, out.deltas[l].shape, in->dd[l]);
    }
    mrcnn_rpn_head_backward(&m, &ws, &bb, &out, dl, dd, dp);
    for (int l = 0; l < RL; l++) o->dp[l] = read_host(be, &dp[l]);
    o->dwc = read_host(be, mrcnn_arena_get(&m.params.grads, h->cls.w));
    o->dbc = read_host(be, mrcnn_arena_get(&m.params.grads, h->cls.b));
    o->dwb = read_host(be, mrcnn_arena_get(&m.params.grads, h->bbox.w));
    o->dbb = read_host(be, mrcnn_arena_get(&m.params.grads, h->bbox.b));
    mrcnn_ws_free(&ws);
    mrcnn_model_free(&m);
    mrcnn_backend_destroy(be);
}

static void rpn_run_free(rpn_run *o) {
    for (int l = 0; l < RL; l++) free(o->t[l]), free(o->logits[l]), free(o->deltas[l]), free(o->dp[l]);
    free(o->wc), free(o->wb), free(o->w3), free(o->bc), free(o->bb);
    free(o->dwc), free(o->dbc), free(o->dwb), free(o->dbb);
}

/* The bounds of the RPN's outputs given the unpadded run's values: by, bd (the 1x1
 * outputs), bwc, bbc, bwb, bbb (their gradients, over every level's pixels), bp (the
 * levels' gradients: the 1x1 backward's bound on dt, carried through the 3x3 conv's
 * backward, plus that backward's own reordering on both runs' inputs). */
typedef struct {
    double *by[RL], *bd[RL], *bp[RL];
    double *bwc, *bbc, *bwb, *bbb;
} rpn_bounds;

static void rpn_bounds_make(const rpn_in *in, const rpn_run *r, rpn_bounds *b) {
    const int A4 = 4 * RA;
    int64_t pix = 0;
    for (int l = 0; l < RL; l++) pix += (int64_t)RN * rpn_hw[l] * rpn_hw[l];
    const double gp = reorder_bound(pix + 1), gy = reorder_bound(RF + 1), gt = reorder_bound(RA + A4 + 1),
                 g3 = reorder_bound(9 * RF + 1);
    b->bwc = calloc(RA * RF, sizeof(double)), b->bbc = calloc(RA, sizeof(double));
    b->bwb = calloc(A4 * RF, sizeof(double)), b->bbb = calloc(A4, sizeof(double));
    for (int i = 0; i < RA * RF; i++) b->bwc[i] = fabs(in->gwc[i]);
    for (int i = 0; i < A4 * RF; i++) b->bwb[i] = fabs(in->gwb[i]);
    for (int i = 0; i < RA; i++) b->bbc[i] = fabs(in->gbc[i]);
    for (int i = 0; i < A4; i++) b->bbb[i] = fabs(in->gbb[i]);
    for (int l = 0; l < RL; l++) {
        const int hw = rpn_hw[l];
        const int64_t np = (int64_t)RN * hw * hw;
        b->by[l] = calloc((size_t)(np * RA), sizeof(double));
        b->bd[l] = calloc((size_t)(np * A4), sizeof(double));
        b->bp[l] = calloc((size_t)(np * RF), sizeof(double));
        // e[j]: the bound on |dt_a - dt_b| behind the ReLU mask; v[j]: |dt| (exact, in double)
        double *e = calloc((size_t)(np * RF), sizeof(double)), *v = calloc((size_t)(np * RF), sizeof(double));
        for (int64_t q = 0; q < np; q++) {
            const float *t = r->t[l] + q * RF, *gl = in->dl[l] + q * RA, *gd = in->dd[l] + q * A4;
            for (int k = 0; k < RA + A4; k++) {
                const float *w = k < RA ? r->wc + k * RF : r->wb + (k - RA) * RF;
                const double g = k < RA ? gl[k] : gd[k - RA];
                double s = fabs(k < RA ? r->bc[k] : r->bb[k - RA]);
                for (int j = 0; j < RF; j++) {
                    s += fabs((double)t[j] * w[j]);
                    if (t[j] > 0) e[q * RF + j] += fabs(g * w[j]), v[q * RF + j] += g * w[j];
                    if (k < RA) b->bwc[k * RF + j] += fabs(g * t[j]);
                    else b->bwb[(k - RA) * RF + j] += fabs(g * t[j]);
                }
                if (k < RA) b->by[l][q * RA + k] = gy * s, b->bbc[k] += fabs(g);
                else b->bd[l][q * A4 + k - RA] = gy * s, b->bbb[k - RA] += fabs(g);
            }
        }
        for (int64_t i = 0; i < np * RF; i++) {
            e[i] *= gt;
            v[i] = fabs(v[i]) + e[i]; // either run's |dt|
        }
        // dp[y, x, c] = sum over the 3x3 window (pad 1) and k of w3[k, r, s, c] dt[y + r - 1, x + s - 1, k]
        for (int n = 0; n < RN; n++)
            for (int y = 0; y < hw; y++)
                for (int x = 0; x < hw; x++)
                    for (int ry = 0; ry < 3; ry++)
                        for (int rx = 0; rx < 3; rx++) {
                            const int oy = y - ry + 1, ox = x - rx + 1;
                            if (oy < 0 || oy >= hw || ox < 0 || ox >= hw) continue;
                            const int64_t qo = ((int64_t)n * hw + oy) * hw + ox, qi = ((int64_t)n * hw + y) * hw + x;
                            double *bp = b->bp[l] + qi * RF;
                            for (int k = 0; k < RF; k++) {
                                const double ek = e[qo * RF + k], vk = g3 * 2 * v[qo * RF + k];
                                const float *w = r->w3 + ((int64_t)(k * 3 + ry) * 3 + rx) * RF;
                                for (int c = 0; c < RF; c++) bp[c] += fabs(w[c]) * (ek + vk);
                            }
                        }
        free(e), free(v);
    }
    for (int i = 0; i < RA * RF; i++) b->bwc[i] *= gp;
    for (int i = 0; i < A4 * RF; i++) b->bwb[i] *= gp;
    for (int i = 0; i < RA; i++) b->bbc[i] *= gp;
    for (int i = 0; i < A4; i++) b->bbb[i] *= gp;
}

static void rpn_bounds_free(rpn_bounds *b) {
    for (int l = 0; l < RL; l++) free(b->by[l]), free(b->bd[l]), free(b->bp[l]);
    free(b->bwc), free(b->bbc), free(b->bwb), free(b->bbb);
}

static void test_rpn(void **state) {
    (void)state;
    const int A4 = 4 * RA;
    rpn_in in;
    for (int l = 0; l < RL; l++) {
        const int64_t np = (int64_t)RN * rpn_hw[l] * rpn_hw[l];
        in.p[l] = malloc(sizeof(float) * (size_t)(np * RF));
        in.dl[l] = malloc(sizeof(float) * (size_t)(np * RA));
        in.dd[l] = malloc(sizeof(float) * (size_t)(np * A4));
        test_fill_uniform(in.p[l], np * RF, -1.0f, 1.0f, 50 + (uint64_t)l);
        test_fill_uniform(in.dl[l], np * RA, -1e-2f, 1e-2f, 60 + (uint64_t)l);
        test_fill_uniform(in.dd[l], np * A4, -1e-2f, 1e-2f, 70 + (uint64_t)l);
    }
    in.gwc = malloc(sizeof(float) * RA * RF), in.gwb = malloc(sizeof(float) * A4 * RF);
    in.gbc = malloc(sizeof(float) * RA), in.gbb = malloc(sizeof(float) * A4);
    test_fill_uniform(in.gwc, RA * RF, -1.0f, 1.0f, 81);
    test_fill_uniform(in.gwb, A4 * RF, -1.0f, 1.0f, 82);
    test_fill_uniform(in.gbc, RA, -1.0f, 1.0f, 83);
    test_fill_uniform(in.gbb, A4, -1.0f, 1.0f, 84);
    rpn_run ref, pad;
    run_rpn(1, &in, &ref);
    run_rpn(8, &in, &pad);
    rpn_bounds b;
    rpn_bounds_make(&in, &ref, &b);
    int64_t bad = 0;
    bool bits, all_t = true, all_y = true, all_d = true, all_p = true;
    for (int l = 0; l < RL; l++) {
        const int64_t np = (int64_t)RN * rpn_hw[l] * rpn_hw[l];
        all_t &= memcmp(pad.t[l], ref.t[l], sizeof(float) * (size_t)(np * RF)) == 0; // the 3x3 is not padded
        bad += over(pad.logits[l], ref.logits[l], b.by[l], np * RA, &bits), all_y &= bits;
        bad += over(pad.deltas[l], ref.deltas[l], b.bd[l], np * A4, &bits), all_d &= bits;
        bad += over(pad.dp[l], ref.dp[l], b.bp[l], np * RF, &bits), all_p &= bits;
    }
    printf("  rpn: t %s, logits %s, deltas %s, dp %s\n", all_t ? "bit-identical" : "differs",
           all_y ? "bit-identical" : "differ", all_d ? "bit-identical" : "differ", all_p ? "bit-identical" : "differs");
    int64_t e;
    e = over(pad.dwc, ref.dwc, b.bwc, RA * RF, &bits), report("rpn cls dw", e, bits), bad += e;
    e = over(pad.dbc, ref.dbc, b.bbc, RA, &bits), report("rpn cls db", e, bits), bad += e;
    e = over(pad.dwb, ref.dwb, b.bwb, A4 * RF, &bits), report("rpn bbox dw", e, bits), bad += e;
    e = over(pad.dbb, ref.dbb, b.bbb, A4, &bits), report("rpn bbox db", e, bits), bad += e;
    printf("  rpn: %lld values over their bounds\n", (long long)bad);
    assert_true(all_t);
    assert_true(bad == 0);
    rpn_bounds_free(&b);
    rpn_run_free(&ref), rpn_run_free(&pad);
    for (int l = 0; l < RL; l++) free(in.p[l]), free(in.dl[l]), free(in.dd[l]);
    free(in.gwc), free(in.gwb), free(in.gbc), free(in.gbb);
}

/* ---- the box predictors ---------------------------------------------------------- */

enum { BR = 128, BF = 1024, BK = 81, BD = 4 * BK, BP = 7 * 7 * 32 }; // COCO's 80 classes, R50's FC_DIM

typedef struct {
    float *h7;                 // (BR, BF) the predictors' input (fc7's output, unpadded: identical)
    float *y[2];               // (BR, BK), (BR, BD) logits and deltas
    float *w[2], *b[2];        // the predictors' weights and biases
    float *dw[2], *db[2];      // their gradients after the backward
    int64_t dx_nonfinite;      // the head's input gradient (through fc7, fc6): values not finite
} box_run;

static void run_box(int align, const float *x, const float *dy0, const float *dy1, float *const *g0, box_run *o) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    cfg.roi_num_classes = BK - 1;
    cfg.box_head_fc_dim = BF;
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_model m;
    model_make(&m, be, &cfg, align);
    assert_int_equal(m.box.in_dim, BP);
    mrcnn_ws ws;
    mrcnn_ws_init(&ws, be);
    const int wi[2] = {m.box.cls_w, m.box.bbox_w}, bi[2] = {m.box.cls_b, m.box.bbox_b};
    for (int j = 0; j < 2; j++) {
        be->mem.write(be, mrcnn_arena_get(&m.params.values, bi[j]), g0[2 + j]); // nonzero biases
        be->mem.write(be, mrcnn_arena_get(&m.params.grads, wi[j]), g0[j]);
        be->mem.write(be, mrcnn_arena_get(&m.params.grads, bi[j]), g0[2 + j]);
        o->w[j] = read_host(be, mrcnn_arena_get(&m.params.values, wi[j]));
        o->b[j] = read_host(be, mrcnn_arena_get(&m.params.values, bi[j]));
    }
    mrcnn_tensor xt = upload(&ws, be, 4, (int64_t[]){BR, 7, 7, 32}, x);
    mrcnn_box_head_out out;
    mrcnn_box_head_forward(&m, &ws, &xt, &out);
    assert_int_equal(out.logits.shape[1], BK);
    assert_int_equal(out.deltas.shape[1], BD);
    o->h7 = read_host(be, &out.h7);
    o->y[0] = read_host(be, &out.logits);
    o->y[1] = read_host(be, &out.deltas);
    mrcnn_tensor d0 = upload(&ws, be, 2, out.logits.shape, dy0), d1 = upload(&ws, be, 2, out.deltas.shape, dy1);
    mrcnn_tensor dx = mrcnn_ws_like(&ws, &xt);
    mrcnn_box_head_backward(&m, &ws, &out, &d0, &d1, &dx);
    float *dxh = read_host(be, &dx);
    o->dx_nonfinite = 0;
    for (int64_t i = 0; i < (int64_t)BR * BP; i++) o->dx_nonfinite += !isfinite(dxh[i]);
    free(dxh);
    for (int j = 0; j < 2; j++) {
        assert_int_equal(mrcnn_arena_get(&m.params.grads, wi[j])->shape[0], j ? BD : BK);
        o->dw[j] = read_host(be, mrcnn_arena_get(&m.params.grads, wi[j]));
        o->db[j] = read_host(be, mrcnn_arena_get(&m.params.grads, bi[j]));
    }
    mrcnn_ws_free(&ws);
    mrcnn_model_free(&m);
    mrcnn_backend_destroy(be);
}

static void box_run_free(box_run *o) {
    free(o->h7);
    for (int j = 0; j < 2; j++) free(o->y[j]), free(o->w[j]), free(o->b[j]), free(o->dw[j]), free(o->db[j]);
}

static void test_box(void **state) {
    (void)state;
    float *x = malloc(sizeof(float) * BR * BP), *dy[2], *g0[4];
    test_fill_uniform(x, (int64_t)BR * BP, 0.0f, 1.0f, 90);
    const int kk[2] = {BK, BD};
    for (int j = 0; j < 2; j++) {
        dy[j] = malloc(sizeof(float) * BR * kk[j]);
        g0[j] = malloc(sizeof(float) * kk[j] * BF);
        g0[2 + j] = malloc(sizeof(float) * kk[j]);
        test_fill_uniform(dy[j], (int64_t)BR * kk[j], -1e-2f, 1e-2f, 91 + (uint64_t)j);
        test_fill_uniform(g0[j], (int64_t)kk[j] * BF, -1.0f, 1.0f, 93 + (uint64_t)j);
        test_fill_uniform(g0[2 + j], kk[j], -1.0f, 1.0f, 95 + (uint64_t)j);
    }
    box_run ref, pad;
    run_box(1, x, dy[0], dy[1], g0, &ref);
    run_box(8, x, dy[0], dy[1], g0, &pad);
    assert_memory_equal(pad.h7, ref.h7, sizeof(float) * BR * BF); // fc6, fc7 not padded
    // a padding row's weight or output gradient that is not zero reaches dx (NaN garbage)
    assert_true(ref.dx_nonfinite == 0 && pad.dx_nonfinite == 0);
    int64_t bad = 0;
    const char *names[2] = {"cls_score", "bbox_pred"};
    for (int j = 0; j < 2; j++) {
        const int K = kk[j];
        double *by = calloc((size_t)BR * K, sizeof(double)), *bw = calloc((size_t)K * BF, sizeof(double));
        double *bb = calloc((size_t)K, sizeof(double));
        for (int k = 0; k < K; k++) bb[k] = fabs(g0[2 + j][k]);
        for (int64_t i = 0; i < (int64_t)K * BF; i++) bw[i] = fabs(g0[j][i]);
        for (int r = 0; r < BR; r++)
            for (int k = 0; k < K; k++) {
                double t = fabs(ref.b[j][k]);
                const double g = dy[j][r * K + k];
                for (int c = 0; c < BF; c++) {
                    t += fabs((double)ref.h7[r * BF + c] * ref.w[j][k * BF + c]);
                    bw[k * BF + c] += fabs(g * ref.h7[r * BF + c]);
                }
                by[r * K + k] = t * reorder_bound(BF + 1);
                bb[k] += fabs(g);
            }
        for (int64_t i = 0; i < (int64_t)K * BF; i++) bw[i] *= reorder_bound(BR + 1);
        for (int k = 0; k < K; k++) bb[k] *= reorder_bound(BR + 1);
        bool b1, b2, b3;
        char what[64];
        int64_t e;
        snprintf(what, sizeof what, "box %s y", names[j]);
        e = over(pad.y[j], ref.y[j], by, (int64_t)BR * K, &b1), report(what, e, b1), bad += e;
        snprintf(what, sizeof what, "box %s dw", names[j]);
        e = over(pad.dw[j], ref.dw[j], bw, (int64_t)K * BF, &b2), report(what, e, b2), bad += e;
        snprintf(what, sizeof what, "box %s db", names[j]);
        e = over(pad.db[j], ref.db[j], bb, K, &b3), report(what, e, b3), bad += e;
        free(by), free(bw), free(bb);
    }
    assert_true(bad == 0);
    box_run_free(&ref), box_run_free(&pad);
    free(x);
    for (int j = 0; j < 2; j++) free(dy[j]), free(g0[j]), free(g0[2 + j]);
}

/* ---- the tiny model ------------------------------------------------------------- */

typedef struct {
    double losses[2][5];
    float *grads; // every gradient after two micro-batches
    size_t bytes;
    mrcnn_detections det;
} model_out;

static void run_model(int align, const test_batch *s, const char *ckpt, model_out *o) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_model m;
    mrcnn_model_init(&m, &cfg, be);
    mrcnn_model_init_random(&m, 5);
    m.pad_align = align;
    assert_int_equal(mrcnn_conv_layer_in_channels(&m, &m.resnet.stem), align > 1 ? align : 3);
    mrcnn_ws ws;
    mrcnn_ws_init(&ws, be);
    mrcnn_model_zero_grads(&m);
    const int H = TEST_BATCH_H, W = TEST_BATCH_W;
    for (int k = 0; k < 2; k++) {
        float *img = malloc(sizeof s->images);
        for (int64_t i = 0; i < (int64_t)TEST_BATCH_N * H * W; i++)
            for (int c = 0; c < 3; c++) img[i * 3 + c] = s->images[(k ? i ^ 1 : i) * 3 + c];
        mrcnn_batch b = {.image_hw = s->hw, .gt = s->gt};
        b.images = mrcnn_ws_tensor(&ws, MRCNN_DTYPE_F32, 4, (int64_t[]){TEST_BATCH_N, H, W, 3});
        be->mem.write(be, &b.images, img);
        free(img);
        mrcnn_pass st;
        mrcnn_model_train_step(&m, &ws, &b, true, &st);
        mrcnn_losses l;
        mrcnn_model_read_losses(&m, &st, &l);
        const double v[5] = {l.rpn_objectness, l.rpn_box_reg, l.classifier, l.box_reg, l.mask};
        memcpy(o->losses[k], v, sizeof v);
        mrcnn_pass_free(&st);
        mrcnn_ws_reset(&ws);
    }
    o->bytes = m.params.grads.size;
    o->grads = malloc(o->bytes);
    int64_t ne = (int64_t)(o->bytes / sizeof(float));
    mrcnn_tensor all = mrcnn_tensor_view(m.params.grads.base, MRCNN_DTYPE_F32, be->device, 1, &ne);
    be->mem.read(be, &all, o->grads);
    mrcnn_batch b = {.image_hw = s->hw, .gt = s->gt};
    b.images = mrcnn_ws_tensor(&ws, MRCNN_DTYPE_F32, 4, (int64_t[]){TEST_BATCH_N, H, W, 3});
    be->mem.write(be, &b.images, s->images);
    mrcnn_pass st;
    mrcnn_model_predict(&m, &ws, &b, &st, &o->det);
    mrcnn_pass_free(&st);
    mrcnn_checkpoint_save_model(&m, ckpt);
    mrcnn_ws_free(&ws);
    mrcnn_model_free(&m);
    mrcnn_backend_destroy(be);
}

/* Whether a checkpoint loads into an unpadded model whose arena has the same entries,
 * names and shapes as `want`'s. */
static void check_checkpoint(const char *path, mrcnn_model *want) {
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_model m;
    mrcnn_model_init(&m, &cfg, be);
    mrcnn_checkpoint_load_model(&m, path); // fails on a missing name or another shape
    const int n = mrcnn_params_count(&m.params);
    assert_int_equal(n, mrcnn_params_count(&want->params));
    for (int i = 0; i < n; i++) {
        const mrcnn_tensor *a = mrcnn_arena_get(&m.params.values, i), *b = mrcnn_arena_get(&want->params.values, i);
        assert_int_equal(a->ndim, b->ndim);
        assert_memory_equal(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
    }
    mrcnn_model_free(&m);
    mrcnn_backend_destroy(be);
}

static void test_model(void **state) {
    (void)state;
    test_batch *s = malloc(sizeof *s);
    test_batch_make(s, 3);
    char ref_path[512], pad_path[512];
    snprintf(ref_path, sizeof ref_path, "%s", test_tmp_path("pad_shapes_ref.h5"));
    snprintf(pad_path, sizeof pad_path, "%s", test_tmp_path("pad_shapes_pad.h5"));
    model_out ref, pad;
    run_model(1, s, ref_path, &ref);
    run_model(8, s, pad_path, &pad);
    for (int k = 0; k < 2; k++) {
        printf("  micro-batch %d: losses", k);
        for (int i = 0; i < 5; i++) {
            printf(" %.9g/%.9g", ref.losses[k][i], pad.losses[k][i]);
            assert_true(fabs(ref.losses[k][i] - pad.losses[k][i]) <= 1e-6 * fabs(ref.losses[k][i]) + 1e-9);
        }
        printf(" (unpadded/padded)\n");
        assert_true(ref.losses[k][4] > 0);
    }
    assert_int_equal(pad.bytes, ref.bytes);
    const int64_t n = (int64_t)(ref.bytes / sizeof(float));
    const double e = test_max_rel_err(pad.grads, ref.grads, n);
    printf("  gradients: %s, max|a-b|/max|b| = %.2e over %lld values\n",
           memcmp(pad.grads, ref.grads, ref.bytes) == 0 ? "bit-identical" : "differ", e, (long long)n);
    assert_true(e < 1e-5);
    const mrcnn_detections *d = &ref.det, *f = &pad.det;
    assert_int_equal(d->n_images, f->n_images);
    assert_memory_equal(d->counts, f->counts, sizeof(int) * (size_t)d->n_images);
    const size_t nd = (size_t)d->n_images * d->cap, mm = (size_t)d->mask_size * d->mask_size;
    assert_memory_equal(d->labels, f->labels, sizeof(int32_t) * nd);
    const double eb = test_max_rel_err(f->boxes, d->boxes, (int64_t)nd * 4),
                 es = test_max_rel_err(f->scores, d->scores, (int64_t)nd),
                 em = test_max_rel_err(f->mask_probs, d->mask_probs, (int64_t)(nd * mm));
    printf("  inference: boxes %.2e, scores %.2e, masks %.2e (max|a-b|/max|b|)\n", eb, es, em);
    assert_true(eb < 1e-5 && es < 1e-5 && em < 1e-5);
    // a checkpoint saved with padding on holds the users' shapes, as one saved with it off
    mrcnn_config cfg;
    test_tiny_config(&cfg);
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_model want;
    mrcnn_model_init(&want, &cfg, be);
    check_checkpoint(ref_path, &want);
    check_checkpoint(pad_path, &want);
    mrcnn_model_free(&want);
    mrcnn_backend_destroy(be);
    free(ref.grads), free(pad.grads);
    mrcnn_detections_free(&ref.det), mrcnn_detections_free(&pad.det);
    free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_channels), cmocka_unit_test(test_stem),
                                       cmocka_unit_test(test_rpn), cmocka_unit_test(test_box),
                                       cmocka_unit_test(test_model)};
    return cmocka_run_group_tests(tests, test_tmp_setup, test_tmp_teardown);
}
