/* The backend call trace (backend_trace.h): the hash that tests/train/test_step_trace.c
 * compares between training steps must tell apart exactly what a CUDA graph replay
 * would get wrong.
 *  - the same calls give the same hash; one scalar (one ulp), one shape, one pointer,
 *    one descriptor field or one more call changes it;
 *  - buffers allocated in the window count by their ordinal: two windows whose malloc
 *    returned other addresses hash alike; a pointer at an offset in one keeps it;
 *  - uploads, reads, syncs, allocations, frees and buffers left live are counted; an
 *    upload's host data does not enter the hash, its destination does;
 *  - a NULL entry stays NULL; uninstall restores the entries; every entry is wrapped;
 *  - a call an entry makes through the table (the CPU's step.sgd_update -> opt.sgd_update)
 *    is not the caller's: not hashed, but its upload counts;
 *  - the listing: kept lines, the first differing call, MRCNN_TRACE_DUMP's files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/backend.h"
#include "mrcnn/backend_trace.h"
#include "mrcnn/model.h" // mrcnn_backend_cpu_create
#include "mrcnn/step_ctl.h"
#include "test_support.h"
#include "test_util.h"

enum { V_BASE, V_SCALAR, V_SHAPE, V_POINTER, V_DESC, V_EXTRA_CALL, V_COUNT };
static const char *const v_names[V_COUNT] = {"base", "scalar", "shape", "pointer", "descriptor", "extra call"};

/* Parameters allocated before the window (raw addresses in the hash), as a model's. */
typedef struct {
    float *w, *w2; // conv filter (4, 3, 3, 2), twice
    float *acc;    // (4)
} params;

/* A small step: temporaries from mem.alloc inside the window, a conv, relu, fused add,
 * an axpy into a buffer from outside, frees. */
static void step_calls(mrcnn_backend *be, const params *p, int variant) {
    const int n = 1, h = 6, w = 6, c = 2, k = 4;
    mrcnn_conv2d_desc d = mrcnn_conv2d_desc_make(n, h, w, c, k, 3, 1, 1);
    if (variant == V_DESC) d.pad_h = d.pad_w = 2, d.dil_h = d.dil_w = 2; // same output shape, other fields
    const int oh = mrcnn_conv2d_out_h(&d), ow = mrcnn_conv2d_out_w(&d);
    const size_t xb = (size_t)n * h * w * c * sizeof(float), yb = (size_t)n * oh * ow * k * sizeof(float);
    float *xm = be->mem.alloc(be, xb, "x");
    float *ym = be->mem.alloc(be, 2 * yb, "y and z"); // two tensors in one buffer: offsets
    mrcnn_tensor x = mrcnn_tensor_view(xm, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 4, (int64_t[]){n, h, w, c});
    mrcnn_tensor wt = mrcnn_tensor_view(variant == V_POINTER ? p->w2 : p->w, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 4,
                                        (int64_t[]){k, 3, 3, c});
    mrcnn_tensor y = mrcnn_tensor_view(ym, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 4, (int64_t[]){n, oh, ow, k});
    mrcnn_tensor z =
        mrcnn_tensor_view((char *)ym + yb, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 4, (int64_t[]){n, oh, ow, k});
    be->mem.zero(be, &x);
    be->nn.conv2d_forward(be, &d, &x, &wt, NULL, MRCNN_ACT_NONE, &y);
    if (variant == V_SHAPE) { // same bytes, another shape: a different kernel launch
        mrcnn_tensor y2 = mrcnn_tensor_reshape(&y, 2, (int64_t[]){n * oh * ow, k});
        mrcnn_tensor z2 = mrcnn_tensor_reshape(&z, 2, (int64_t[]){n * oh * ow, k});
        be->nn.relu_forward(be, &y2, &z2);
    } else
        be->nn.relu_forward(be, &y, &z);
    be->nn.add_forward(be, &y, &z, MRCNN_ACT_RELU, &y);
    if (variant == V_EXTRA_CALL) be->nn.relu_forward(be, &y, &y);
    mrcnn_tensor acc = mrcnn_tensor_view(p->acc, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, (int64_t[]){k});
    mrcnn_tensor ys = mrcnn_tensor_view(ym, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, (int64_t[]){k});
    be->step.axpy(be, variant == V_SCALAR ? nextafterf(0.5f, 1.0f) : 0.5f, &ys, &acc);
    be->mem.free(be, ym);
    be->mem.free(be, xm);
}

static params params_alloc(mrcnn_backend *be) {
    params p;
    p.w = be->mem.alloc(be, 4 * 3 * 3 * 2 * sizeof(float), "w");
    p.w2 = be->mem.alloc(be, 4 * 3 * 3 * 2 * sizeof(float), "w2");
    p.acc = be->mem.alloc(be, 4 * sizeof(float), "acc");
    return p;
}

static void params_free(mrcnn_backend *be, params *p) {
    be->mem.free(be, p->w);
    be->mem.free(be, p->w2);
    be->mem.free(be, p->acc);
}

static mrcnn_trace_summary traced(mrcnn_backend *be, const params *p, int variant) {
    mrcnn_trace_summary s;
    mrcnn_backend_trace_begin(be);
    step_calls(be, p, variant);
    mrcnn_backend_trace_end(be, &s);
    return s;
}

static void test_same_calls_same_hash(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_backend_trace_install(be);
    mrcnn_backend_trace_keep_listing(be, 1);
    params p = params_alloc(be);
    mrcnn_trace_summary a = traced(be, &p, V_BASE), b = traced(be, &p, V_BASE);
    printf("base: %llu calls, hash %016llx\n", (unsigned long long)a.calls, (unsigned long long)a.hash);
    assert_int_equal(a.calls, 9); // 2 allocs, zero, conv, relu, add, axpy, 2 frees, and nothing else
    assert_int_equal(a.hash, b.hash);
    assert_int_equal(a.calls, b.calls);
    char msg[1024];
    assert_int_equal(test_trace_diff(&a, &b, msg, sizeof msg), -1);
    /* Each change alone shows, and the listing names the call where it does. */
    const int64_t first_diff[V_COUNT] = {-1, 6, 4, 3, 3, 6};
    for (int v = V_SCALAR; v < V_COUNT; v++) {
        mrcnn_trace_summary c = traced(be, &p, v);
        int64_t at = test_trace_diff(&a, &c, msg, sizeof msg);
        printf("%-10s hash %016llx, first diff %s\n", v_names[v], (unsigned long long)c.hash, msg);
        if (c.hash == a.hash) fail_msg("changing the %s left the hash equal", v_names[v]);
        assert_int_equal(at, first_diff[v]);
        mrcnn_trace_summary_free(&c);
    }
    /* The scalar is in the line as a value that round-trips (one ulp apart). */
    mrcnn_trace_summary c = traced(be, &p, V_SCALAR);
    test_trace_diff(&a, &c, msg, sizeof msg);
    assert_non_null(strstr(msg, "step.axpy mult=0.5 "));
    assert_non_null(strstr(msg, "step.axpy mult=0.50000006"));
    mrcnn_trace_summary_free(&c);
    mrcnn_trace_summary_free(&a);
    mrcnn_trace_summary_free(&b);
    params_free(be, &p);
    mrcnn_backend_destroy(be); // through the trace's destroy: unregisters (ASan: no leak)
}

/* How pointers are written: a buffer of the window as "a<ordinal>+<offset>", any other
 * one as its address. */
static void test_pointer_forms(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_backend_trace_install(be);
    mrcnn_backend_trace_keep_listing(be, 1);
    float *outside = be->mem.alloc(be, 64 * sizeof(float), "outside");
    mrcnn_backend_trace_begin(be);
    float *x = be->mem.alloc(be, 64 * sizeof(float), "x");
    mrcnn_tensor t = mrcnn_tensor_view(x + 8, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 2, (int64_t[]){2, 4});
    be->mem.zero(be, &t);
    mrcnn_tensor o = mrcnn_tensor_view(outside + 8, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, (int64_t[]){8});
    be->mem.zero(be, &o);
    be->mem.free(be, x);
    mrcnn_trace_summary s;
    mrcnn_backend_trace_end(be, &s);
    printf("%s", s.listing);
    assert_non_null(strstr(s.listing, "mem.alloc bytes=256 what=x -> a0\n"));
    assert_non_null(strstr(s.listing, "mem.zero t=fp32[2,4]cpu@a0+32\n"));
    char want[96];
    snprintf(want, sizeof want, "mem.zero t=fp32[8]cpu@%p\n", (void *)(outside + 8));
    assert_non_null(strstr(s.listing, want));
    assert_non_null(strstr(s.listing, "mem.free p=a0+0\n"));
    /* A strided view shows its strides. */
    mrcnn_backend_trace_begin(be);
    mrcnn_tensor st = o;
    st.ndim = 2, st.shape[0] = 2, st.shape[1] = 2, st.stride[0] = 4, st.stride[1] = 1;
    be->step.nonfinite_or(be, &st, &o);
    mrcnn_trace_summary s2;
    mrcnn_backend_trace_end(be, &s2);
    assert_non_null(strstr(s2.listing, "t=fp32[2,2]s[4,1]cpu@"));
    mrcnn_trace_summary_free(&s);
    mrcnn_trace_summary_free(&s2);
    be->mem.free(be, outside);
    mrcnn_backend_destroy(be);
}

/* The ordinals make windows with different malloc addresses equal: checked directly,
 * with the addresses observed to differ. */
static void test_ordinals_across_addresses(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_backend_trace_install(be);
    void *seen[2];
    mrcnn_trace_summary s[2];
    void *hold = NULL;
    for (int r = 0; r < 2; r++) {
        mrcnn_backend_trace_begin(be);
        float *buf = be->mem.alloc(be, 4096, "buf");
        seen[r] = buf;
        mrcnn_tensor t = mrcnn_tensor_view(buf + 16, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 2, (int64_t[]){4, 8});
        be->mem.zero(be, &t);
        if (r == 0) hold = buf; // not freed in window 0: window 1 must get another address
        else be->mem.free(be, buf);
        mrcnn_backend_trace_end(be, &s[r]);
    }
    assert_ptr_not_equal(seen[0], seen[1]);
    assert_int_equal(s[0].live, 1);
    assert_int_equal(s[1].live, 0);
    assert_int_equal(s[0].calls + 1, s[1].calls);
    /* Without the free, the hashes agree although the addresses differ. */
    mrcnn_trace_summary u[2];
    void *addr[2];
    for (int r = 0; r < 2; r++) {
        mrcnn_backend_trace_begin(be);
        float *buf = be->mem.alloc(be, 4096, "buf");
        addr[r] = buf;
        mrcnn_tensor t = mrcnn_tensor_view(buf + 16, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 2, (int64_t[]){4, 8});
        be->mem.zero(be, &t);
        mrcnn_backend_trace_end(be, &u[r]);
        if (r == 0) continue;
        be->mem.free(be, addr[0]);
        be->mem.free(be, addr[1]);
    }
    assert_ptr_not_equal(addr[0], addr[1]);
    assert_int_equal(u[0].hash, u[1].hash);
    be->mem.free(be, hold);
    mrcnn_backend_destroy(be);
}

/* Uploads, reads and syncs in a window; an upload's host data is not hashed. */
static void test_counts(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_backend_trace_install(be);
    float *dev = be->mem.alloc(be, 8 * sizeof(float), "dev");
    mrcnn_tensor t = mrcnn_tensor_view(dev, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, (int64_t[]){8});
    float host1[8] = {1, 2, 3, 4, 5, 6, 7, 8}, host2[8] = {0}, back[8];
    mrcnn_trace_summary s[2];
    for (int r = 0; r < 2; r++) {
        mrcnn_backend_trace_begin(be);
        be->mem.write(be, &t, r == 0 ? host1 : host2); // other data from another host address
        be->mem.write(be, &t, host1);
        be->mem.read(be, &t, back);
        be->mem.sync(be);
        (void)be->opt.nonfinite(be, &t);
        void *tmp = be->mem.alloc(be, 64, "tmp");
        void *tmp2 = be->mem.alloc(be, 64, "tmp2");
        be->mem.free(be, tmp);
        mrcnn_backend_trace_end(be, &s[r]);
        be->mem.free(be, tmp2);
    }
    assert_int_equal(s[0].hash, s[1].hash);
    assert_int_equal(s[0].uploads, 2);
    assert_int_equal(s[0].reads, 2); // mem.read and nonfinite's flag
    assert_int_equal(s[0].syncs, 1);
    assert_int_equal(s[0].allocs, 2);
    assert_int_equal(s[0].frees, 1);
    assert_int_equal(s[0].live, 1);
    assert_int_equal(s[0].calls, 8);
    /* The backend's own counters over the window: the read, nonfinite's read + sync. */
    assert_int_equal(s[0].stats.uploads, 2);
    assert_int_equal(s[0].stats.reads, 2);
    assert_int_equal(s[0].stats.syncs, 3);
    /* An upload to another destination differs. */
    mrcnn_backend_trace_begin(be);
    mrcnn_tensor t4 = mrcnn_tensor_view(dev + 4, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, (int64_t[]){4});
    be->mem.write(be, &t4, host1);
    mrcnn_trace_summary w1, w2;
    mrcnn_backend_trace_end(be, &w1);
    mrcnn_backend_trace_begin(be);
    t4.data = dev;
    be->mem.write(be, &t4, host1);
    mrcnn_backend_trace_end(be, &w2);
    assert_int_not_equal(w1.hash, w2.hash);
    /* Outside a window nothing is counted, and the window after starts from zero. */
    be->mem.write(be, &t, host1);
    mrcnn_backend_trace_begin(be);
    mrcnn_trace_summary e;
    mrcnn_backend_trace_end(be, &e);
    assert_int_equal(e.calls, 0);
    assert_int_equal(e.uploads, 0);
    be->mem.free(be, dev);
    mrcnn_backend_destroy(be);
}

/* Every entry is wrapped; a NULL one stays NULL; uninstall puts the entries back. */
static void test_install(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create_generic(); // no ROIAlign, no detection ops
    mrcnn_backend before = *be;
    assert_null(be->nn.roi_align_forward);
    assert_null(be->det.rpn_targets);
    mrcnn_backend_trace_install(be);
    mrcnn_backend_trace_install(be); // twice: nothing more
    assert_null(be->nn.roi_align_forward);
    assert_null(be->det.rpn_targets);
    assert_null(be->det.count_hint);
    assert_true(be->nn.conv2d_forward != before.nn.conv2d_forward);
    assert_true(be->mem.alloc != before.mem.alloc);
    assert_true(be->info.peak_mb != before.info.peak_mb);
    /* Every function pointer from mem.alloc up to state: wrapped exactly where set. */
    void (**fp)(void) = (void (**)(void)) & be->mem.alloc;
    void (**old)(void) = (void (**)(void)) & before.mem.alloc;
    void (**end)(void) = (void (**)(void)) & be->state;
    for (int i = 0; fp + i < end; i++) {
        if (!old[i]) assert_null(fp[i]);
        else if (fp[i] == old[i]) fail_msg("backend entry %d is not wrapped", i);
    }
    /* info, set_precision: wrapped and still working. */
    char name[32];
    assert_string_equal(be->info.device_name(be, name, sizeof name), "cpu");
    mrcnn_backend_trace_begin(be);
    be->set_precision(be, MRCNN_DTYPE_F32);
    mrcnn_trace_summary s;
    mrcnn_backend_trace_end(be, &s);
    assert_int_equal(s.calls, 1);
    EXPECT_FAIL(mrcnn_backend_trace_end(be, &s), "no window open");
    mrcnn_backend_trace_uninstall(be);
    assert_true(be->nn.conv2d_forward == before.nn.conv2d_forward);
    assert_true(be->mem.alloc == before.mem.alloc);
    assert_true(be->destroy == before.destroy);
    EXPECT_FAIL(mrcnn_backend_trace_begin(be), "not traced");
    mrcnn_backend_destroy(be);
}

/* An entry that calls the table itself: one recorded call, its upload counted. */
static void cast_that_uploads(const mrcnn_backend *be, const mrcnn_tensor *x, mrcnn_tensor *y) {
    be->mem.write(be, y, x->data);
}

static void test_nested_calls(void **state) {
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    be->nn.cast = cast_that_uploads;
    mrcnn_backend_trace_install(be);
    mrcnn_backend_trace_keep_listing(be, 1);
    float a[4] = {1, 2, 3, 4}, b[4];
    mrcnn_tensor x = mrcnn_tensor_view(a, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, (int64_t[]){4});
    mrcnn_tensor y = mrcnn_tensor_view(b, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, (int64_t[]){4});
    /* the CPU's step.sgd_update reads lr from the control vector and calls opt.sgd_update */
    float p[4] = {1, 1, 1, 1}, g[4] = {1, 1, 1, 1}, v[4] = {0}, ctl[MRCNN_CTL_STEP] = {0};
    ctl[MRCNN_CTL_APPLY] = 1, ctl[MRCNN_CTL_GRAD_SCALE] = 1, ctl[MRCNN_CTL_LR] = 0.5f;
    mrcnn_tensor pt = mrcnn_tensor_view(p, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, (int64_t[]){4});
    mrcnn_tensor gt = mrcnn_tensor_view(g, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, (int64_t[]){4});
    mrcnn_tensor vt = mrcnn_tensor_view(v, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, (int64_t[]){4});
    mrcnn_tensor ct = mrcnn_tensor_view(ctl, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, (int64_t[]){MRCNN_CTL_STEP});
    mrcnn_trace_summary s[2];
    for (int r = 0; r < 2; r++) {
        ctl[MRCNN_CTL_LR] = r ? 0.25f : 0.5f; // device data: the same call
        mrcnn_backend_trace_begin(be);
        be->nn.cast(be, &x, &y);
        be->step.sgd_update(be, &pt, &gt, &vt, NULL, 0.9f, 0.0f, &ct);
        mrcnn_backend_trace_end(be, &s[r]);
    }
    assert_float_equal(p[0], 1 - 0.5f - 0.25f * 1.9f, 1e-6);
    assert_int_equal(s[0].calls, 2);
    assert_int_equal(s[0].uploads, 1);
    assert_int_equal(s[0].hash, s[1].hash);
    assert_non_null(strstr(s[0].listing, "nn.cast "));
    assert_non_null(strstr(s[0].listing, "step.sgd_update "));
    assert_null(strstr(s[0].listing, "mem.write"));
    assert_null(strstr(s[0].listing, "opt.sgd_update"));
    mrcnn_trace_summary_free(&s[0]);
    mrcnn_trace_summary_free(&s[1]);
    mrcnn_backend_destroy(be);
}

/* MRCNN_TRACE_DUMP=<prefix>: window k's lines in <prefix>.<k>.txt. */
static void test_dump_files(void **state) {
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s", test_tmp_path("trace"));
    setenv("MRCNN_TRACE_DUMP", prefix, 1);
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    mrcnn_backend_trace_install(be);
    unsetenv("MRCNN_TRACE_DUMP");
    params p = params_alloc(be);
    mrcnn_trace_summary a = traced(be, &p, V_BASE), b = traced(be, &p, V_SCALAR);
    char path[600], text[4][8192];
    for (int k = 1; k <= 2; k++) {
        snprintf(path, sizeof path, "%s.%d.txt", prefix, k);
        FILE *f = fopen(path, "r");
        if (!f) fail_msg("MRCNN_TRACE_DUMP wrote no %s", path);
        size_t n = fread(text[k], 1, sizeof text[k] - 1, f);
        text[k][n] = 0;
        fclose(f);
    }
    assert_non_null(strstr(text[1], "#3 nn.conv2d_forward d={n=1 h=6 w=6 c=2 k=4 r=3 s=3 stride=1,1 pad=1,1 dil=1,1} "
                                    "x=fp32[1,6,6,2]cpu@a0+0 w=fp32[4,3,3,2]cpu@0x"));
    assert_non_null(strstr(text[1], "#6 step.axpy mult=0.5 "));
    assert_non_null(strstr(text[2], "#6 step.axpy mult=0.50000006 "));
    assert_non_null(strstr(text[1], "y=fp32[1,6,6,4]cpu@a1+0\n"));
    assert_non_null(strstr(text[1], "nn.relu_forward x=fp32[1,6,6,4]cpu@a1+0 y=fp32[1,6,6,4]cpu@a1+576\n"));
    /* dump to a stream, one line a call */
    FILE *f = tmpfile();
    mrcnn_backend_trace_dump(be, f);
    mrcnn_trace_summary c = traced(be, &p, V_BASE);
    mrcnn_backend_trace_dump(be, NULL);
    rewind(f);
    int lines = 0;
    char buf[4096];
    while (fgets(buf, sizeof buf, f)) {
        assert_non_null(strstr(buf, "trace[3] #"));
        lines++;
    }
    fclose(f);
    assert_int_equal(lines, (int)c.calls);
    assert_int_equal(c.hash, a.hash);
    params_free(be, &p);
    mrcnn_backend_destroy(be);
    (void)b;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_calls_same_hash),
        cmocka_unit_test(test_pointer_forms),
        cmocka_unit_test(test_ordinals_across_addresses),
        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_install),
        cmocka_unit_test(test_nested_calls),
        cmocka_unit_test(test_dump_files),
    };
    return cmocka_run_group_tests_name("backend_trace", tests, test_tmp_setup, test_tmp_teardown);
}
