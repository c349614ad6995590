/* The declarative shape rules of backend_ops.def (src/backend/shape_rule.c) and the
 * wrappers backend_validate.c generates from them: a rule that breaks the grammar fails
 * when it is compiled, naming the entry, the rule and the column; each CHECK entry fails
 * on wrong shapes naming the op, the argument and what disagreed; and, for random
 * shapes around the valid ones, each generated check accepts exactly what the
 * hand-written check it replaced accepted (the old rules are written out below as
 * predicates), so no entry is checked less than before. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/backend/shape_rule.h"
#include "mrcnn/backend.h"
#include "mrcnn/backend_open.h"
#include "test_util.h"

/* ---- the parser ---- */

static mrcnn_shape_rule g_rule;

static void compile(const char *text, const char *const *names, int n) {
    mrcnn_shape_rule_compile(&g_rule, "op", text, names, n);
}

static void test_parse_errors(void **state) {
    static const char *const xy[] = {"x", "y"}, *const xwby[] = {"x", "w", "b", "y"};
    compile("x (N,H,W,C) w (K,2,2,C) b? (K) -> y (N,2H,2W,K)", xwby, 4);
    assert_int_equal(g_rule.n_clauses, 4);
    assert_int_equal(g_rule.n_syms, 5); // N H W C K
    assert_int_equal(g_rule.c[2].optional, 1);
    assert_int_equal(g_rule.c[3].dims[1].lit, 2); // 2H
    compile("x any, y like x", xy, 2);
    compile("x (...,K) -> y += (K) fp32", xy, 2);
    assert_int_equal(g_rule.c[1].dtype, MRCNN_DTYPE_F32);
    compile("x (N>0, C) -> y (N,C)", xy, 2);
    assert_int_equal(g_rule.c[0].dims[0].pos, 1);
    assert_int_equal(g_rule.c[1].dims[0].pos, 0);
    compile("x, y (*n) int32", xy, 2);
    assert_int_equal(g_rule.c[0].star, g_rule.c[1].star);

    EXPECT_FAIL(compile("x any -> z like x", xy, 2), "column 11: 'z' is not a tensor argument of op");
    EXPECT_FAIL(compile("x any", xy, 2), "tensor argument 'y' is not in the rule (every one is checked)");
    EXPECT_FAIL(compile("x any, x any, y any", xy, 2), "'x' appears twice");
    EXPECT_FAIL(compile("y like x, x any", xy, 2), "'like x': x is not an earlier, non-optional argument");
    EXPECT_FAIL(compile("x? any, y like x", xy, 2), "'like x': x is not an earlier, non-optional argument");
    EXPECT_FAIL(compile("x, y like x", xy, 2), "'x' is 'like' itself");
    EXPECT_FAIL(compile("x (N,...) y any", xy, 2), "'...' must be the first extent");
    EXPECT_FAIL(compile("x (*n,C) y any", xy, 2), "'*n' must be the last extent");
    EXPECT_FAIL(compile("x (...,*n) y any", xy, 2), "'...' and '*' in one shape");
    EXPECT_FAIL(compile("x (N,C y any", xy, 2), "expected ',' or ')'");
    EXPECT_FAIL(compile("x (N,,C) y any", xy, 2), "expected an extent");
    EXPECT_FAIL(compile("x (0H) y any", xy, 2), "a symbol's coefficient must be positive");
    EXPECT_FAIL(compile("x (1,2,3,4,5,6,7) y any", xy, 2), "more than 6 extents");
    EXPECT_FAIL(compile("x anything, y any", xy, 2), "expected a shape: '(...)', 'any' or 'like <name>'");
    EXPECT_FAIL(compile("x [N] y any", xy, 2), "expected a shape");
    EXPECT_FAIL(compile("x any y", xy, 2), "expected a shape");
    /* the message names the entry and quotes the rule */
    EXPECT_FAIL(compile("x any", xy, 2), "shape rule of op \"x any\"");
}

/* ---- each CHECK entry through the CPU backend ---- */

static char g_buf[1 << 16];

static mrcnn_tensor tv(int ndim, const int64_t *shape) {
    return mrcnn_tensor_view(g_buf, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, ndim, shape);
}
#define T(...) tv((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static mrcnn_backend *open_cpu(void) {
    const mrcnn_backend_open_opts o = {.device = MRCNN_DEVICE_CPU, .gpu = -1};
    mrcnn_backend *be = mrcnn_backend_open(&o, NULL);
    assert_non_null(be);
    return be;
}

static void test_messages(void **state) {
    mrcnn_backend *be = open_cpu();
    const mrcnn_activation none = MRCNN_ACT_NONE;
    /* deconv: x (1,3,3,5) w (4,2,2,5) -> y (1,6,6,4) */
    mrcnn_tensor x = T(1, 3, 3, 5), w = T(4, 2, 2, 5), y = T(1, 6, 6, 4), b = T(4), b3 = T(3), y7 = T(1, 7, 6, 4),
                 x3 = T(1, 3, 3), dyw = T(1, 6, 6, 3);
    EXPECT_FAIL(be->nn.deconv2x2_forward(be, &x, &w, NULL, none, &y7),
                "deconv2x2_forward y: shape (1, 7, 6, 4) but expected (1, 6, 6, 4): 2H is 6 (H = 3 from x), but dim 1 "
                "is 7 (rule y (N,2H,2W,K))");
    EXPECT_FAIL(be->nn.deconv2x2_forward(be, &x, &w, &b3, none, &y),
                "deconv2x2_forward b: shape (3) but expected (4): K is 4 from w, but dim 0 is 3");
    EXPECT_FAIL(be->nn.deconv2x2_forward(be, &x3, &w, NULL, none, &y),
                "deconv2x2_forward x: shape (1, 3, 3) but expected (-1, -1, -1, -1): 3 dims, the rule's 4");
    EXPECT_FAIL(be->nn.deconv2x2_forward(be, &x, &w, &b, (mrcnn_activation)2, &y),
                "deconv2x2_forward: unknown activation 2");
    be->nn.deconv2x2_forward(be, &x, &w, &b, MRCNN_ACT_RELU, &y);
    EXPECT_FAIL(be->nn.deconv2x2_backward(be, &x, &w, &dyw, MRCNN_ACT_NONE, NULL, NULL, MRCNN_GRAD_ADD, NULL, NULL),
                "deconv2x2_backward dy: shape (1, 6, 6, 3) but expected (1, 6, 6, 4): K is 4 from w, but dim 3 is 3");
    EXPECT_FAIL(be->nn.deconv2x2_backward(be, &x, &w, &y, MRCNN_ACT_NONE, NULL, &y, MRCNN_GRAD_ADD, NULL, NULL),
                "deconv2x2_backward dx: shape (1, 6, 6, 4) but expected (1, 3, 3, 5) (like x)");
    EXPECT_FAIL(be->nn.deconv2x2_backward(be, &x, &w, &y, MRCNN_ACT_NONE, NULL, NULL, MRCNN_GRAD_ADD,
                                          &x, NULL), "deconv2x2_backward dw: shape");
    EXPECT_FAIL(be->nn.deconv2x2_backward(be, &x, &w, &y, MRCNN_ACT_NONE, NULL, NULL, MRCNN_GRAD_ADD,
                                          NULL, &b3), "deconv2x2_backward db: shape (3)");
    EXPECT_FAIL(be->nn.deconv2x2_backward(be, &x, NULL, &y, MRCNN_ACT_NONE, NULL, NULL, MRCNN_GRAD_ADD,
                                          NULL, NULL), "deconv2x2_backward w: NULL tensor");

    /* elementwise */
    mrcnn_tensor a = T(2, 3), at = T(3, 2), a3 = T(2, 3, 1);
    EXPECT_FAIL(be->nn.relu_forward(be, &a, &at), "relu_forward y: shape (3, 2) but expected (2, 3) (like x)");
    EXPECT_FAIL(be->nn.relu_forward(be, &a, NULL), "relu_forward y: NULL tensor");
    EXPECT_FAIL(be->nn.relu_backward(be, &a, &a3, &a), "relu_backward dy: shape (2, 3, 1) but expected (2, 3)");
    EXPECT_FAIL(be->nn.relu_backward(be, &a, &a, &at), "relu_backward dx: shape (3, 2)");
    EXPECT_FAIL(be->nn.add_forward(be, &a, &a, none, &at), "add_forward y: shape (3, 2) but expected (2, 3)");
    EXPECT_FAIL(be->nn.add_backward(be, &a, NULL, &at), "add_backward db: shape (3, 2) but expected (2, 3)");
    EXPECT_FAIL(be->nn.add_backward(be, &a, &a3, NULL), "add_backward da: shape (2, 3, 1)");
    be->nn.add_backward(be, &a, NULL, NULL);

    /* FPN top-down: lateral (1,8,6,4), top (1,4,3,4) */
    mrcnn_tensor lat = T(1, 8, 6, 4), top = T(1, 4, 3, 4), topc = T(1, 4, 3, 5), top2 = T(2, 4, 3, 4);
    EXPECT_FAIL(be->nn.upsample_add_forward(be, &topc, &lat, &lat),
                "upsample_add_forward top: shape (1, 4, 3, 5) but expected (1, -1, -1, 4): C is 4 from lateral, but "
                "dim 3 is 5");
    EXPECT_FAIL(be->nn.upsample_add_forward(be, &top, &lat, &top), "upsample_add_forward y: shape (1, 4, 3, 4)");
    EXPECT_FAIL(be->nn.upsample_add_backward(be, &lat, &top2, NULL),
                "upsample_add_backward dtop: shape (2, 4, 3, 4) but expected (1, -1, -1, 4): N is 1 from dy");
    EXPECT_FAIL(be->nn.upsample_add_backward(be, &lat, NULL, &top), "upsample_add_backward dlateral: shape");

    /* linear: x (3,2,2,5) rows of 20, w (6,20) */
    mrcnn_tensor lx = T(3, 2, 2, 5), lx1 = T(20), lw = T(6, 20), lwt = T(20, 6), lb = T(6), lb5 = T(5), ly = T(3, 6),
                 ly4 = T(4, 6);
    EXPECT_FAIL(be->nn.linear_forward(be, &lx1, &lw, NULL, none, &ly),
                "linear_forward x: shape (20) but expected (-1, ...): 1 dims, the rule's at least 2");
    mrcnn_tensor lx0 = T(0, 20), ly0 = T(0, 6);
    EXPECT_FAIL(be->nn.linear_forward(be, &lx0, &lw, NULL, none, &ly0),
                "linear_forward x: shape (0, 20) but expected (-1, ...): N must be > 0, dim 0 is 0");
    EXPECT_FAIL(be->nn.linear_forward(be, &lx, &lwt, NULL, none, &ly),
                "linear_forward w: shape (20, 6) but expected (-1, 20): in is 20 from x, but dim 1 is 6");
    EXPECT_FAIL(be->nn.linear_forward(be, &lx, &lw, &lb5, none, &ly), "linear_forward b: shape (5) but expected (6)");
    EXPECT_FAIL(be->nn.linear_forward(be, &lx, &lw, &lb, none, &ly4),
                "linear_forward y: shape (4, 6) but expected (3, 6): N is 3 from x, but dim 0 is 4");
    EXPECT_FAIL(be->nn.linear_backward(be, &lx, &lw, &ly4, MRCNN_ACT_NONE, NULL, NULL, MRCNN_GRAD_ADD,
                                       NULL, NULL), "linear_backward dy: shape (4, 6)");
    EXPECT_FAIL(be->nn.linear_backward(be, &lx, &lw, &ly, MRCNN_ACT_NONE, NULL, &ly, MRCNN_GRAD_ADD,
                                       NULL, NULL), "linear_backward dx: shape (3, 6)");
    EXPECT_FAIL(be->nn.linear_backward(be, &lx, &lw, &ly, MRCNN_ACT_NONE, NULL, NULL, MRCNN_GRAD_ADD,
                                       &lwt, NULL), "linear_backward dw: shape (20, 6)");
    EXPECT_FAIL(be->nn.linear_backward(be, &lx, &lw, &ly, MRCNN_ACT_NONE, NULL, NULL, MRCNN_GRAD_ADD,
                                       NULL, &lb5), "linear_backward db: shape (5)");

    /* bias gradient and cast */
    EXPECT_FAIL(be->nn.bias_grad(be, &lx, &lb),
                "bias_grad db: shape (6) but expected (5): K is 5 from dy, but dim 0 is 6");
    EXPECT_FAIL(be->nn.bias_grad(be, &lx, &lx),
                "bias_grad db: shape (3, 2, 2, 5) but expected (5): 4 dims, the rule's 1");
    EXPECT_FAIL(be->nn.cast(be, &lx, &ly), "cast y: shape (3, 6) has 18 elements but x (3, 2, 2, 5) has 60");
    mrcnn_tensor li = lx;
    li.dtype = MRCNN_DTYPE_I32;
    EXPECT_FAIL(be->nn.cast(be, &li, &lx), "cast x: dtype int32 but expected a float dtype");
    li = lx;
    li.device = MRCNN_DEVICE_GPU;
    EXPECT_FAIL(be->nn.relu_forward(be, &li, &lx), "relu_forward x: tensor is on the GPU, the cpu backend needs host");
    li = lx;
    li.stride[0] = 100;
    EXPECT_FAIL(be->nn.relu_forward(be, &lx, &li), "relu_forward y: tensor must be contiguous");
    li = lx;
    li.data = NULL;
    EXPECT_FAIL(be->nn.add_forward(be, &lx, &lx, none, &li), "add_forward y: NULL data");
    mrcnn_backend_destroy(be);
}

/* ---- the generated checks accept what the hand-written ones did ---- */

typedef struct {
    int ndim, null;
    int64_t s[MRCNN_MAX_DIMS];
} shp;

static int same(const shp *a, const shp *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->s[i] != b->s[i]) return 0;
    return 1;
}
static int is(const shp *a, int ndim, const int64_t *want) { // -1: any
    if (a->ndim != ndim) return 0;
    for (int i = 0; i < ndim; i++)
        if (want[i] >= 0 && a->s[i] != want[i]) return 0;
    return 1;
}
#define IS(a, ...) is(a, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})
static int64_t numel(const shp *a) {
    int64_t n = 1;
    for (int i = 0; i < a->ndim; i++) n *= a->s[i];
    return n;
}
static shp S(int ndim, const int64_t *s) {
    shp r = {ndim, 0, {0}};
    for (int i = 0; i < ndim; i++) r.s[i] = s[i];
    return r;
}
#define SH(...) S((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

/* The hand-written rules as they were (backend_validate.c before the rules were declared
 * in the op list), on shapes only; t[i].null: the argument is NULL. */
static int old_deconv_fwd(const shp *t) { // x w b y
    const shp *x = &t[0], *w = &t[1], *b = &t[2], *y = &t[3];
    if (x->null || x->ndim != 4 || w->null || !IS(w, -1, 2, 2, x->s[3])) return 0;
    if (!b->null && !IS(b, w->s[0])) return 0;
    return !y->null && IS(y, x->s[0], 2 * x->s[1], 2 * x->s[2], w->s[0]);
}
static int old_deconv_bwd(const shp *t) { // x w dy dx dw db
    const shp *x = &t[0], *w = &t[1], *dy = &t[2], *dx = &t[3], *dw = &t[4], *db = &t[5];
    if (x->null || x->ndim != 4 || w->null || !IS(w, -1, 2, 2, x->s[3])) return 0;
    if (dy->null || !IS(dy, x->s[0], 2 * x->s[1], 2 * x->s[2], w->s[0])) return 0;
    return (dx->null || same(dx, x)) && (dw->null || same(dw, w)) && (db->null || IS(db, w->s[0]));
}
static int old_relu_fwd(const shp *t) { return !t[0].null && !t[1].null && same(&t[1], &t[0]); }
static int old_relu_bwd(const shp *t) {
    return !t[0].null && !t[1].null && !t[2].null && same(&t[1], &t[0]) && same(&t[2], &t[0]);
}
static int old_add_fwd(const shp *t) { return old_relu_bwd(t); } // a b y: b, y like a
static int old_add_bwd(const shp *t) {
    return !t[0].null && (t[1].null || same(&t[1], &t[0])) && (t[2].null || same(&t[2], &t[0]));
}
static int old_ups_fwd(const shp *t) { // top lateral y
    const shp *top = &t[0], *lat = &t[1], *y = &t[2];
    if (lat->null || lat->ndim != 4 || top->null || !IS(top, lat->s[0], -1, -1, lat->s[3])) return 0;
    return !y->null && same(y, lat);
}
static int old_ups_bwd(const shp *t) { // dy dtop dlateral
    const shp *dy = &t[0], *dtop = &t[1], *dlat = &t[2];
    if (dy->null || dy->ndim != 4) return 0;
    return (dtop->null || IS(dtop, dy->s[0], -1, -1, dy->s[3])) && (dlat->null || same(dlat, dy));
}
static int old_lin_x_w(const shp *x, const shp *w) {
    if (x->null || x->ndim < 2 || x->s[0] <= 0) return 0;
    return !w->null && IS(w, -1, numel(x) / x->s[0]);
}
static int old_lin_fwd(const shp *t) { // x w b y
    if (!old_lin_x_w(&t[0], &t[1])) return 0;
    return (t[2].null || IS(&t[2], t[1].s[0])) && !t[3].null && IS(&t[3], t[0].s[0], t[1].s[0]);
}
static int old_lin_bwd(const shp *t) { // x w dy dx dw db
    if (!old_lin_x_w(&t[0], &t[1]) || t[2].null || !IS(&t[2], t[0].s[0], t[1].s[0])) return 0;
    return (t[3].null || same(&t[3], &t[0])) && (t[4].null || same(&t[4], &t[1])) &&
           (t[5].null || IS(&t[5], t[1].s[0]));
}
static int old_bias_grad(const shp *t) {
    return !t[0].null && t[0].ndim >= 1 && !t[1].null && IS(&t[1], t[0].s[t[0].ndim - 1]);
}
static int old_cast(const shp *t) { return !t[0].null && !t[1].null && numel(&t[0]) == numel(&t[1]); }

/* Valid shapes from random extents n[] (1..3). */
static void v_deconv(const int64_t *n, shp *t, int bwd) {
    t[0] = SH(n[0], n[1], n[2], n[3]), t[1] = SH(n[4], 2, 2, n[3]);
    shp y = SH(n[0], 2 * n[1], 2 * n[2], n[4]), b = SH(n[4]);
    if (!bwd) t[2] = b, t[3] = y;
    else t[2] = y, t[3] = t[0], t[4] = t[1], t[5] = b;
}
static void v_deconv_fwd(const int64_t *n, shp *t) { v_deconv(n, t, 0); }
static void v_deconv_bwd(const int64_t *n, shp *t) { v_deconv(n, t, 1); }
static void v_like3(const int64_t *n, shp *t) {
    t[0] = S((int)n[5] % 4 + 1, n);
    t[1] = t[2] = t[0];
}
static void v_ups_fwd(const int64_t *n, shp *t) {
    t[0] = SH(n[0], n[1], n[2], n[3]), t[1] = SH(n[0], 2 * n[1], 2 * n[2], n[3]), t[2] = t[1];
}
static void v_ups_bwd(const int64_t *n, shp *t) {
    t[0] = SH(n[0], 2 * n[1], 2 * n[2], n[3]), t[1] = SH(n[0], n[1], n[2], n[3]), t[2] = t[0];
}
static void v_lin(const int64_t *n, shp *t, int bwd) {
    t[0] = n[5] % 2 ? SH(n[0], n[1] * n[2]) : SH(n[0], n[1], n[2]);
    t[1] = SH(n[4], n[1] * n[2]);
    shp y = SH(n[0], n[4]), b = SH(n[4]);
    if (!bwd) t[2] = b, t[3] = y;
    else t[2] = y, t[3] = t[0], t[4] = t[1], t[5] = b;
}
static void v_lin_fwd(const int64_t *n, shp *t) { v_lin(n, t, 0); }
static void v_lin_bwd(const int64_t *n, shp *t) { v_lin(n, t, 1); }
static void v_bias(const int64_t *n, shp *t) { t[0] = S((int)n[5] % 4 + 1, n), t[1] = SH(t[0].s[t[0].ndim - 1]); }
static void v_cast(const int64_t *n, shp *t) { t[0] = SH(n[0], n[1] * n[2]), t[1] = SH(n[1], n[0], n[2]); }

static mrcnn_tensor g_t[6];
static const mrcnn_tensor *P(const shp *t, int i) {
    if (t[i].null) return NULL;
    g_t[i] = tv(t[i].ndim, t[i].s);
    return &g_t[i];
}
#define A(i) ((mrcnn_tensor *)P(t, i))
static const mrcnn_activation none = MRCNN_ACT_NONE;
static void c_deconv_fwd(mrcnn_backend *be, const shp *t) {
    be->nn.deconv2x2_forward(be, A(0), A(1), A(2), none, A(3));
}
static void c_deconv_bwd(mrcnn_backend *be, const shp *t) {
    be->nn.deconv2x2_backward(be, A(0), A(1), A(2), MRCNN_ACT_NONE, NULL, A(3), MRCNN_GRAD_ADD, A(4), A(5));
}
static void c_relu_fwd(mrcnn_backend *be, const shp *t) { be->nn.relu_forward(be, A(0), A(1)); }
static void c_relu_bwd(mrcnn_backend *be, const shp *t) { be->nn.relu_backward(be, A(0), A(1), A(2)); }
static void c_add_fwd(mrcnn_backend *be, const shp *t) { be->nn.add_forward(be, A(0), A(1), none, A(2)); }
static void c_add_bwd(mrcnn_backend *be, const shp *t) { be->nn.add_backward(be, A(0), A(1), A(2)); }
static void c_ups_fwd(mrcnn_backend *be, const shp *t) { be->nn.upsample_add_forward(be, A(0), A(1), A(2)); }
static void c_ups_bwd(mrcnn_backend *be, const shp *t) { be->nn.upsample_add_backward(be, A(0), A(1), A(2)); }
static void c_lin_fwd(mrcnn_backend *be, const shp *t) { be->nn.linear_forward(be, A(0), A(1), A(2), none, A(3)); }
static void c_lin_bwd(mrcnn_backend *be, const shp *t) {
    be->nn.linear_backward(be, A(0), A(1), A(2), MRCNN_ACT_NONE, NULL, A(3), MRCNN_GRAD_ADD, A(4), A(5));
}
static void c_bias(mrcnn_backend *be, const shp *t) { be->nn.bias_grad(be, A(0), A(1)); }
static void c_cast(mrcnn_backend *be, const shp *t) { be->nn.cast(be, A(0), A(1)); }

typedef struct {
    const char *name;
    int n;
    void (*valid)(const int64_t *n, shp *t);
    int (*old)(const shp *t);
    void (*call)(mrcnn_backend *be, const shp *t);
} op_case;

static const op_case g_ops[] = {
    {"deconv2x2_forward", 4, v_deconv_fwd, old_deconv_fwd, c_deconv_fwd},
    {"deconv2x2_backward", 6, v_deconv_bwd, old_deconv_bwd, c_deconv_bwd},
    {"relu_forward", 2, v_like3, old_relu_fwd, c_relu_fwd},
    {"relu_backward", 3, v_like3, old_relu_bwd, c_relu_bwd},
    {"add_forward", 3, v_like3, old_add_fwd, c_add_fwd},
    {"add_backward", 3, v_like3, old_add_bwd, c_add_bwd},
    {"upsample_add_forward", 3, v_ups_fwd, old_ups_fwd, c_ups_fwd},
    {"upsample_add_backward", 3, v_ups_bwd, old_ups_bwd, c_ups_bwd},
    {"linear_forward", 4, v_lin_fwd, old_lin_fwd, c_lin_fwd},
    {"linear_backward", 6, v_lin_bwd, old_lin_bwd, c_lin_bwd},
    {"bias_grad", 2, v_bias, old_bias_grad, c_bias},
    {"cast", 2, v_cast, old_cast, c_cast},
};

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static int rnd(int n) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (int)(g_rng % (uint64_t)n);
}

/* One or two random edits: an extent +-1, doubled or 0, a dim dropped or added, an
 * argument NULL. */
static void mutate(shp *t, int n) {
    shp *a = &t[rnd(n)];
    int k = a->ndim ? rnd(a->ndim) : 0;
    switch (rnd(7)) {
    case 0: if (a->ndim) a->s[k] += 1; break;
    case 1: if (a->ndim && a->s[k] > 1) a->s[k] -= 1; break;
    case 2: if (a->ndim) a->s[k] *= 2; break;
    case 3: if (a->ndim > 1) a->ndim--; break;
    case 4: if (a->ndim < MRCNN_MAX_DIMS) a->s[a->ndim++] = 1 + rnd(2); break;
    case 5: if (a->ndim) a->s[k] = 0; break;
    default: a->null = 1; break;
    }
}

static int fails(mrcnn_backend *be, const op_case *op, const shp *t) {
    volatile int failed = 0;
    mrcnn_test_catch_begin();
    if (setjmp(mrcnn_test_jmp) == 0) op->call(be, t);
    else failed = 1;
    mrcnn_test_catch_end();
    return failed;
}

/* Entries that do nothing, one per line of the op list. */
#define BE_OP(table, name, params, ...)                                                                                \
    static void stub_##table##_##name params { (void)be; }
#define BE_OPR(table, name, ret, params, ...)                                                                          \
    static ret stub_##table##_##name params { return (ret)0; }
#include "mrcnn/backend_ops.def"
#undef BE_OP
#undef BE_OPR

/* A generic CPU backend whose nn entries are stubs: only the checks run. */
static mrcnn_backend *stub_backend(void) {
    mrcnn_backend *be = mrcnn_backend_cpu_create_generic();
#define BE_OP(table, name, ...)                                                                                        \
    if (!strcmp(#table, "nn")) be->table.name = stub_##table##_##name;
#define BE_OPR BE_OP
#include "mrcnn/backend_ops.def"
#undef BE_OP
#undef BE_OPR
    mrcnn_backend_validate(be);
    return be;
}

static void test_same_as_hand_rules(void **state) {
    mrcnn_backend *be = stub_backend();
    for (size_t o = 0; o < sizeof g_ops / sizeof *g_ops; o++) {
        const op_case *op = &g_ops[o];
        int n_ok = 0, n_bad = 0;
        for (int trial = 0; trial < 3000; trial++) {
            int64_t n[MRCNN_MAX_DIMS];
            for (int i = 0; i < MRCNN_MAX_DIMS; i++) n[i] = 1 + rnd(3);
            shp t[6];
            memset(t, 0, sizeof t);
            op->valid(n, t);
            int edits = trial % 3; // 0, 1 or 2 edits
            for (int e = 0; e < edits; e++) mutate(t, op->n);
            int old_ok = op->old(t), new_ok = !fails(be, op, t);
            if (old_ok != new_ok) {
                char line[512];
                size_t k = 0;
                for (int i = 0; i < op->n && k < sizeof line; i++) {
                    k += (size_t)snprintf(line + k, sizeof line - k, " [%d]", i);
                    if (t[i].null) k += (size_t)snprintf(line + k, sizeof line - k, "NULL");
                    for (int d = 0; d < t[i].ndim && !t[i].null && k < sizeof line; d++)
                        k += (size_t)snprintf(line + k, sizeof line - k, "%s%lld", d ? "," : "(", (long long)t[i].s[d]);
                    if (!t[i].null && k < sizeof line) k += (size_t)snprintf(line + k, sizeof line - k, ")");
                }
                fail_msg("%s: the hand rule %s, the generated one %s:%s (%s)", op->name, old_ok ? "accepts" : "refuses",
                         new_ok ? "accepts" : "refuses", line, new_ok ? "" : mrcnn_test_msg);
            }
            old_ok ? n_ok++ : n_bad++;
        }
        /* both outcomes were exercised */
        if (n_ok < 200 || n_bad < 200) fail_msg("%s: %d accepted, %d refused", op->name, n_ok, n_bad);
    }
    mrcnn_backend_destroy(be);
}

/* Every CHECK and HANDCHECK line is wrapped on the full CPU backend: none lost. */
static void test_all_wrapped(void **state) {
    mrcnn_backend *be = open_cpu();
    int n = 0;
#define WRAPPED_NOCHECK(table, name)
#define WRAPPED_CHECK(table, name)                                                                                     \
    if (!be->table.name || be->table.name == be->unchecked->table.name) fail_msg(#table "." #name " is not wrapped");  \
    n++;
#define WRAPPED_HANDCHECK WRAPPED_CHECK
#define BE_OP(table, name, params, args, trace, fields, check, ...) WRAPPED_##check(table, name)
#define BE_OPR(table, name, ret, params, args, trace, fields, check, ...) WRAPPED_##check(table, name)
#include "mrcnn/backend_ops.def"
#undef BE_OP
#undef BE_OPR
    // a floor, so a new checked entry needs no edit here: the 19 checked when it was written (the 18
    // of before the rules, 12 by rule and 6 by hand, and channel_copy) must stay checked
    if (n < 19) fail_msg("only %d entries are CHECK or HANDCHECK in backend_ops.def; 19 were", n);
    mrcnn_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_same_as_hand_rules),
        cmocka_unit_test(test_all_wrapped),
    };
    return cmocka_run_group_tests_name("shape_rule", tests, NULL, NULL);
}
