/* The training loop, over any model that exposes its parameters as a flat fp32 arena
 * and a stage + run callback pair (the Mask R-CNN binding is model_trainable.h,
 * src/train/model_trainable.c; `mrcnn train`, src/cli/cmd_train.c, gives it its batch
 * source and evaluation; tests bind small stand-ins).
 *
 * One optimizer step = ACCUM_STEPS micro-batches of IMS_PER_BATCH / (ranks x
 * ACCUM_STEPS) images per rank; gradients are summed over micro-batches (the model
 * scales each micro-batch's loss by 1/ACCUM_STEPS) and averaged over ranks in
 * buckets during the last micro-batch's backward.
 *
 * Checkpoints: train_checkpoint.h.
 * All randomness is keyed by (SEED, epoch, global image index), so SEED plus the
 * loader cursor (epoch, loader_step) is the whole RNG state.
 *
 * Resuming with a different number of ranks (N -> M): the global batch
 * (SOLVER.IMS_PER_BATCH) is what the checkpoint's step counts in, so it should stay
 * the same; M ranks split it as IMS_PER_BATCH / (M x ACCUM_STEPS) per rank (raise
 * ACCUM_STEPS when it no longer fits). The loader cursor counts loader steps of
 * loader_batch = ranks x per-rank images; when that changes (other ACCUM_STEPS) it
 * is converted through the images consumed, so the data order continues exactly
 * (within an epoch whose image count both batch sizes divide). If the resolved global batch differs from the
 * checkpoint's (e.g. REFERENCE_WORLD_SIZE rescaled it for M ranks), training
 * continues from the same step with the rescaled LR and a warning. */
#ifndef MRCNN_TRAINER_H
#define MRCNN_TRAINER_H

#include <stdint.h>

#include "mrcnn/config.h"
#include "mrcnn/dist.h"
#include "mrcnn/metrics.h"
#include "mrcnn/train.h"
#include "mrcnn/train_checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mrcnn_trainable {
    void *ctx;
    mrcnn_arena *params; // fp32 master weights, on the backend's device
    mrcnn_arena *grads;  // same layout
    const bool *trainable; // (params->n_entries) or NULL: all
    /* Fills q (params->size / 4) with SGD's per-element preconditioner (train.h: s^2 on
     * a conv weight with a frozen BN of scale s folded into it, 1 elsewhere), read once
     * when the trainer starts; NULL: all 1. */
    void (*precond)(void *ctx, float *q);
    /* (params->n_entries) or NULL: the per-output-channel scale s folded into each entry
     * (params.h, NULL where none), written to every checkpoint as /fold_scale so that a
     * checkpoint given as MODEL.WEIGHTS, or exported, knows what its weights mean. */
    float *const *fold_scale;
    int n_losses;
    const char *const *loss_names; // (n_losses)
    /* 1 when run applies loss_mult to its gradients. 0: it always
     * computes plain gradients; then the trainer passes loss_mult = 1, divides by
     * ACCUM_STEPS in the update, and an fp16 run has no loss scaling (the scaler
     * still skips Inf/NaN steps). */
    int scales_loss;
    /* One micro-batch of this rank in two halves, so that the device half
     * can be captured once and replayed as a CUDA graph:
     * stage: the host half. Takes the loader's next batch and uploads everything the
     * device half reads (images, ground truth padded to a capacity bucket, per-image rng
     * keys, image sizes, anchors) into device buffers whose addresses depend only on the
     * shapes. Sets *shape_key to a nonzero hash of those shapes (equal keys: the device
     * half makes the same backend calls with the same arguments), or 0 when the device
     * half cannot be replayed. Returns the seconds it waited for data. No device work
     * other than uploads. */
    double (*stage)(void *ctx, int64_t step, int micro, uint64_t *shape_key);
    /* run: the device half of the staged micro-batch: forward, targets, losses,
     * backward. ADDS the gradients of loss_mult x loss_scale x (sum of the loss terms)
     * into grads; loss_scale is (1) fp32 on the device (the fp16 loss scale the device
     * decides), or NULL for 1. ADDS acc_mult x the unscaled terms into loss_acc, (n_losses)
     * fp32 on the device (be->step.axpy): the step never reads them back. When bk is not
     * NULL (the last micro-batch) it calls mrcnn_buckets_mark_ready for each parameter
     * whose gradient is final. No host reads, no uploads, no host data (only shapes
     * recorded by stage); its temporaries are allocated and released inside it, so a
     * captured replay owns them. */
    void (*run)(void *ctx, int micro, float loss_mult, const mrcnn_tensor *loss_scale, mrcnn_tensor *loss_acc,
                float acc_mult, mrcnn_buckets *bk);
    /* The loader position of the next micro-batch, for checkpoints, and a way to set
     * it at resume (both may be NULL when the model has no loader). */
    void (*get_cursor)(void *ctx, int64_t *epoch, int64_t *loader_step);
    void (*set_cursor)(void *ctx, int64_t epoch, int64_t loader_step);
    /* Evaluates the current weights (collective over all ranks), called after every
     * TEST.EVAL_PERIOD-th step and after the last one; e->step is set, the callee fills
     * the rest on rank 0. NULL: the model is never evaluated. */
    void (*evaluate)(void *ctx, mrcnn_eval_metrics *e);
} mrcnn_trainable;

/* OUTPUT_DIR for a training run (rank 0 only; src/train/output_dir.c): created with
 * its parents when missing, checked writable by creating and removing a file, and
 * locked with flock on OUTPUT_DIR/.lock (holding "host H pid P") until the process
 * exits or mrcnn_output_dir_release. Fails (exit 1) naming the directory and why: not
 * creatable, not writable, or in use by another training (its host and pid). Claiming
 * the directory this process already holds does nothing; mrcnn_trainer_run claims it
 * itself when the caller has not. */
void mrcnn_output_dir_claim(const char *dir);
void mrcnn_output_dir_release(void);

/* ---- one training step (src/train/trainer_step.c) ----
 * The step that `mrcnn train` (mrcnn_trainer_run), `mrcnn bench train` and the GPU
 * model test all run, so that what is timed and tested is what trains. One call, in
 * three parts:
 *  - stage (host): the step's lr (from the schedule) and index to the device control
 *    vector with one be->mem.write, and the model's stage of the first micro-batch (its
 *    uploads, its shape key);
 *  - region (device): gradients zeroed; ACCUM_STEPS micro-batches through the model's
 *    run (forward, backward, the model's batch-wide loss normalizers; the last
 *    micro-batch starts the gradient buckets' all-reduce as parameters become ready;
 *    with ACCUM_STEPS > 1 the later micro-batches' stage runs here too); the bucket wait
 *    (gradients averaged over ranks); a device all-reduce of the loss terms and the
 *    Inf/NaN flag; the non-finite check, gradient clipping (SOLVER.CLIP_GRADIENTS) and
 *    the loss scaler's decision, on the device (step_ctl.h); the fused SGD update, which
 *    a skipped step leaves out on the device. Its backend calls take the same arguments
 *    every step of a shape key: nothing in it is a per-step host value;
 *  - tail (host): one host all-reduce of the preemption flag and the data wait;
 *    st.step + 1.
 * It does not: log the window, write metrics, checkpoint, evaluate, act on a
 * preemption signal or stop at SOLVER.MAX_NONFINITE (mrcnn_trainer_take_losses reports
 * what the caller needs for those), broadcast or load weights, or synchronize the
 * device at its end.
 *
 * CUDA graphs (SOLVER.CUDA_GRAPH, mrcnn_config_cuda_graph): the region is captured and
 * replayed when the config says so for the backend, ACCUM_STEPS is 1, the all-reduces
 * are capturable (one rank, or NCCL) and stage gave a nonzero shape key. A cache of MRCNN_GRAPH_CACHE_SIZE keys (least recently used
 * evicted): a key's first step runs the region directly (the warm-up: every lazily
 * sized buffer, cuDNN algorithm choice and workspace reaches its size), its second
 * captures and launches it, later ones replay it. When the backend's graph_epoch
 * changes (it reallocated a buffer that graphs point at), every graph is destroyed and
 * its key captured again at its next step. A backend that cannot capture (CPU:
 * graph_begin returns 0) turns graphs off for the run; so does a graph failure of any
 * kind (the capture's start, a call refused or failing inside the captured region, its
 * end, instantiation, a launch: one warning), and the step then reruns directly. A
 * capture records and a failed launch queues nothing, so the rerun starts from the
 * weights and state the step began with: the same results as with graphs off.
 *
 * Issue 12: a step performs no host read. The loss terms, the skipped steps, the
 * non-finite count and the fp16 scaler's state stay in the trainer's device control
 * vector; mrcnn_trainer_take_losses reads it once (LOG_PERIOD, or every step for a
 * caller that wants each step's loss), names the skipped steps in log lines and
 * brings st up to date; mrcnn_trainer_sync_state reads it for a checkpoint. */

/* ---- the graph cache (pure bookkeeping; the trainer makes the backend calls) ---- */
#define MRCNN_GRAPH_CACHE_SIZE 4
typedef struct mrcnn_graph_entry {
    uint64_t key;  // shape key (0: free)
    void *graph;   // the captured region, NULL while the key is only warmed up
    uint64_t used; // the cache's clock at its last use (LRU)
} mrcnn_graph_entry;

typedef struct mrcnn_graph_cache {
    uint64_t epoch; // the backend's graph_epoch the graphs were captured at
    uint64_t clock;
    mrcnn_graph_entry e[MRCNN_GRAPH_CACHE_SIZE];
} mrcnn_graph_cache;

typedef enum {
    MRCNN_GRAPH_DIRECT = 0, // graphs off, or a step that cannot be replayed: run the region
    MRCNN_GRAPH_WARMUP,     // a key's first step: run the region directly
    MRCNN_GRAPH_CAPTURE,    // its second: capture the region, store the graph, launch it
    MRCNN_GRAPH_REPLAY,     // later: launch the stored graph
} mrcnn_graph_action;

typedef struct mrcnn_graph_plan {
    mrcnn_graph_action action;
    int slot;                              // the key's entry (-1 with DIRECT)
    int flushed;                           // the epoch changed: every graph was forgotten
    int n_destroy;                         // graphs the caller destroys before acting:
    void *destroy[MRCNN_GRAPH_CACHE_SIZE]; //   all of them on a new epoch, else the evicted one
} mrcnn_graph_plan;

/* SOLVER.CUDA_GRAPH for a backend named backend_name ("cpu", "cuda"): 1 when the step
 * should be captured and replayed (on; auto = on for cuda), 0 when not; fails naming
 * the key on any other value. */
int mrcnn_config_cuda_graph(const mrcnn_config *cfg, const char *backend_name);
/* Whether a run may use graphs: config_on (mrcnn_config_cuda_graph), ACCUM_STEPS, the
 * world size and whether the all-reduces go through NCCL (capturable). 0 with the
 * reason in *why (a static string) when not. */
int mrcnn_graph_allowed(int config_on, int accum_steps, int world_size, int nccl, const char **why);
/* The step's action for shape key under the backend's current epoch, with the cache
 * updated (the key's entry made or refreshed, an LRU entry evicted, graphs forgotten on
 * a new epoch: their keys stay warmed up, since buffers only grow). allowed = 0 or
 * key = 0: DIRECT and the cache untouched. After CAPTURE the caller stores the graph in
 * c->e[slot].graph (NULL when the capture failed). */
mrcnn_graph_plan mrcnn_graph_cache_plan(mrcnn_graph_cache *c, int allowed, uint64_t key, uint64_t epoch);

typedef struct mrcnn_trainer {
    const mrcnn_config *cfg; // resolved (SOLVER.* drive the step); SOLVER.PRECISION a mode, not auto
    mrcnn_dist *dist;
    mrcnn_backend *be;
    mrcnn_trainable *model;
    mrcnn_train_state st;    // what a checkpoint carries: step, loss scaler, non-finite count, lr
    mrcnn_sgd sgd;           // its momentum is checkpointed too
    mrcnn_lr_schedule sched;
    mrcnn_buckets bk;
    /* Test hook: called with begin = 1 right before the step's device region and 0 right
     * after it (whether run, captured and launched, or replayed). NULL: none. */
    void (*on_region)(void *ctx, int begin);
    void *on_region_ctx;
    /* private to trainer_step.c */
    mrcnn_tensor gflat;
    mrcnn_tensor ctl;   // (MRCNN_CTL_SIZE(n_losses)) fp32 on the device: step_ctl.h
    void *ctl_mem;
    float *ctl_host;    // its copy at the last read
    int ctl_uploaded;   // st's scaler and non-finite count went to the device (first step)
    double win_data;    // data wait (mean over ranks), summed over the window's steps
    int64_t win_steps;
    int graphs;         // graphs allowed for this run (mrcnn_graph_allowed; 0 after a failure)
    mrcnn_graph_cache gc;
    struct { int64_t direct, warmup, capture, replay, flush; } graph_stats; // steps by action, epoch flushes
} mrcnn_trainer;

/* What the caller of one step needs every step; all of it agreed over the ranks. */
typedef struct mrcnn_step_result {
    int64_t step;     // the step's index (st.step before it; st.step is one more now)
    float lr;         // the learning rate it used
    float loss_scale; // the loss scale as the host knows it (1 unless fp16 scales): as of the
                      // last read of the control vector; the device decides the current one
    int stop_signal;  // SIGTERM/SIGUSR1 arrived on some rank (mrcnn_signals_pending)
    double data_s;    // seconds the model's stage waited for data, mean over ranks
    /* Whether the step was applied or skipped is decided on the device: it is known
     * at the next mrcnn_trainer_take_losses (mrcnn_loss_window). */
} mrcnn_step_result;

/* The loss terms of the steps since the last mrcnn_trainer_take_losses (or init). */
typedef struct mrcnn_loss_window {
    int64_t steps;        // steps in the window
    int64_t finite_steps; // of those, the ones with finite losses and gradients
    int n_losses;
    double mean[MRCNN_MAX_LOSS_TERMS]; // each term's mean over the finite steps (NAN: none)
    double mean_total;                 // sum of the means
    double last[MRCNN_MAX_LOSS_TERMS]; // the newest step's terms, finite or not (NAN: none)
    double last_total;                 // sum of those (NAN: no step in the window)
    double data_s;                     // data wait summed over the steps (mean over ranks)
    /* Skipped steps (Inf/NaN in a loss term or gradient on some rank): */
    int64_t counted;      // counted toward SOLVER.MAX_NONFINITE (now st.nonfinite in total)
    int64_t adapted;      // the fp16 loss scale halving (scale > 1 then)
    int64_t last_skipped; // the newest skipped step's index (-1: none)
    char what[256];       // what held Inf/NaN there, for messages ("" when none)
} mrcnn_loss_window;

/* Loss scaler (SOLVER.PRECISION fp16), LR schedule, SGD state, gradient buckets of
 * bucket_bytes (0: MRCNN_BUCKET_BYTES_DEFAULT) and a state at step 0. Checks the loss
 * term count and SOLVER.PRECISION. Touches neither the weights nor other ranks. */
void mrcnn_trainer_init(mrcnn_trainer *t, const mrcnn_config *cfg, mrcnn_dist *dist, mrcnn_backend *be,
                        mrcnn_trainable *model, size_t bucket_bytes);
void mrcnn_trainer_free(mrcnn_trainer *t);
/* One optimizer step (above). Collective: every rank calls it for every step. */
void mrcnn_trainer_step(mrcnn_trainer *t, mrcnn_step_result *r);
/* The same step with its region run directly, neither captured nor replayed, whatever
 * the graph cache holds (the cache is left as it was): for a caller that needs the
 * trainable's host callbacks inside the region, e.g. `mrcnn bench train`'s timeline,
 * which times each gradient-ready report. Collective like mrcnn_trainer_step. */
void mrcnn_trainer_step_direct(mrcnn_trainer *t, mrcnn_step_result *r);
/* Fills w with the window and starts a new one: the one read of the device control
 * vector per log period (the terms were averaged over the ranks on the device, step by
 * step). Logs the window's skipped steps
 * (a line naming the term or gradient and the step when there is one; a count and the
 * newest otherwise) and updates st (non-finite count, loss scaler). Every rank calls
 * it at the same steps. */
void mrcnn_trainer_take_losses(mrcnn_trainer *t, mrcnn_loss_window *w);
/* Reads the device control vector into st (non-finite count, loss scaler) without
 * touching the window: before a checkpoint. One read. */
void mrcnn_trainer_sync_state(mrcnn_trainer *t);

typedef struct mrcnn_trainer_opts {
    int resume;          // --resume: continue from the newest checkpoint in OUTPUT_DIR
    int64_t max_steps;   // stop after this many optimizer steps in total (0: SOLVER.MAX_ITER)
    size_t bucket_bytes; // 0: MRCNN_BUCKET_BYTES_DEFAULT
    int quiet;           // no log lines (metrics.json and events are still written)
} mrcnn_trainer_opts;

/* Runs training to the end, a preemption signal or too many non-finite steps.
 * cfg must be resolved (workers scaled); the model's params hold the initial
 * weights on rank 0. Returns the process exit code (train.h). */
int mrcnn_trainer_run(const mrcnn_config *cfg, const mrcnn_trainer_opts *opts, mrcnn_dist *dist,
                      mrcnn_backend *be, mrcnn_trainable *model);

#ifdef __cplusplus
}
#endif
#endif
