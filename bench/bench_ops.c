/* CPU op benchmark: conv2d forward, backward-data and backward-filter GFLOP/s at
 * ResNet-like shapes, beside OpenBLAS SGEMM measured in the same run at the conv's
 * own GEMM shape (M = N*P*Q, N = K, K = R*S*C) and at 2048^3.
 *
 * The SGEMM reference is the better of two ways to run OpenBLAS on all cores:
 * a plain cblas_sgemm on OpenBLAS's own thread pool, and mrcnn_gemm (OpenBLAS
 * single-threaded kernels on OpenMP threads, as the ops run it). The pool-threaded
 * runs come first, all together, because OpenBLAS's idle workers spin for a while
 * after each call and would steal the cores from whatever runs next.
 *
 * The machine is shared, so each figure is the fastest single call (the
 * undisturbed one), and the calls of every figure are spread over the whole run:
 * --rounds passes over all figures, each taking at least --reps calls and
 * --min-seconds / --rounds of calling per figure. A burst of load then hits the
 * reference and the convolutions alike.
 *
 *   bench_ops [--rounds R] [--reps N] [--min-seconds S]   (defaults: 5 rounds, 3 calls, 1 s) */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mrcnn/check.h"
#include "mrcnn/log.h"
#include "mrcnn/ops.h"
#include "mrcnn/rng.h"

typedef struct {
    int rounds, reps;
    double min_seconds; // per figure, over all rounds
} bench_opts;

typedef void (*bench_fn)(void *ctx);

/* One round of one figure: the fastest of >= reps calls and >= min_seconds/rounds. */
static double best_seconds(bench_fn fn, void *ctx, const bench_opts *o) {
    fn(ctx); // warm-up: page faults, thread start, caches
    double best = INFINITY, start = mrcnn_time_now();
    for (int r = 0; r < o->reps || mrcnn_time_now() - start < o->min_seconds / o->rounds; r++) {
        double t0 = mrcnn_time_now();
        fn(ctx);
        double dt = mrcnn_time_now() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

static float *rand_buf(int64_t n, uint64_t seed, const char *what) {
    float *x = MRCNN_MALLOC(sizeof(float) * (size_t)(n > 0 ? n : 1), what);
    mrcnn_rng r = mrcnn_rng_make(seed, 0, 0, MRCNN_RNG_TEST);
    for (int64_t i = 0; i < n; i++) x[i] = 2 * mrcnn_rng_uniform(&r, (uint64_t)i) - 1;
    return x;
}

/* ---- SGEMM reference: C (M, N) = A (M, K) B^T, B (N, K), the conv forward's product ---- */

typedef struct {
    int m, n, k;
    float *a, *b, *c;
} gemm_ctx;

static void run_cblas(void *p) {
    gemm_ctx *g = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->m, g->n, g->k, 1.0f, g->a, g->k, g->b, g->k, 0.0f, g->c, g->n);
}

static void run_mrcnn_gemm(void *p) {
    gemm_ctx *g = p;
    mrcnn_gemm(0, 1, g->m, g->n, g->k, 1.0f, g->a, g->k, g->b, g->k, 0.0f, g->c, g->n);
}

static gemm_ctx gemm_make(int m, int n, int k) {
    gemm_ctx g = {m, n, k, rand_buf((int64_t)m * k, 1, "bench A"), rand_buf((int64_t)n * k, 2, "bench B"),
                  rand_buf((int64_t)m * n, 3, "bench C")};
    return g;
}

static void gemm_free(gemm_ctx *g) { free(g->a), free(g->b), free(g->c); }

/* Keeps the best GFLOP/s of a figure over the rounds. */
static void measure(double *gflops, double flops, bench_fn fn, void *ctx, const bench_opts *o) {
    double g = flops / best_seconds(fn, ctx, o) * 1e-9;
    if (g > *gflops) *gflops = g;
}

/* ---- convolutions ---- */

typedef struct {
    const char *name;
    mrcnn_conv2d_desc d;
} conv_case;

typedef struct {
    const mrcnn_conv2d_desc *d;
    float *x, *w, *b, *y, *dy, *dx, *dw, *db;
} conv_ctx;

static void run_fwd(void *p) {
    conv_ctx *c = p;
    mrcnn_conv2d_forward(c->d, c->x, c->w, c->b, c->y);
}
static void run_bwd_data(void *p) {
    conv_ctx *c = p;
    mrcnn_conv2d_backward_data(c->d, c->dy, c->w, c->dx);
}
static void run_bwd_filter(void *p) {
    conv_ctx *c = p;
    mrcnn_conv2d_backward_filter(c->d, c->x, c->dy, c->dw, c->db);
}

static void gemm_shape(const mrcnn_conv2d_desc *d, int *m, int *n, int *k) {
    *m = d->n * mrcnn_conv2d_out_h(d) * mrcnn_conv2d_out_w(d);
    *n = d->k;
    *k = d->r * d->s * d->c;
}

/* Spot check of the forward against direct sums, so that a broken fast path is
 * never timed as a success. Returns max |y - ref| / max |ref| over the samples. */
static double spot_check(const mrcnn_conv2d_desc *d, const float *x, const float *w, const float *b, const float *y) {
    int P = mrcnn_conv2d_out_h(d), Q = mrcnn_conv2d_out_w(d);
    int64_t ny = (int64_t)d->n * P * Q * d->k;
    mrcnn_rng r = mrcnn_rng_make(7, 0, 0, MRCNN_RNG_TEST);
    double num = 0, den = 0;
    for (int t = 0; t < 256; t++) {
        int64_t o = (int64_t)(mrcnn_rng_uniform(&r, (uint64_t)t) * ny) % ny;
        int k = (int)(o % d->k), q = (int)(o / d->k % Q), p = (int)(o / d->k / Q % P), n = (int)(o / d->k / Q / P);
        double acc = b[k];
        for (int rr = 0; rr < d->r; rr++)
            for (int s = 0; s < d->s; s++) {
                int h = p * d->stride_h - d->pad_h + rr * d->dil_h, ww = q * d->stride_w - d->pad_w + s * d->dil_w;
                if (h < 0 || h >= d->h || ww < 0 || ww >= d->w) continue;
                for (int c = 0; c < d->c; c++)
                    acc += (double)x[(((int64_t)n * d->h + h) * d->w + ww) * d->c + c] *
                           w[(((int64_t)k * d->r + rr) * d->s + s) * d->c + c];
            }
        num = fmax(num, fabs(y[o] - acc));
        den = fmax(den, fabs(acc));
    }
    return den > 0 ? num / den : num;
}

static conv_ctx conv_make(const mrcnn_conv2d_desc *d) {
    int m, n, k;
    gemm_shape(d, &m, &n, &k);
    int64_t nx = (int64_t)d->n * d->h * d->w * d->c, nw = (int64_t)n * k, ny = (int64_t)m * n;
    conv_ctx c = {d, rand_buf(nx, 3, "x"), rand_buf(nw, 4, "w"), rand_buf(d->k, 5, "b"), rand_buf(ny, 0, "y"),
                  rand_buf(ny, 6, "dy"), rand_buf(nx, 0, "dx"), rand_buf(nw, 0, "dw"), rand_buf(d->k, 0, "db")};
    return c;
}

static void conv_free(conv_ctx *c) {
    free(c->x), free(c->w), free(c->b), free(c->y), free(c->dy), free(c->dx), free(c->dw), free(c->db);
}

int main(int argc, char **argv) {
    bench_opts o = {5, 3, 1.0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            o.rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            o.reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min-seconds") && i + 1 < argc)
            o.min_seconds = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--rounds R] [--reps N] [--min-seconds S]\n", argv[0]);
            return 2;
        }
    }
    MRCNN_CHECK(o.rounds > 0 && o.reps > 0 && o.min_seconds >= 0,
                "bench_ops: --rounds and --reps must be positive and --min-seconds not negative");
    const conv_case cases[] = {
        {"3x3 64->64 56x56 b2", mrcnn_conv2d_desc_make(2, 56, 56, 64, 64, 3, 1, 1)},
        {"1x1 256->64 56x56 b2", mrcnn_conv2d_desc_make(2, 56, 56, 256, 64, 1, 1, 0)},
        {"3x3 s2 128->128 56x56 b2", mrcnn_conv2d_desc_make(2, 56, 56, 128, 128, 3, 2, 1)},
        {"3x3 256->256 14x14 b2", mrcnn_conv2d_desc_make(2, 14, 14, 256, 256, 3, 1, 1)},
        {"7x7 s2 3->64 224x224 b2", mrcnn_conv2d_desc_make(2, 224, 224, 3, 64, 7, 2, 3)},
    };
    enum { N_CASES = sizeof cases / sizeof *cases, SQ = 2048 };
    const int threads = omp_get_max_threads();
    gemm_ctx sq = gemm_make(SQ, SQ, SQ), gm[N_CASES];
    conv_ctx cv[N_CASES];
    double flops[N_CASES];
    for (int i = 0; i < N_CASES; i++) {
        int m, n, k;
        gemm_shape(&cases[i].d, &m, &n, &k);
        gm[i] = gemm_make(m, n, k);
        cv[i] = conv_make(&cases[i].d);
        flops[i] = 2.0 * m * n * k;
        run_fwd(&cv[i]);
        double err = spot_check(&cases[i].d, cv[i].x, cv[i].w, cv[i].b, cv[i].y);
        if (!(err < 1e-4)) {
            fprintf(stderr, "bench_ops: %s forward is wrong (spot-check error %.3g); not timing anything\n", cases[i].name, err);
            return 1;
        }
    }
    const double sq_flops = 2.0 * SQ * SQ * SQ;
    double sq_blas = 0, sq_omp = 0, ref_blas[N_CASES] = {0}, ref_omp[N_CASES] = {0};
    double fwd[N_CASES] = {0}, bd[N_CASES] = {0}, bf[N_CASES] = {0};

    /* Phase 1: OpenBLAS on its own thread pool. */
    openblas_set_num_threads(threads);
    for (int r = 0; r < o.rounds; r++) {
        measure(&sq_blas, sq_flops, run_cblas, &sq, &o);
        for (int i = 0; i < N_CASES; i++) measure(&ref_blas[i], flops[i], run_cblas, &gm[i], &o);
    }
    /* Phase 2: OpenMP threads only; give the pool's spinning workers time to sleep. */
    openblas_set_num_threads(1);
    nanosleep(&(struct timespec){0, 500 * 1000 * 1000}, NULL);
    for (int r = 0; r < o.rounds; r++) {
        measure(&sq_omp, sq_flops, run_mrcnn_gemm, &sq, &o);
        for (int i = 0; i < N_CASES; i++) {
            measure(&ref_omp[i], flops[i], run_mrcnn_gemm, &gm[i], &o);
            measure(&fwd[i], flops[i], run_fwd, &cv[i], &o);
            measure(&bd[i], flops[i], run_bwd_data, &cv[i], &o);
            measure(&bf[i], flops[i], run_bwd_filter, &cv[i], &o);
        }
    }

    printf("CPU ops, %d threads. GFLOP/s of the fastest call; %d rounds, >= %d calls and >= %.2f s per figure and round.\n",
           threads, o.rounds, o.reps, o.min_seconds / o.rounds);
    printf("SGEMM %dx%dx%d: %.1f (OpenBLAS threads), %.1f (mrcnn_gemm: OpenMP + 1-thread OpenBLAS)\n\n", SQ, SQ, SQ, sq_blas,
           sq_omp);
    printf("%-26s %7s %8s %8s | %-14s %7s %7s | %6s %6s %6s\n", "conv (input HxW)", "fwd", "bwd-data", "bwd-filt",
           "gemm MxNxK", "sgemm", "sg-omp", "fwd%", "data%", "filt%");
    for (int i = 0; i < N_CASES; i++) {
        double ref = fmax(ref_blas[i], ref_omp[i]);
        char shape[48];
        snprintf(shape, sizeof shape, "%dx%dx%d", gm[i].m, gm[i].n, gm[i].k);
        printf("%-26s %7.1f %8.1f %8.1f | %-14s %7.1f %7.1f | %5.0f%% %5.0f%% %5.0f%%\n", cases[i].name, fwd[i], bd[i], bf[i],
               shape, ref_blas[i], ref_omp[i], 100 * fwd[i] / ref, 100 * bd[i] / ref, 100 * bf[i] / ref);
    }
    printf("\nsgemm: cblas_sgemm at the conv's GEMM shape on OpenBLAS's threads; sg-omp: the same product through\n"
           "mrcnn_gemm. fwd%%, data%%, filt%%: each pass over the better of the two.\n");
    printf("%s forward: %.0f%% of the same-run SGEMM at its shape (target >= 50%%)\n", cases[0].name,
           100 * fwd[0] / fmax(ref_blas[0], ref_omp[0]));
    gemm_free(&sq);
    for (int i = 0; i < N_CASES; i++) gemm_free(&gm[i]), conv_free(&cv[i]);
    return 0;
}
