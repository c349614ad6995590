/* The CUDA backend's graph calls under a graph guard (check.h), as the trainer makes
 * them, on a GPU (skips without one): a capture that a prohibited call breaks in the
 * middle (a device synchronisation, which a capture on this thread refuses) ends the
 * run neither there nor at the next kernel's launch check or allocation; graph_end and the guard
 * report it, nothing of the region ran, and the region then runs directly with the
 * right result and no error left over from the capture. Whatever CUDA does with the
 * refused call (invalidate the capture, or only refuse the call), the outcome must be
 * one of: the graph dropped and nothing applied, or a valid graph that applies the
 * region exactly once per launch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "mrcnn/model.h"
#include "test_util.h"
#ifdef MRCNN_HAVE_CUDA_HEADERS
#include "mrcnn/cuda_check.h"

enum { N = 1000 };
static mrcnn_backend *G;

static void read_back(const mrcnn_tensor *t, float *h) { G->mem.read(G, t, h); }

static void test_capture_broken_midway(void **state) {
    int64_t n = N;
    float *ha = malloc(N * sizeof(float)), *hy = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) ha[i] = (float)(i % 7) - 3.0f;
    void *da = G->mem.alloc(G, N * sizeof(float), "a"), *dy = G->mem.alloc(G, N * sizeof(float), "y");
    mrcnn_tensor a = mrcnn_tensor_view(da, MRCNN_DTYPE_F32, G->device, 1, &n);
    mrcnn_tensor y = mrcnn_tensor_view(dy, MRCNN_DTYPE_F32, G->device, 1, &n);
    G->mem.write(G, &a, ha);
    G->mem.zero(G, &y);
    G->nn.add_backward(G, &a, &y, NULL); // warm-up outside the capture: y = a
    G->mem.zero(G, &y);
    G->mem.sync(G);

    mrcnn_graph_guard_begin();
    assert_int_equal(G->stream.graph_begin(G), 1);
    G->nn.add_backward(G, &a, &y, NULL); // recorded: y += a
    const cudaError_t refused = cudaDeviceSynchronize();
    G->nn.add_backward(G, &a, &y, NULL); // its launch check must not end the run
    void *scratch = G->mem.alloc(G, 4096, "scratch inside the broken capture"); // nor an allocation
    assert_non_null(scratch);
    G->mem.free(G, scratch);
    void *g = G->stream.graph_end(G);
    char why[1024];
    const int failures = mrcnn_graph_guard_end(why, sizeof why);
    printf("cudaDeviceSynchronize inside the capture: %s; graph %s; %d failure(s) recorded%s%s\n",
           cudaGetErrorName(refused), g ? "made" : "none", failures, failures ? ": " : "", why);
    if (g && failures == 0) { // CUDA only refused the call: the graph holds both adds
        G->stream.graph_launch(G, g);
        G->stream.graph_destroy(G, g);
        read_back(&y, hy);
        for (int i = 0; i < N; i++)
            if (hy[i] != 2 * ha[i]) fail_msg("y[%d] = %g after the graph, expected %g", i, hy[i], 2 * ha[i]);
    } else { // the capture was dropped: nothing of the region ran
        if (g) G->stream.graph_destroy(G, g);
        read_back(&y, hy);
        for (int i = 0; i < N; i++)
            if (hy[i] != 0) fail_msg("y[%d] = %g after a failed capture: the region half ran", i, hy[i]);
    }
    /* the direct run: no error inherited from the capture (the launch check is clean) */
    G->mem.zero(G, &y);
    G->nn.add_backward(G, &a, &y, NULL);
    read_back(&y, hy);
    for (int i = 0; i < N; i++)
        if (hy[i] != ha[i]) fail_msg("y[%d] = %g after the direct run, expected %g", i, hy[i], ha[i]);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    G->mem.free(G, da);
    G->mem.free(G, dy);
    free(ha);
    free(hy);
}

/* Outside a guard a failing library call still stops the run, with the call named;
 * inside one it is recorded (a synchronous, non-sticky error: an unknown device). */
static void test_guard_scope(void **state) {
    EXPECT_FAIL(MRCNN_CHECK_CUDA(cudaSetDevice(1 << 20)), "cudaSetDevice(1 << 20)");
    (void)cudaGetLastError();
    mrcnn_graph_guard_begin();
    MRCNN_CHECK_CUDA(cudaSetDevice(1 << 20));
    char why[1024];
    assert_int_equal(mrcnn_graph_guard_end(why, sizeof why), 1);
    assert_non_null(strstr(why, "cudaSetDevice(1 << 20) failed"));
    (void)cudaGetLastError();
    MRCNN_CHECK_CUDA(cudaSetDevice(0)); // the backend's device (mrcnn_backend_cuda_create(0, ...))
}

int main(void) {
    const char *why = NULL;
    G = mrcnn_backend_cuda_create(0, &why);
    if (!G) return test_gpu_skip(why);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_broken_midway),
        cmocka_unit_test(test_guard_scope),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mrcnn_backend_destroy(G);
    return rc;
}
#else
int main(void) { return test_skip("gpu", "built without the CUDA headers (GPU=0)"); }
#endif
