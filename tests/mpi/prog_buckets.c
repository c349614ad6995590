/* Multi-rank checks of src/dist (run by test_buckets.sh and test_comm_timeout.sh):
 *   prog_buckets check            buckets average every gradient; weights broadcast
 *   prog_buckets check-gpu        the same over GPU arenas (CUDA backend): NCCL when
 *                                 every rank has its own GPU, else MPI through host
 *                                 staging; exits 77 without a GPU
 *   prog_buckets loop DIR TIMEOUT  all-reduce steps forever under the watchdog
 *                                  (writes DIR/pid.<rank>; a test stops or kills one) */
#include "test_util.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrcnn/dist.h"
#include "mrcnn/log.h"
#include "mrcnn/rng.h"

static int g_bad = 0;
#define EXPECT(cond, ...)                                              \
    do {                                                               \
        if (!(cond)) {                                                 \
            fprintf(stderr, "FAIL [rank %d] %s:%d: ", mrcnn_log_rank(), __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                              \
            fputc('\n', stderr);                                       \
            g_bad++;                                                   \
        }                                                              \
    } while (0)

static const mrcnn_backend *g_be = NULL; // GPU backend in check-gpu mode

static void make_arena(mrcnn_arena *a, const char *name) {
    mrcnn_arena_init(a, name, MRCNN_DEVICE_CPU);
    /* Sizes chosen so that a 4 KiB bucket target cuts several buckets, one larger
     * than the target (a single big parameter). */
    const int64_t sizes[] = {300, 7, 1000, 64, 2000, 5, 128, 256, 33, 900};
    char n[32];
    for (int i = 0; i < 10; i++) {
        snprintf(n, sizeof n, "p%d", i);
        mrcnn_arena_add(a, n, MRCNN_DTYPE_F32, 1, &sizes[i]);
    }
    if (!g_be) {
        mrcnn_arena_commit(a, NULL, NULL);
        return;
    }
    a->device = MRCNN_DEVICE_GPU;
    a->base = g_be->mem.alloc(g_be, a->size, name);
    a->free_fn = NULL;
    for (int i = 0; i < a->n_entries; i++) {
        a->entries[i].tensor.data = a->base + a->entries[i].offset;
        a->entries[i].tensor.device = MRCNN_DEVICE_GPU;
    }
}

/* Host view of an arena: itself on the CPU, a copy (to free) on the GPU. */
static float *host_of(mrcnn_arena *a) {
    if (!g_be) return (float *)a->base;
    float *h = malloc(a->size);
    int64_t n = (int64_t)(a->size / sizeof(float));
    mrcnn_tensor t = mrcnn_tensor_view(a->base, MRCNN_DTYPE_F32, MRCNN_DEVICE_GPU, 1, &n);
    g_be->mem.read(g_be, &t, h);
    return h;
}
static void host_to(mrcnn_arena *a, float *h) { // writes back and frees a GPU copy
    if (!g_be) return;
    int64_t n = (int64_t)(a->size / sizeof(float));
    mrcnn_tensor t = mrcnn_tensor_view(a->base, MRCNN_DTYPE_F32, MRCNN_DEVICE_GPU, 1, &n);
    g_be->mem.write(g_be, &t, h);
    g_be->mem.sync(g_be);
    free(h);
}
static void host_done(float *h) {
    if (g_be) free(h);
}
static void free_arena(mrcnn_arena *a) {
    if (g_be && a->base) g_be->mem.free(g_be, a->base);
    a->base = NULL;
    mrcnn_arena_free(a);
}

static float grad_value(int rank, int param, int64_t k) { return (float)(rank + 1) * 0.5f + 0.01f * param + 1e-4f * (float)k; }

static int run_check(mrcnn_dist *d) {
    mrcnn_arena params, grads;
    make_arena(&params, "params");
    make_arena(&grads, "grads");
    /* Broadcast: every rank starts from different weights, ends with rank 0's. */
    float *w = host_of(&params);
    size_t nw = params.size / sizeof(float);
    for (size_t i = 0; i < nw; i++) w[i] = (float)d->rank * 1000.0f + (float)i;
    host_to(&params, w);
    mrcnn_dist_broadcast_arena(d, g_be, &params);
    w = host_of(&params);
    for (size_t i = 0; i < nw; i++)
        if (w[i] != (float)i) {
            EXPECT(0, "weight %zu is %g after the broadcast, rank 0 had %g", i, w[i], (double)i);
            break;
        }
    host_done(w);

    mrcnn_buckets bk;
    mrcnn_buckets_init(&bk, d, g_be, &grads, 4096);
    if (d->rank == 0 && g_be) printf("gpu arenas, %s path\n", bk.use_nccl ? "NCCL" : "MPI host-staging");
    /* Layout: reverse order, contiguous, every parameter in exactly one bucket. */
    EXPECT(bk.n_buckets >= 3, "only %d buckets", bk.n_buckets);
    EXPECT(bk.b[0].last_param == grads.n_entries - 1, "bucket 0 must end with the last parameter");
    EXPECT(bk.b[bk.n_buckets - 1].first_param == 0, "the last bucket must start at parameter 0");
    for (int i = 1; i < bk.n_buckets; i++) {
        EXPECT(bk.b[i].last_param == bk.b[i - 1].first_param - 1, "bucket %d not adjacent", i);
        EXPECT(bk.b[i].offset + bk.b[i].bytes <= bk.b[i - 1].offset, "bucket %d overlaps", i);
        EXPECT(bk.b[i].bytes <= 4096 || bk.b[i].n_params == 1, "bucket %d: %zu bytes", i, bk.b[i].bytes);
    }
    for (int step = 0; step < 3; step++) {
        /* Step 2 leaves the wait to the device (host_wait 0): on the NCCL path the read
         * below must still see the averages, ordered by the compute stream's wait on
         * NCCL's event; drain() then checks the all-reduces finished. The MPI path
         * ignores the flag. */
        bk.host_wait = step != 2;
        mrcnn_buckets_reset(&bk);
        float *gh = host_of(&grads);
        for (int p = 0; p < grads.n_entries; p++) {
            mrcnn_tensor *t = mrcnn_arena_get(&grads, p);
            float *g = gh + grads.entries[p].offset / sizeof(float);
            for (int64_t k = 0; k < mrcnn_tensor_numel(t); k++) g[k] = grad_value(d->rank, p, k) * (float)(step + 1);
        }
        host_to(&grads, gh);
        /* Ranks mark parameters ready in different orders; step 1 leaves two
         * unmarked (parameters without a gradient), which wait() must launch. */
        for (int j = 0; j < grads.n_entries; j++) {
            int p = grads.n_entries - 1 - j;
            if (d->rank % 2 == 1) p = (j * 3 + step) % grads.n_entries; // a permutation (gcd(3,10)=1)
            if (step == 1 && (p == 4 || p == 0)) continue;
            mrcnn_buckets_mark_ready(&bk, p);
        }
        mrcnn_buckets_wait(&bk);
        gh = host_of(&grads);
        mrcnn_buckets_drain(&bk);
        for (int p = 0; p < grads.n_entries; p++) {
            mrcnn_tensor *t = mrcnn_arena_get(&grads, p);
            const float *g = gh + grads.entries[p].offset / sizeof(float);
            for (int64_t k = 0; k < mrcnn_tensor_numel(t); k++) {
                double want = 0;
                for (int r = 0; r < d->world_size; r++) want += grad_value(r, p, k) * (float)(step + 1);
                want /= d->world_size;
                if (fabs(g[k] - want) > 1e-5 * fabs(want)) {
                    EXPECT(0, "step %d: grad %s[%lld] = %.8g, want the average %.8g", step, grads.entries[p].name,
                           (long long)k, g[k], want);
                    break;
                }
            }
        }
        host_done(gh);
    }
    mrcnn_buckets_free(&bk);
    free_arena(&params);
    free_arena(&grads);
    int bad = g_bad;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, d->comm); // any rank's failure fails the run
    if (d->rank == 0) printf("%s: %d ranks, buckets and broadcast\n", bad ? "FAILED" : "ok", d->world_size);
    return bad ? 1 : 0;
}

static int run_loop(mrcnn_dist *d, const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/pid.%d", dir, d->rank);
    FILE *f = fopen(path, "w");
    if (!f) return 2;
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    mrcnn_arena grads;
    make_arena(&grads, "grads");
    mrcnn_buckets bk;
    mrcnn_buckets_init(&bk, d, NULL, &grads, 4096);
    for (long step = 0;; step++) {
        mrcnn_buckets_reset(&bk);
        for (int p = grads.n_entries - 1; p >= 0; p--) mrcnn_buckets_mark_ready(&bk, p);
        mrcnn_buckets_wait(&bk);
        double v = 1;
        mrcnn_dist_allreduce_sum_f64(d, &v, 1, "step counter");
        if (d->rank == 0 && step % 20 == 0) {
            printf("step %ld\n", step);
            fflush(stdout);
        }
        usleep(20000);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: prog_buckets check | loop DIR TIMEOUT_S\n");
        return 2;
    }
    int loop = !strcmp(argv[1], "loop"), gpu = !strcmp(argv[1], "check-gpu");
    int n_gpu = gpu ? mrcnn_backend_cuda_device_count() : 0;
    if (gpu && n_gpu == 0) {
        return test_gpu_skip("no CUDA device visible, or a build without CUDA");
    }
    mrcnn_dist d;
    mrcnn_dist_init(&d, &argc, &argv, MPI_THREAD_MULTIPLE, n_gpu, loop && argc > 3 ? atof(argv[3]) : 0);
    mrcnn_backend *be = NULL;
    if (gpu) {
        const char *why = NULL;
        be = mrcnn_backend_cuda_create(d.device, &why);
        if (!be) {
            fprintf(stderr, "FAIL: CUDA backend on device %d: %s\n", d.device, why);
            return 1;
        }
        g_be = be;
        /* NCCL wants one GPU per rank: with fewer GPUs than ranks on the node, the MPI
         * staging path is what runs (and is tested). */
        const char *nwhy = NULL;
        if (d.local_size <= n_gpu && !mrcnn_dist_nccl_init(&d, &nwhy) && d.rank == 0)
            printf("NCCL unavailable: %s\n", nwhy);
    }
    int rc = loop ? run_loop(&d, argv[2]) : run_check(&d);
    if (be) mrcnn_backend_destroy(be);
    mrcnn_dist_finalize(&d);
    return rc;
}
