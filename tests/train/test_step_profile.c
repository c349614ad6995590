/* `mrcnn bench train --profile`'s summary (step_profile.h): calls by op kind, the
 * backend's upload counters and FLOPs by stage, from a step of known calls on the CPU
 * backend, and from a hand-written listing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/model.h"
#include "mrcnn/step_profile.h"
#include "test_util.h"

/* Known FLOPs: a 3x3 conv of 2 images 8x8x4 -> 8x8x5 (stride 1, pad 1) forward and
 * backward with dx and dw; a linear 6x10 -> 3 forward; one 1000-byte upload. */
typedef struct {
    mrcnn_backend *be;
    mrcnn_tensor x, w, y, dx, dw, lx, lw, ly, up;
} known_step;

static mrcnn_tensor make(const mrcnn_backend *be, mrcnn_dtype dt, int nd, const int64_t *shape) {
    mrcnn_tensor t = mrcnn_tensor_view(NULL, dt, MRCNN_DEVICE_CPU, nd, shape);
    t.data = be->mem.alloc(be, mrcnn_tensor_nbytes(&t), "test");
    be->mem.zero(be, &t);
    return t;
}

static void run_known(void *ctx) {
    known_step *k = ctx;
    const mrcnn_backend *be = k->be;
    static uint8_t bytes[1000];
    be->mem.write(be, &k->up, bytes);
    mrcnn_conv2d_desc d = {.n = 2, .h = 8, .w = 8, .c = 4, .k = 5, .r = 3, .s = 3, .stride_h = 1, .stride_w = 1,
                           .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1};
    be->nn.conv2d_forward(be, &d, &k->x, &k->w, NULL, MRCNN_ACT_NONE, &k->y);
    be->nn.conv2d_backward(be, &d, &k->x, &k->w, &k->y, MRCNN_ACT_NONE, NULL, &k->dx, MRCNN_GRAD_ADD, &k->dw, NULL);
    be->nn.linear_forward(be, &k->lx, &k->lw, NULL, MRCNN_ACT_NONE, &k->ly);
}

static void test_listing(void **state) {
    mrcnn_step_profile p;
    memset(&p, 0, sizeof p);
    const double conv = 2.0 * 2 * 8 * 8 * 5 * 3 * 3 * 4;
    const char *listing =
        "mem.write dst=uint8[1000]@0x1 bytes=1000\n"
        "nn.conv2d_forward d={n=2 h=8 w=8 c=4 k=5 r=3 s=3 stride=1,1 pad=1,1 dil=1,1} x=fp32[2,8,8,4]@0x2 "
        "w=fp32[5,3,3,4]@0x3 b=- act=0 y=fp32[2,8,8,5]@0x4\n"
        "nn.conv2d_backward d={n=2 h=8 w=8 c=4 k=5 r=3 s=3 stride=1,1 pad=1,1 dil=1,1} x=fp32[2,8,8,4]@0x2 "
        "w=fp32[5,3,3,4]@0x3 dy=fp32[2,8,8,5]@0x4 dx=fp32[2,8,8,4]@0x5 dw=fp32[5,3,3,4]@0x6 db=-\n"
        "nn.conv2d_backward d={n=7 h=14 w=14 c=4 k=5 r=3 s=3 stride=2,2 pad=1,1 dil=1,1} x=fp32[7,14,14,4]@0x2 "
        "w=fp32[5,3,3,4]@0x3 dy=fp32[7,7,7,5]@0x4 dx=- dw=fp32[5,3,3,4]@0x6 db=-\n"
        "nn.linear_forward x=fp32[6,10]@0x7 w=fp32[3,10]@0x8 b=- act=0 y=fp32[6,3]@0x9\n";
    mrcnn_step_profile_add_listing(&p, listing, 2);
    assert_int_equal(p.calls, 5);
    assert_int_equal(p.n_ops, 4);
    assert_string_equal(p.op[2], "nn.conv2d_backward");
    assert_int_equal(p.op_calls[2], 2);
    assert_true(p.flops[MRCNN_PROFILE_IMAGE] == 3 * conv);
    // the ROI-level conv: 7 rois, 14x14 -> 7x7 at stride 2, dw only
    assert_true(p.flops[MRCNN_PROFILE_MASK_HEAD] == 2.0 * 7 * 7 * 7 * 5 * 3 * 3 * 4);
    assert_true(p.flops[MRCNN_PROFILE_BOX_HEAD] == 2.0 * 6 * 10 * 3);
    // tensor bytes of the non-mem lines, every tensor counted once per mention
    const double fx = 2 * 8 * 8 * 4 * 4, fw = 5 * 3 * 3 * 4 * 4, fy = 2 * 8 * 8 * 5 * 4;
    const double bytes = (fx + fw + fy) + (fx + fw + fy + fx + fw) + (7 * 14 * 14 * 4 * 4 + fw + 7 * 7 * 7 * 5 * 4 + fw) +
                         (6 * 10 * 4 + 3 * 10 * 4 + 6 * 3 * 4);
    assert_true(p.bytes == bytes);
}

/* The profile run counts what the step did: its calls, by kind, and its one upload's
 * bytes from the backend's counters. */
static void test_counts_of_run(void **state) {
    known_step k = {.be = mrcnn_backend_cpu_create()};
    const mrcnn_backend *be = k.be;
    k.x = make(be, MRCNN_DTYPE_F32, 4, (int64_t[]){2, 8, 8, 4});
    k.dx = make(be, MRCNN_DTYPE_F32, 4, (int64_t[]){2, 8, 8, 4});
    k.w = make(be, MRCNN_DTYPE_F32, 4, (int64_t[]){5, 3, 3, 4});
    k.dw = make(be, MRCNN_DTYPE_F32, 4, (int64_t[]){5, 3, 3, 4});
    k.y = make(be, MRCNN_DTYPE_F32, 4, (int64_t[]){2, 8, 8, 5});
    k.lx = make(be, MRCNN_DTYPE_F32, 2, (int64_t[]){6, 10});
    k.lw = make(be, MRCNN_DTYPE_F32, 2, (int64_t[]){3, 10});
    k.ly = make(be, MRCNN_DTYPE_F32, 2, (int64_t[]){6, 3});
    k.up = make(be, MRCNN_DTYPE_U8, 1, (int64_t[]){1000});
    mrcnn_step_profile p;
    mrcnn_step_profile_run(k.be, NULL, 2, run_known, &k, NULL, &p);
    assert_int_equal(p.calls, 4);
    assert_int_equal(p.n_ops, 4);
    assert_string_equal(p.op[0], "mem.write");
    for (int i = 0; i < p.n_ops; i++) assert_int_equal(p.op_calls[i], 1);
    assert_int_equal(p.stats.uploads, 1);
    assert_int_equal(p.stats.upload_bytes, 1000);
    const double conv = 2.0 * 2 * 8 * 8 * 5 * 3 * 3 * 4;
    assert_true(p.flops[MRCNN_PROFILE_IMAGE] == 3 * conv);
    assert_true(p.flops[MRCNN_PROFILE_BOX_HEAD] == 2.0 * 6 * 10 * 3);
    /* the layer is gone again: later calls are not traced (a second run works) */
    mrcnn_step_profile_run(k.be, NULL, 2, run_known, &k, NULL, &p);
    assert_int_equal(p.calls, 4);
    mrcnn_tensor *all[] = {&k.x, &k.w, &k.y, &k.dx, &k.dw, &k.lx, &k.lw, &k.ly, &k.up};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->mem.free(be, all[i]->data);
    mrcnn_backend_destroy(k.be);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_listing), cmocka_unit_test(test_counts_of_run)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
