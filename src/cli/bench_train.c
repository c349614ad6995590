/* `mrcnn bench train`: training throughput on the workload of
 * shared/device/torchvision_bench.py (bench/torchvision_bench.py), so that the two
 * are a ratio measured side by side: R50-FPN, 91 classes (90 + background), HxW
 * images with 7 objects each (uniform random pixels, boxes xy ~ U(0, 0.7 W/H),
 * wh ~ U(0, 0.3 W/H) + 16, box-filled masks, labels U{1..90}), three such batches
 * cycled, stem and res2 frozen, 2000/2000 proposals, 512 ROIs per image. Each step
 * is mrcnn_trainer_step, the step `mrcnn train` runs (trainer.h: the loss
 * all-reduce, the Inf/NaN check, the fp16 loss scaler, clipping when the config
 * enables it, SGD), on one rank, with SGD at lr 0 (momentum 0.9, weight decay 1e-4:
 * every kernel of a real step runs, the random weights cannot diverge). Warmup steps,
 * then timed steps, each synchronized; their result (a human line and a JSON line) is
 * printed at once, so that a run stopped later still has its number. Then, unless
 * --no-timeline, one forward-only pass and one step with the gradient-ready times give
 * the 1-GPU step timeline of `mrcnn bench scaling --model`; that step runs directly
 * (mrcnn_trainer_step_direct), since a replayed CUDA graph makes no host callback, and
 * the complete JSON line follows. The last line printed is JSON. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_train.h"
#include "mrcnn/backend.h"
#include "mrcnn/backend_open.h"
#include "mrcnn/check.h"
#include "mrcnn/config.h"
#include "mrcnn/dist.h"
#include "mrcnn/log.h"
#include "mrcnn/metrics.h"
#include "mrcnn/model.h"
#include "mrcnn/model_trainable.h"
#include "mrcnn/precision.h"
#include "mrcnn/rng.h"
#include "mrcnn/step_profile.h"
#include "mrcnn/trainer.h"

#define BT_BATCHES 3 // distinct batches, cycled (as torchvision_bench.py)

static void usage(FILE *out) {
    fprintf(out,
            "usage: mrcnn bench train [--device cuda|cpu] [--precision bf16|fp16|fp32|tf32|auto] [--size HxW]\n"
            "                         [--batch N] [--objects K] [--steps N] [--warmup N] [--gpu I]\n"
            "                         [--config FILE] [--set KEY=VALUE]... [--timeline FILE] [--no-timeline]\n"
            "                         [--profile] [--fixed-rows]\n"
            "                         [--seed S]\n"
            "\n"
            "Training throughput on bench/torchvision_bench.py's workload (R50-FPN, 91 classes, 7 objects\n"
            "per image, stem + res2 frozen, 2000/2000 proposals, 512 ROIs/image, SGD lr 0). Prints img/s,\n"
            "peak memory and the loss as a human line and a JSON line right after the timed steps, then the\n"
            "step timeline and the complete JSON line (the last line).\n"
            "  --device D      cuda (default; falls back to nothing: a missing GPU is an error) or cpu\n"
            "  --precision P   activation storage (default bf16); fp16 runs the loss scaler\n"
            "  --size HxW      image size (default 800x1216; multiples of 32)\n"
            "  --batch N       images per step (default 8); --objects K per image (default 7)\n"
            "  --steps N       timed steps (default 10); --warmup N untimed first (default 4 cuda, 1 cpu)\n"
            "  --config FILE, --set KEY=VALUE   change the model (defaults: R50-FPN as above)\n"
            "  --timeline FILE write the 1-GPU step timeline (ready time and bytes of each gradient\n"
            "                  bucket) for `mrcnn bench scaling --model FILE`\n"
            "  --no-timeline   stop after the timed steps (no forward-only pass, no timeline step)\n"
            "  --profile       then one more step, traced: backend calls by op kind, bytes uploaded,\n"
            "                  host staging ms, FLOPs by stage\n"
            "  --fixed-rows    (cpu) run the ROI heads on the rows a GPU step runs, not on the sampled\n"
            "                  rows alone, so that --profile shows a GPU step's FLOPs\n"
            "Exit codes: 0 done (finite loss), 1 failure or a non-finite loss, 2 bad command line.\n");
}

typedef struct {
    float *images;   // (N, H, W, 3) normalized, host
    float *boxes;    // (N, K, 4)
    int32_t *labels; // (N, K)
    uint8_t *masks;  // (N, K, H, W)
    int *hw;         // (N, 2)
    mrcnn_image_gt *gt; // (N)
    mrcnn_tensor dev_images; // (N, H, W, 3) fp32 on the backend's device
} bt_batch;

/* One synthetic batch as torchvision_bench.py's batch(): the pixels are U(0, 1) scaled
 * to 0..255 and normalized with the config's PIXEL_MEAN / PIXEL_STD (torchvision
 * normalizes the same U(0, 1) images with the same statistics in its transform). */
static void batch_make(bt_batch *b, const mrcnn_config *cfg, int n, int h, int w, int k, int num_classes,
                       uint64_t seed, int which) {
    memset(b, 0, sizeof *b);
    size_t npix = (size_t)h * w;
    b->images = MRCNN_MALLOC((size_t)n * npix * 3 * sizeof(float), "bench images");
    b->boxes = MRCNN_MALLOC((size_t)n * k * 4 * sizeof(float), "bench boxes");
    b->labels = MRCNN_MALLOC((size_t)n * k * sizeof(int32_t), "bench labels");
    b->masks = MRCNN_CALLOC((size_t)n * k * npix, 1, "bench masks");
    b->hw = MRCNN_MALLOC((size_t)n * 2 * sizeof(int), "bench sizes");
    b->gt = MRCNN_CALLOC((size_t)n, sizeof(mrcnn_image_gt), "bench gt");
    for (int i = 0; i < n; i++) {
        mrcnn_rng r = mrcnn_rng_make(seed, (uint32_t)which, i, MRCNN_RNG_SYNTH);
        uint64_t c = 0;
        float *img = b->images + (size_t)i * npix * 3;
        for (size_t p = 0; p < npix; p++)
            for (int ch = 0; ch < 3; ch++)
                img[p * 3 + ch] = (255.0f * mrcnn_rng_uniform(&r, c++) - cfg->pixel_mean.v[ch]) / cfg->pixel_std.v[ch];
        for (int j = 0; j < k; j++) {
            float x = mrcnn_rng_uniform(&r, c++) * w * 0.7f, y = mrcnn_rng_uniform(&r, c++) * h * 0.7f;
            float bw = mrcnn_rng_uniform(&r, c++) * w * 0.3f + 16, bh = mrcnn_rng_uniform(&r, c++) * h * 0.3f + 16;
            float *bx = b->boxes + ((size_t)i * k + j) * 4;
            bx[0] = x, bx[1] = y, bx[2] = x + bw, bx[3] = y + bh;
            b->labels[i * k + j] = 1 + (int32_t)mrcnn_rng_below(&r, c++, (uint32_t)(num_classes - 1));
            // torchvision: m[y1:y2, x1:x2] = 1 over the truncated box
            int x1 = (int)bx[0], y1 = (int)bx[1], x2 = (int)bx[2], y2 = (int)bx[3];
            if (x2 > w) x2 = w;
            if (y2 > h) y2 = h;
            uint8_t *m = b->masks + ((size_t)i * k + j) * npix;
            for (int yy = y1; yy < y2; yy++) memset(m + (size_t)yy * w + x1, 1, (size_t)(x2 > x1 ? x2 - x1 : 0));
        }
        b->hw[2 * i] = h;
        b->hw[2 * i + 1] = w;
        b->gt[i] = (mrcnn_image_gt){k, b->boxes + (size_t)i * k * 4, b->labels + (size_t)i * k,
                                    b->masks + (size_t)i * k * npix};
    }
}

static void batch_free(bt_batch *b, const mrcnn_backend *be) {
    if (b->dev_images.data) be->mem.free(be, b->dev_images.data);
    free(b->images);
    free(b->boxes);
    free(b->labels);
    free(b->masks);
    free(b->hw);
    free(b->gt);
}

/* Gradient-ready reports: marks the step's buckets and, in the timeline step, the time
 * each parameter's gradient became final on the device. */
typedef struct {
    const mrcnn_backend *be;
    double *ready_t; // (n params) or NULL
    double mem_mb;   // device memory in use at the first report (activations all held)
    int query_mem;   // this step runs directly: the memory query may happen inside it (a
                     // query while a CUDA graph captures would be refused)
    int reported;    // reports in the current step
    int total;       // reports since the caller zeroed it
} bt_ready;

static void on_ready(int i, mrcnn_buckets *bk, void *ctx) {
    bt_ready *r = ctx;
    r->total++;
    if (!r->reported++ && r->query_mem && r->be->device == MRCNN_DEVICE_GPU) {
        double mb = r->be->info.memory_used_mb(r->be);
        if (mb > r->mem_mb) r->mem_mb = mb;
    }
    mrcnn_buckets_mark_ready(bk, i);
    if (r->ready_t) {
        r->be->mem.sync(r->be);
        r->ready_t[i] = mrcnn_time_now();
    }
}

typedef struct {
    mrcnn_model m;
    mrcnn_model_trainable mt; // the model as the trainer's trainable, over bt_next (its ws: the activations)
    mrcnn_config step_cfg; // the solver settings of the step (lr 0, above)
    mrcnn_dist one;        // a single rank: the all-reduces return at once
    mrcnn_trainer tr;
    bt_batch *batches;     // (BT_BATCHES)
    int batch;             // the next step's batch (cycled)
    bt_ready ready;
    int skipped;           // steps not applied (fp16: the scaler halved the scale)
} bt_state;

/* The trainable's batch source: the step's one micro-batch is batch s->batch (cycled),
 * already on the device (the model's stage copies it into its staging buffer, so every
 * batch has the same addresses); no data wait. */
static double bt_next(void *ctx, int64_t step, int micro, mrcnn_batch *out) {
    bt_state *s = ctx;
    const bt_batch *b = &s->batches[s->batch % BT_BATCHES];
    s->ready.reported = 0;
    *out = (mrcnn_batch){.images = b->dev_images, .image_hw = b->hw, .gt = b->gt};
    return 0;
}

/* One training step on batch i (cycled), synchronized; returns its total loss
 * (unscaled, finite or not). A step not applied (fp16: gradients overflowed, the
 * scaler halved the scale) is counted in s->skipped. direct: the region runs
 * directly whatever the graph cache holds (its host callbacks fire). */
static double train_step(bt_state *s, int i, int direct) {
    s->batch = i;
    mrcnn_step_result r;
    if (direct) mrcnn_trainer_step_direct(&s->tr, &r);
    else mrcnn_trainer_step(&s->tr, &r);
    /* read every step: the bench reports the first step's loss and the last one's */
    mrcnn_loss_window w;
    mrcnn_trainer_take_losses(&s->tr, &w);
    s->skipped += (int)(w.steps - w.finite_steps);
    s->m.be->mem.sync(s->m.be);
    return w.last_total;
}

/* --profile's step: one more step, run directly (a replayed graph is one call). */
static void profile_step(void *s) { train_step(s, 0, 1); }

/* The forward pass alone (the timeline's forward time), synchronized. */
static void forward_only(bt_state *s, const bt_batch *b) {
    s->m.loss_mult = 1.0f;
    s->m.loss_scale = NULL;
    s->m.grad_ready = NULL;
    mrcnn_batch batch = {.images = b->dev_images, .image_hw = b->hw, .gt = b->gt};
    mrcnn_pass st;
    mrcnn_model_train_step(&s->m, &s->mt.ws, &batch, false, &st);
    mrcnn_pass_free(&st);
    mrcnn_ws_reset(&s->mt.ws);
    s->m.be->mem.sync(s->m.be);
}

static int parse_size(const char *s, int *h, int *w) {
    char *end;
    long a = strtol(s, &end, 10);
    if (end == s || (*end != 'x' && *end != 'X')) return 0;
    const char *p = end + 1;
    long b = strtol(p, &end, 10);
    if (end == p || *end || a < 32 || b < 32 || a % 32 || b % 32) return 0;
    *h = (int)a;
    *w = (int)b;
    return 1;
}

static int parse_pos(const char *flag, const char *v, int min, int *out) {
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < min) {
        fprintf(stderr, "mrcnn bench train: %s wants an integer >= %d, got '%s'\n", flag, min, v);
        return 0;
    }
    *out = (int)x;
    return 1;
}

/* The timeline of `mrcnn bench scaling --model`: bucket i is ready when its last
 * reported parameter is, counted from the start of backward (step start + forward). */
static void write_timeline(const char *path, const mrcnn_buckets *bk, const double *ready_t, double t0, double fwd_ms,
                           double bwd_ms, double other_ms, int n, const char *source) {
    FILE *f = fopen(path, "w");
    MRCNN_CHECK(f != NULL, "bench train: cannot create the timeline file %s", path);
    fprintf(f, "{\"source\": \"%s\", \"forward_ms\": %.3f, \"backward_ms\": %.3f, \"other_ms\": %.3f, "
               "\"images_per_gpu\": %d,\n \"buckets\": [",
            source, fwd_ms, bwd_ms, other_ms, n);
    double prev = 0;
    for (int i = 0; i < bk->n_buckets; i++) {
        const mrcnn_bucket *b = &bk->b[i];
        double t = 0;
        for (int p = b->first_param; p <= b->last_param; p++)
            if (ready_t[p] > 0 && ready_t[p] - t0 > t) t = ready_t[p] - t0;
        double ms = 1e3 * t - fwd_ms;
        if (ms < prev) ms = prev; // buckets are reduced in order
        if (ms > bwd_ms) ms = bwd_ms;
        prev = ms;
        fprintf(f, "%s\n  {\"ready_ms\": %.3f, \"bytes\": %zu}", i ? "," : "", ms, b->bytes);
    }
    fprintf(f, "]}\n");
    MRCNN_CHECK(fclose(f) == 0, "bench train: writing %s failed", path);
}

/* What the timed steps measured, and the timeline's times once it ran. */
typedef struct {
    double step_ms, img_s, syncs, reads, uploads, ws_peak_mb, arenas_mb, warm_s, loss_first, loss_last;
    double peak_mb, dev_mb;
    const char *peak_what;
    int finite;
    int timeline; // fwd_ms, bwd_ms, other_ms are set
    double fwd_ms, bwd_ms, other_ms;
} bt_result;

/* peak: the allocator's high-water mark (activations, weights, gradients, optimizer
 * state: what torchvision's max_memory_allocated counts) when the backend pools; else
 * device memory in use at the start of backward in a step run directly (with the CUDA
 * context and cuDNN workspace); on the CPU the process's max RSS. */
static void peak_of(const mrcnn_backend *be, double dev_mb, bt_result *r) {
    r->dev_mb = dev_mb;
    r->peak_mb = be->info.peak_mb(be, 0);
    r->peak_what = be->device == MRCNN_DEVICE_GPU ? "allocator high-water" : "max RSS";
    if (r->peak_mb <= 0) {
        r->peak_mb = dev_mb;
        r->peak_what = "device memory in use";
    }
}

/* A JSON number, or a string for Inf/NaN (JSON has neither). */
static void json_num(const char *key, double v) {
    if (isfinite(v)) printf(", \"%s\": %.6g", key, v);
    else printf(", \"%s\": \"%g\"", key, v);
}

/* The machine-readable line; the timeline's fields are null until it ran. */
static void print_json(const bt_state *s, const mrcnn_backend *be, const char *mode, int N, int H, int W, int K,
                       int warmup, int steps, const bt_result *r) {
    printf("{\"bench\": \"train\", \"device\": \"%s\", \"precision\": \"%s\", \"batch\": %d, \"height\": %d, "
           "\"width\": %d, \"objects\": %d, \"warmup\": %d, \"steps\": %d, \"step_ms\": %.3f, \"img_per_s\": %.3f, "
           "\"peak_mem_mb\": %.1f, \"device_in_use_mb\": %.1f, \"activations_mb\": %.1f, \"arenas_mb\": %.1f",
           be->name, mode, N, H, W, K, warmup, steps, r->step_ms, r->img_s, r->peak_mb, r->dev_mb, r->ws_peak_mb,
           r->arenas_mb);
    json_num("loss_first", r->loss_first);
    json_num("loss_last", r->loss_last);
    printf(", \"finite\": %s", r->finite ? "true" : "false");
    if (r->timeline)
        printf(", \"forward_ms\": %.3f, \"backward_ms\": %.3f, \"other_ms\": %.3f", r->fwd_ms, r->bwd_ms, r->other_ms);
    else
        printf(", \"forward_ms\": null, \"backward_ms\": null, \"other_ms\": null");
    printf(", \"loss_scale\": %g, \"skipped\": %d, \"syncs_per_step\": %.2f, \"reads_per_step\": %.2f, "
           "\"uploads_per_step\": %.2f, \"cuda_graph\": \"%s\", \"graph_replays\": %lld, \"timeline\": %s}\n",
           s->tr.st.scaler.scale, s->skipped, r->syncs, r->reads, r->uploads, s->tr.graphs ? "on" : "off",
           (long long)s->tr.graph_stats.replay, r->timeline ? "true" : "false");
    fflush(stdout);
}

/* The timed steps' result: the human lines, then the JSON line. */
static void print_result(const bt_state *s, const mrcnn_backend *be, const char *mode, int N, int H, int W, int K,
                         int warmup, int steps, const bt_result *r) {
    printf("mrcnn train %-5s bs=%d %dx%d: %.1f ms/iter, %.1f img/s, peak %.2f GiB (%s), activations %.2f GiB, "
           "weights+grads+momentum %.2f GiB, loss first %.3f last %.3f\n",
           mode, N, H, W, r->step_ms, r->img_s, r->peak_mb / 1024, r->peak_what, r->ws_peak_mb / 1024,
           r->arenas_mb / 1024, r->loss_first, r->loss_last);
    printf("host round trips per step: %.1f syncs (%.1f reads), %.1f uploads; CUDA graphs %s (steps: %lld replayed, "
           "%lld captured, %lld direct), warmup %.1f s\n",
           r->syncs, r->reads, r->uploads, s->tr.graphs ? "on" : "off", (long long)s->tr.graph_stats.replay,
           (long long)s->tr.graph_stats.capture, (long long)(s->tr.graph_stats.direct + s->tr.graph_stats.warmup),
           r->warm_s);
    print_json(s, be, mode, N, H, W, K, warmup, steps, r);
}

/* The command line. */
typedef struct {
    const char *device, *precision, *config_path, *timeline;
    int H, W, N, K, steps, warmup, gpu, seed, timeline_pass, profile, fixed_rows;
} bt_opts;

/* argv into o, checked; returns -1 to go on, else the exit code (help: 0, usage: 2). */
static int parse_opts(int argc, char **argv, bt_opts *o) {
    *o = (bt_opts){.device = "cuda", .precision = "bf16", .H = 800, .W = 1216, .N = 8, .K = 7, .steps = 10,
                   .warmup = -1, .timeline_pass = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-timeline")) {
            o->timeline_pass = 0;
            continue;
        }
        if (!strcmp(a, "--profile")) {
            o->profile = 1;
            continue;
        }
        if (!strcmp(a, "--fixed-rows")) {
            o->fixed_rows = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "mrcnn bench train: %s wants a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--device")) o->device = v;
        else if (!strcmp(a, "--precision")) o->precision = v;
        else if (!strcmp(a, "--config")) o->config_path = v;
        else if (!strcmp(a, "--timeline")) o->timeline = v;
        else if (!strcmp(a, "--set")) continue; // applied after the defaults
        else if (!strcmp(a, "--size")) {
            if (!parse_size(v, &o->H, &o->W)) {
                fprintf(stderr, "mrcnn bench train: --size wants HxW, multiples of 32, got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--batch")) {
            if (!parse_pos(a, v, 1, &o->N)) return 2;
        } else if (!strcmp(a, "--objects")) {
            if (!parse_pos(a, v, 1, &o->K)) return 2;
        } else if (!strcmp(a, "--steps")) {
            if (!parse_pos(a, v, 1, &o->steps)) return 2;
        } else if (!strcmp(a, "--warmup")) {
            if (!parse_pos(a, v, 0, &o->warmup)) return 2;
        } else if (!strcmp(a, "--gpu")) {
            if (!parse_pos(a, v, 0, &o->gpu)) return 2;
        } else if (!strcmp(a, "--seed")) {
            if (!parse_pos(a, v, 0, &o->seed)) return 2;
        } else {
            fprintf(stderr, "mrcnn bench train: unexpected argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (o->timeline && !o->timeline_pass) {
        fprintf(stderr, "mrcnn bench train: --timeline FILE and --no-timeline exclude each other\n");
        return 2;
    }
    if (strcmp(o->device, "cuda") && strcmp(o->device, "cpu")) {
        fprintf(stderr, "mrcnn bench train: --device is cuda or cpu, got '%s'\n", o->device);
        return 2;
    }
    if (!mrcnn_precision_valid(o->precision)) {
        fprintf(stderr, "mrcnn bench train: --precision is bf16, fp16, fp32, tf32 or auto, got '%s'\n", o->precision);
        return 2;
    }
    if (o->warmup < 0) o->warmup = !strcmp(o->device, "cuda") ? 4 : 1;
    return -1;
}

/* torchvision_bench.py's model (MaskRCNN(resnet50 FPN, trainable layers 3, num_classes
 * 91)), then --config and every --set; returns 0 (reported) when one fails. */
static int bench_config(mrcnn_config *cfg, const bt_opts *o, int argc, char **argv) {
    mrcnn_config_defaults(cfg);
    cfg->roi_num_classes = 90;
    cfg->backbone_freeze_at = 2;
    char err[1024];
    if (o->config_path && !mrcnn_config_try_load(cfg, o->config_path, err, sizeof err)) {
        fprintf(stderr, "mrcnn bench train: %s\n", err);
        return 0;
    }
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--set") && !mrcnn_config_try_set(cfg, argv[++i], "--set", err, sizeof err)) {
            fprintf(stderr, "mrcnn bench train: %s\n", err);
            return 0;
        }
    snprintf(cfg->model_device, sizeof cfg->model_device, "%s", o->device);
    return 1;
}

/* The model (random weights) as the trainer's trainable, and the trainer with the bench's
 * step settings. */
static void bt_state_init(bt_state *s, const mrcnn_config *cfg, mrcnn_backend *be, const bt_opts *o, const char *mode) {
    mrcnn_model_init(&s->m, cfg, be);
    mrcnn_model_init_random(&s->m, (uint64_t)o->seed);
    /* One rank, one micro-batch of N images per step (as torchvision_bench.py; the
     * timeline's forward and backward are of that one micro-batch). */
    s->step_cfg = *cfg;
    s->step_cfg.solver_accum_steps = 1;
    s->step_cfg.solver_base_lr = 0;
    s->step_cfg.solver_momentum = 0.9f;
    s->step_cfg.solver_weight_decay = 1e-4f;
    s->step_cfg.solver_ims_per_batch = o->N;
    snprintf(s->step_cfg.solver_precision, sizeof s->step_cfg.solver_precision, "%s", mode);
    s->one = (mrcnn_dist){.rank = 0, .world_size = 1, .local_size = 1,
                          .device = be->device == MRCNN_DEVICE_GPU ? o->gpu : -1};
    mrcnn_model_trainable_init(&s->mt, &s->m, bt_next, s);
    s->ready = (bt_ready){.be = be};
    s->mt.on_ready = on_ready;
    s->mt.on_ready_ctx = &s->ready;
    mrcnn_trainer_init(&s->tr, &s->step_cfg, &s->one, be, &s->mt.tm, MRCNN_BUCKET_BYTES_DEFAULT);
}

/* The BT_BATCHES synthetic batches, their images uploaded to the device. */
static void make_batches(bt_batch *batches, const mrcnn_config *cfg, const bt_opts *o, int num_classes,
                         const mrcnn_backend *be) {
    const int N = o->N, H = o->H, W = o->W;
    for (int k = 0; k < BT_BATCHES; k++) {
        batch_make(&batches[k], cfg, N, H, W, o->K, num_classes, (uint64_t)o->seed, k);
        batches[k].dev_images = mrcnn_tensor_view(NULL, MRCNN_DTYPE_F32, be->device, 4, (int64_t[]){N, H, W, 3});
        batches[k].dev_images.data = be->mem.alloc(be, mrcnn_tensor_nbytes(&batches[k].dev_images), "bench images");
        be->mem.write(be, &batches[k].dev_images, batches[k].images);
    }
    be->mem.sync(be);
}

/* The warmup steps, then the timed ones: their time, round trips, memory and losses. */
static void timed_steps(bt_state *s, const mrcnn_backend *be, const bt_opts *o, bt_result *res) {
    const int warmup = o->warmup, steps = o->steps;
    double loss_first = NAN, loss_last = NAN, t_warm = mrcnn_time_now();
    int finite = 1;
    /* The very first step is its shape key's warm-up (run directly): the one of the
     * timed loop's steps where the memory query is safe. */
    s->ready.query_mem = 1;
    for (int i = 0; i < warmup; i++) {
        double l = train_step(s, i, 0);
        s->ready.query_mem = 0;
        if (i == 0) loss_first = l;
        if (!isfinite(l)) finite = 0;
    }
    double warm_s = mrcnn_time_now() - t_warm;
    double t0 = mrcnn_time_now();
    const mrcnn_backend_stats c0 = mrcnn_backend_stats_get(be);
    for (int i = 0; i < steps; i++) {
        double l = train_step(s, i, 0);
        s->ready.query_mem = 0;
        loss_last = l;
        if (!isfinite(l)) finite = 0;
        if (warmup == 0 && i == 0) loss_first = l;
    }
    *res = (bt_result){.step_ms = 1e3 * (mrcnn_time_now() - t0) / steps};
    /* The host's waits for the device per timed step (each step's loss read included:
     * the bench reports the first and last loss). */
    const mrcnn_backend_stats c1 = mrcnn_backend_stats_get(be);
    res->syncs = (double)(c1.syncs - c0.syncs) / steps;
    res->reads = (double)(c1.reads - c0.reads) / steps;
    res->uploads = (double)(c1.uploads - c0.uploads) / steps;
    res->img_s = o->N / (res->step_ms / 1e3);
    res->ws_peak_mb = (double)s->mt.ws.peak_bytes / (1 << 20);
    res->arenas_mb =
        (double)(s->m.params.values.size + s->m.params.grads.size + s->tr.sgd.momentum.size) / (1 << 20);
    res->warm_s = warm_s;
    res->loss_first = loss_first;
    res->loss_last = loss_last;
    if (!isfinite(loss_last) || !isfinite(loss_first)) finite = 0;
    res->finite = finite;
    res->timeline = 0;
    peak_of(be, s->ready.mem_mb, res);
}

/* The timeline: a forward-only pass, then a step run directly with each gradient's ready
 * time; backward and other times into res, the bucket timeline to o->timeline if given. */
static void timeline_run(bt_state *s, const mrcnn_backend *be, const bt_opts *o, const char *mode, bt_result *res) {
    double t_f = mrcnn_time_now();
    forward_only(s, &s->batches[0]);
    res->fwd_ms = 1e3 * (mrcnn_time_now() - t_f);
    int np = mrcnn_params_count(&s->m.params);
    double *ready_t = MRCNN_CALLOC((size_t)np, sizeof(double), "ready times");
    s->ready.ready_t = ready_t;
    s->ready.query_mem = 1;
    s->ready.total = 0;
    double t_s = mrcnn_time_now();
    train_step(s, 0, 1);
    double full_ms = 1e3 * (mrcnn_time_now() - t_s);
    s->ready.ready_t = NULL;
    s->ready.query_mem = 0;
    MRCNN_CHECK(s->ready.total > 0,
                "bench train: the timeline step made no gradient-ready report (was it replayed?); its buckets "
                "would all read 0 ms");
    double last_ready = 0;
    for (int p = 0; p < np; p++)
        if (ready_t[p] - t_s > last_ready) last_ready = ready_t[p] - t_s;
    res->bwd_ms = 1e3 * last_ready - res->fwd_ms;
    if (res->bwd_ms < 0) res->bwd_ms = 0;
    res->other_ms = full_ms - res->fwd_ms - res->bwd_ms;
    if (res->other_ms < 0) res->other_ms = 0;
    if (o->timeline) {
        char source[200];
        snprintf(source, sizeof source, "mrcnn bench train: %s %s, R50-FPN, %d img/GPU, %dx%d", be->name, mode, o->N,
                 o->H, o->W);
        write_timeline(o->timeline, &s->tr.bk, ready_t, t_s, res->fwd_ms, res->bwd_ms, res->other_ms, o->N, source);
        fprintf(stderr, "bench train: timeline (%d buckets, %d gradient-ready reports) written to %s\n",
                s->tr.bk.n_buckets, s->ready.total, o->timeline);
    }
    free(ready_t);
    res->timeline = 1;
    peak_of(be, s->ready.mem_mb, res);
}

int bench_train_main(int argc, char **argv) {
    bt_opts o;
    const int rc = parse_opts(argc, argv, &o);
    if (rc >= 0) return rc;
    const int N = o.N, H = o.H, W = o.W, K = o.K;
    mrcnn_config cfg;
    if (!bench_config(&cfg, &o, argc, argv)) return 1;

    const char *why = NULL;
    /* no fallback: a missing GPU is an error, not a CPU measurement */
    const mrcnn_backend_open_opts bo = {.device = mrcnn_backend_device_parse(o.device), .gpu = o.gpu};
    mrcnn_backend *be = mrcnn_backend_open(&bo, &why);
    if (!be) {
        fprintf(stderr, "mrcnn bench train: --device cuda but %s\n", why);
        return 1;
    }
    const char *mode = mrcnn_precision_apply(be, o.precision);
    // the CPU trims the ROI heads to the sampled rows because it knows their count at once
    if (o.fixed_rows) be->det.count_hint = NULL;

    bt_state *s = MRCNN_CALLOC(1, sizeof *s, "bench state");
    bt_state_init(s, &cfg, be, &o, mode);
    double t_data = mrcnn_time_now();
    bt_batch batches[BT_BATCHES];
    s->batches = batches;
    make_batches(batches, &cfg, &o, s->m.num_classes, be);
    fprintf(stderr, "bench train: %s %s, %d x %dx%d, %d objects, %lld parameters (%lld trainable), data %.1f s\n",
            be->name, mode, N, H, W, K, (long long)mrcnn_params_numel(&s->m.params, false),
            (long long)mrcnn_params_numel(&s->m.params, true), mrcnn_time_now() - t_data);

    bt_result res;
    timed_steps(s, be, &o, &res);
    /* The number the run exists for, before anything else can stop it. */
    print_result(s, be, mode, N, H, W, K, o.warmup, o.steps, &res);
    if (o.profile) mrcnn_step_profile_run(be, &s->m, N, profile_step, s, stdout, NULL);
    if (o.timeline_pass) {
        timeline_run(s, be, &o, mode, &res);
        printf("timeline: forward %.1f ms, backward %.1f ms, other %.1f ms (one synchronized step each, run "
               "directly), warmup %.1f s\n",
               res.fwd_ms, res.bwd_ms, res.other_ms, res.warm_s);
        print_json(s, be, mode, N, H, W, K, o.warmup, o.steps, &res);
    }

    const int finite = res.finite;
    for (int k = 0; k < BT_BATCHES; k++) batch_free(&batches[k], be);
    mrcnn_trainer_free(&s->tr);
    mrcnn_model_trainable_free(&s->mt);
    mrcnn_model_free(&s->m);
    free(s);
    mrcnn_backend_destroy(be);
    if (!finite) {
        fprintf(stderr, "mrcnn bench train: the loss is not finite (first %g, last %g)\n", res.loss_first, res.loss_last);
        return 1;
    }
    return 0;
}
