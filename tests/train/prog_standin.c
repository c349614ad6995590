/* The trainer (src/train/trainer.c) driven by a small stand-in model, so the loop,
 * buckets, checkpoints, loss scaler, signals and multi-rank equivalence are tested
 * without the Mask R-CNN model:
 *   y = W x + b over "images" keyed by their global index (each image has 1..3
 *   rows; x and the targets are Philox draws), two loss terms (squared error of the
 *   first and the second half of the outputs), normalized by the number of rows of
 *   the whole global batch: each rank all-reduces its row count and divides by
 *   (global rows / ranks), so that the average over ranks of the gradients equals
 *   the single-rank gradient (the rule the Mask R-CNN losses need too).
 * fp16/bf16 emulate rounded storage: outputs and the scaled output gradients are
 * rounded to the storage dtype, so a loss scale too large overflows to Inf.
 *
 * usage: prog_standin OUTDIR [--set K=V]... [--resume] [--max-steps N]
 *          [--inject-inf STEP[:COUNT]] [--big N] [--dump FILE] [--sleep-ms MS]
 *          [--comm-timeout S] [--fixed-rows]
 * --fixed-rows gives every image 2 rows, so that a micro-batch's normalizer is the
 * same whatever images it holds (then accumulation equals a larger batch too).
 * --dump writes the final weights (rank 0, raw fp32) for comparisons.
 * The backend here is a host one (memory, sgd_update, nonfinite, a graph_begin that
 * cannot capture, and the host step ops of backend_cpu_step.c) with the semantics of backend.h, so this program does not
 * depend on the CPU backend's nn ops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrcnn/check.h"
#include "mrcnn/half.h"
#include "mrcnn/log.h"
#include "mrcnn/precision.h"
#include "mrcnn/rng.h"
#include "mrcnn/step_ctl.h"
#include "mrcnn/trainer.h"

enum { D_IN = 8, D_OUT = 4, N_IMAGES = 64 };

/* ---- host backend: only what the trainer calls ---- */
static void *h_alloc(const mrcnn_backend *be, size_t bytes, const char *what) {
    void *p = aligned_alloc(256, (bytes + 255) / 256 * 256);
    MRCNN_CHECK(p != NULL, "out of memory for %s", what);
    return p;
}
static void h_free(const mrcnn_backend *be, void *p) { free(p); }
static void h_zero(const mrcnn_backend *be, mrcnn_tensor *t) { memset(t->data, 0, mrcnn_tensor_nbytes(t)); }
static void h_write(const mrcnn_backend *be, mrcnn_tensor *t, const void *src) { memcpy(t->data, src, mrcnn_tensor_nbytes(t)); }
static void h_read(const mrcnn_backend *be, const mrcnn_tensor *t, void *dst) { memcpy(dst, t->data, mrcnn_tensor_nbytes(t)); }
static void h_sync(const mrcnn_backend *be) {}
static void h_set_precision(mrcnn_backend *be, mrcnn_dtype s) { be->storage = s; }
static void h_sgd(const mrcnn_backend *be, mrcnn_tensor *params, const mrcnn_tensor *grads, mrcnn_tensor *mom,
                  const mrcnn_tensor *mask, float lr, float mc, float wd, float gs) {
    float *p = params->data, *v = mom->data;
    const float *g = grads->data, *m = mask->data;
    int64_t n = mrcnn_tensor_numel(params);
    for (int64_t i = 0; i < n; i++) {
        float d = g[i] * gs + wd * m[i] * p[i];
        v[i] = mc * v[i] + d;
        p[i] -= lr * v[i];
    }
}
static int h_cc(const mrcnn_backend *be) { return 0; }       // like the CPU: "auto" is fp32
static void h_set_tf32(mrcnn_backend *be, int on) {}
/* Like the CPU backend: no graphs (SOLVER.CUDA_GRAPH=on then runs every step directly). */
static int h_graph_begin(const mrcnn_backend *be) { return 0; }
static void *h_graph_end(const mrcnn_backend *be) { MRCNN_CHECK(0, "host backend: graph_end without a capture"); return NULL; }
static void h_graph_launch(const mrcnn_backend *be, void *g) { MRCNN_CHECK(0, "host backend: graph_launch"); }
static void h_graph_destroy(const mrcnn_backend *be, void *g) { MRCNN_CHECK(0, "host backend: graph_destroy"); }
static int h_nonfinite(const mrcnn_backend *be, const mrcnn_tensor *t) {
    const float *x = t->data;
    for (int64_t i = 0; i < mrcnn_tensor_numel(t); i++)
        if (!isfinite(x[i])) return 1;
    return 0;
}

/* ---- the stand-in model ---- */
typedef struct {
    mrcnn_config *cfg;
    mrcnn_dist *dist;
    mrcnn_backend *be;
    mrcnn_arena params, grads;
    int iw, ib;
    int per_rank;
    int64_t next_micro; // the "loader cursor": global micro-batches consumed
    long inject_at, inject_count;
    int sleep_ms;
    int fixed_rows;
    int64_t staged_first, staged_step; // what stage recorded for run
    double staged_norm;
} standin;

static float draw(int64_t image, int k) {
    mrcnn_rng r = mrcnn_rng_make(1234, 0, image, MRCNN_RNG_TEST);
    return 2.0f * mrcnn_rng_uniform(&r, (uint64_t)k) - 1.0f;
}

/* stage: the host half, the "loader": the micro-batch's first global image, its rows
 * and the normalizer over the global batch (a host all-reduce of the row counts). This
 * stand-in's "device" is host memory, so run reads what stage recorded (never captured:
 * the host backend's graph_begin returns 0). Shape key: the rows of its images. */
static double stage(void *vctx, int64_t step, int micro, uint64_t *shape_key) {
    standin *s = vctx;
    if (s->sleep_ms) usleep((useconds_t)s->sleep_ms * 1000);
    const int W = s->dist->world_size, R = s->dist->rank;
    int64_t first = s->next_micro * (int64_t)s->per_rank * W + (int64_t)R * s->per_rank;
    s->next_micro++;
    /* Rows of this rank's images, and the normalizer over the global batch. */
    double rows = 0;
    uint64_t key = 1469598103934665603ull; // FNV-1a over the row counts
    for (int i = 0; i < s->per_rank; i++) {
        int n = s->fixed_rows ? 2 : 1 + (int)((first + i) % 3);
        rows += n;
        key = (key ^ (uint64_t)n) * 1099511628211ull;
    }
    double global_rows = rows;
    mrcnn_dist_allreduce_sum_f64(s->dist, &global_rows, 1, "stand-in row count");
    s->staged_first = first;
    s->staged_norm = global_rows / W;
    s->staged_step = step;
    *shape_key = key ? key : 1;
    return 0.0;
}

static void run(void *vctx, int micro, float loss_mult, const mrcnn_tensor *loss_scale, mrcnn_tensor *loss_acc,
                float acc_mult, mrcnn_buckets *bk) {
    // a CPU-backend stand-in: the device-held loss scale is in host memory
    if (loss_scale) loss_mult *= ((const float *)loss_scale->data)[0];
    standin *s = vctx;
    const mrcnn_dtype st = s->be->storage;
    const int R = s->dist->rank;
    const int64_t first = s->staged_first, step = s->staged_step;
    const double norm = s->staged_norm;
    float *w = mrcnn_arena_get(&s->params, s->iw)->data, *b = mrcnn_arena_get(&s->params, s->ib)->data;
    float *gw = mrcnn_arena_get(&s->grads, s->iw)->data, *gb = mrcnn_arena_get(&s->grads, s->ib)->data;
    double la = 0, lb = 0;
    for (int i = 0; i < s->per_rank; i++) {
        int64_t img = (first + i) % N_IMAGES;
        int nrows = s->fixed_rows ? 2 : 1 + (int)((first + i) % 3);
        for (int r = 0; r < nrows; r++) {
            float x[D_IN], y[D_OUT];
            for (int k = 0; k < D_IN; k++) x[k] = mrcnn_round_to(draw(img, r * 32 + k), st);
            for (int o = 0; o < D_OUT; o++) {
                float acc = b[o];
                for (int k = 0; k < D_IN; k++) acc += w[o * D_IN + k] * x[k];
                y[o] = mrcnn_round_to(acc, st);
                float target = 0.5f * x[o] - 0.25f * x[(o + 3) % D_IN] + 0.1f * (float)o + 0.05f * draw(img, r * 32 + 16 + o);
                float e = y[o] - target;
                if (o < D_OUT / 2) la += (double)e * e / norm;
                else lb += (double)e * e / norm;
                float dy = mrcnn_round_to((float)(2.0 * e / norm) * loss_mult, st);
                gb[o] += dy;
                for (int k = 0; k < D_IN; k++) gw[o * D_IN + k] += dy * x[k];
            }
        }
    }
    long k = step - s->inject_at;
    if (s->inject_at >= 0 && k >= 0 && k < s->inject_count && R == 0) {
        la = INFINITY;
        gb[0] = INFINITY;
    }
    /* The terms go to the trainer's device vector through the backend, as a model's do. */
    float terms[2] = {(float)la, (float)lb};
    int64_t two = 2;
    mrcnn_tensor tv = mrcnn_tensor_view(terms, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, &two);
    s->be->step.axpy(s->be, acc_mult, &tv, loss_acc);
    if (bk)
        for (int p = s->params.n_entries - 1; p >= 0; p--) mrcnn_buckets_mark_ready(bk, p);
}

static void get_cursor(void *vctx, int64_t *epoch, int64_t *ls) {
    standin *s = vctx;
    *epoch = s->next_micro / (N_IMAGES / (s->per_rank * s->dist->world_size));
    *ls = s->next_micro;
}
static void set_cursor(void *vctx, int64_t epoch, int64_t ls) { ((standin *)vctx)->next_micro = ls; }

int main(int argc, char **argv) {
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    mrcnn_config_set(&cfg, "SOLVER.IMS_PER_BATCH=2", "standin");
    mrcnn_config_set(&cfg, "SOLVER.BASE_LR=0.05", "standin");
    mrcnn_config_set(&cfg, "SOLVER.WARMUP_ITERS=5", "standin");
    mrcnn_config_set(&cfg, "SOLVER.MAX_ITER=40", "standin");
    mrcnn_config_set(&cfg, "SOLVER.STEPS=[30]", "standin");
    mrcnn_config_set(&cfg, "SOLVER.CHECKPOINT_PERIOD=10", "standin");
    mrcnn_config_set(&cfg, "LOG_PERIOD=1", "standin");
    mrcnn_trainer_opts opts = {0};
    const char *dump = NULL;
    long inject_at = -1, inject_count = 1, big = 0;
    int sleep_ms = 0, fixed_rows = 0;
    double timeout = 60;
    if (argc < 2) {
        fprintf(stderr, "usage: prog_standin OUTDIR [options]\n");
        return 2;
    }
    snprintf(cfg.output_dir, sizeof cfg.output_dir, "%s", argv[1]);
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--set") && i + 1 < argc) mrcnn_config_set(&cfg, argv[++i], "--set");
        else if (!strcmp(argv[i], "--resume")) opts.resume = 1;
        else if (!strcmp(argv[i], "--max-steps") && i + 1 < argc) opts.max_steps = atol(argv[++i]);
        else if (!strcmp(argv[i], "--inject-inf") && i + 1 < argc) {
            char *colon;
            inject_at = strtol(argv[++i], &colon, 10);
            if (*colon == ':') inject_count = atol(colon + 1);
        } else if (!strcmp(argv[i], "--big") && i + 1 < argc) big = atol(argv[++i]);
        else if (!strcmp(argv[i], "--dump") && i + 1 < argc) dump = argv[++i];
        else if (!strcmp(argv[i], "--sleep-ms") && i + 1 < argc) sleep_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--comm-timeout") && i + 1 < argc) timeout = atof(argv[++i]);
        else if (!strcmp(argv[i], "--fixed-rows")) fixed_rows = 1;
        else {
            fprintf(stderr, "prog_standin: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    mrcnn_dist dist;
    mrcnn_dist_init(&dist, &argc, &argv, MPI_THREAD_MULTIPLE, 0, timeout);
    mrcnn_config_scale_workers(&cfg, dist.world_size);
    mrcnn_backend be = {.name = "host-standin", .device = MRCNN_DEVICE_CPU, .storage = MRCNN_DTYPE_F32,
                        .set_precision = h_set_precision,
                        .mem = {.alloc = h_alloc, .free = h_free, .zero = h_zero, .write = h_write, .read = h_read,
                                .sync = h_sync},
                        .opt = {.sgd_update = h_sgd, .nonfinite = h_nonfinite},
                        .stream = {.graph_begin = h_graph_begin, .graph_end = h_graph_end, .graph_launch = h_graph_launch,
                                   .graph_destroy = h_graph_destroy}};
    be.info.compute_capability = h_cc;
    be.info.set_tf32 = h_set_tf32;
    mrcnn_backend_cpu_fill_step(&be); // the step's bookkeeping ops (host memory)
    /* As `mrcnn train` does: resolve "auto" and set the storage dtype. */
    char mode[sizeof cfg.solver_precision];
    snprintf(mode, sizeof mode, "%s", mrcnn_precision_apply(&be, cfg.solver_precision));
    memcpy(cfg.solver_precision, mode, sizeof mode);

    standin s = {.cfg = &cfg, .dist = &dist, .be = &be, .inject_at = inject_at, .inject_count = inject_count,
                 .sleep_ms = sleep_ms, .fixed_rows = fixed_rows};
    s.per_rank = mrcnn_per_rank_batch(&cfg, dist.world_size);
    mrcnn_arena_init(&s.params, "params", MRCNN_DEVICE_CPU);
    s.iw = mrcnn_arena_add(&s.params, "fc.weight", MRCNN_DTYPE_F32, 2, (int64_t[]){D_OUT, D_IN});
    s.ib = mrcnn_arena_add(&s.params, "fc.bias", MRCNN_DTYPE_F32, 1, (int64_t[]){D_OUT});
    if (big > 0) mrcnn_arena_add(&s.params, "big.weight", MRCNN_DTYPE_F32, 1, (int64_t[]){big});
    mrcnn_arena_commit(&s.params, NULL, NULL);
    mrcnn_arena_init_like(&s.grads, "grads", &s.params, MRCNN_DTYPE_F32);
    mrcnn_arena_commit(&s.grads, NULL, NULL);
    /* Rank 0's initial weights differ from the others': the broadcast must fix that. */
    float *w = s.params.entries[s.iw].tensor.data;
    for (int i = 0; i < D_OUT * D_IN; i++) w[i] = dist.rank == 0 ? 0.1f * draw(999, i) : 7.0f;
    if (big > 0) {
        float *g = s.params.entries[2].tensor.data;
        for (long i = 0; i < big; i++) g[i] = (float)(i % 1000) * 1e-3f;
    }
    static const char *const names[] = {"loss_a", "loss_b"};
    mrcnn_trainable m = {.ctx = &s, .params = &s.params, .grads = &s.grads, .n_losses = 2, .loss_names = names, .scales_loss = 1,
                         .stage = stage, .run = run, .get_cursor = get_cursor, .set_cursor = set_cursor};
    opts.bucket_bytes = 256; // several buckets even for this small model
    int rc = mrcnn_trainer_run(&cfg, &opts, &dist, &be, &m);
    if (dump && dist.rank == 0) {
        FILE *f = fopen(dump, "wb");
        MRCNN_CHECK(f != NULL, "cannot write %s", dump);
        fwrite(s.params.base, 1, s.params.entries[s.ib].offset + D_OUT * sizeof(float), f);
        fclose(f);
    }
    mrcnn_arena_free(&s.params);
    mrcnn_arena_free(&s.grads);
    mrcnn_dist_finalize(&dist);
    return rc;
}
