/* Training pieces: SGD on the flat arenas, the LR schedule and its scaling rule,
 * the fp16 dynamic loss scaler, preemption signals and the job exit codes.
 *
 * Exit codes of `mrcnn train` (jobs/ requeue on MRCNN_EXIT_REQUEUE):
 *   0   finished SOLVER.MAX_ITER (or --max-steps)
 *   1   an error (message names the rank and what failed)
 *   2   bad command line
 *   3   comm timeout (dist.h: a rank died or hangs)
 *   4   too many non-finite steps (SOLVER.MAX_NONFINITE)
 *   99  preempted: SIGTERM or SIGUSR1 arrived (Slurm's --signal=USR1@120), the
 *       step in flight finished and a checkpoint was written; requeue the job and
 *       start it again with --resume.
 * What mpirun and srun report when a rank is killed or the launcher itself is
 * signalled is theirs to decide: README.md, "Exit codes". */
#ifndef MRCNN_TRAIN_H
#define MRCNN_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "mrcnn/arena.h"
#include "mrcnn/backend.h"
#include "mrcnn/config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MRCNN_EXIT_NONFINITE 4
#define MRCNN_EXIT_REQUEUE 99

/* ---- LR schedule (detectron2's WarmupMultiStepLR / WarmupCosineLR) ----
 * lr(it) = BASE_LR * warmup(it) * decay(it), with
 *   warmup(it) = WARMUP_FACTOR * (1 - a) + a, a = it / WARMUP_ITERS, for it < WARMUP_ITERS (else 1)
 *   multistep: decay(it) = GAMMA ^ (number of STEPS <= it)
 *   cosine:    decay(it) = 0.5 * (1 + cos(pi * it / MAX_ITER)) */
typedef enum { MRCNN_LR_MULTISTEP = 0, MRCNN_LR_COSINE = 1 } mrcnn_lr_kind;

typedef struct mrcnn_lr_schedule {
    mrcnn_lr_kind kind;
    float base_lr, warmup_factor, gamma;
    int warmup_iters, max_iter;
    int n_milestones;
    int milestones[16]; // SOLVER.STEPS: iterations where the LR drops, increasing
} mrcnn_lr_schedule;

void mrcnn_lr_schedule_init(mrcnn_lr_schedule *s, const mrcnn_config *cfg);
float mrcnn_lr_at(const mrcnn_lr_schedule *s, int64_t iter);

/* ---- scaling with the number of workers ----
 * detectron2's DefaultTrainer.auto_scale_workers: with SOLVER.REFERENCE_WORLD_SIZE
 * R > 0 and W ranks, factor = W / R; IMS_PER_BATCH and BASE_LR are multiplied by
 * it; MAX_ITER, WARMUP_ITERS, STEPS, CHECKPOINT_PERIOD and TEST.EVAL_PERIOD divided
 * (rounded), so the schedule covers the same number of epochs. R = 0 or R = W:
 * unchanged. Returns the factor. */
double mrcnn_config_scale_workers(mrcnn_config *cfg, int world_size);
/* Images per rank per micro-step: IMS_PER_BATCH / (world * ACCUM_STEPS); fails
 * naming the three numbers when it does not divide. */
int mrcnn_per_rank_batch(const mrcnn_config *cfg, int world_size);

/* ---- the fp16 dynamic loss scaler ----
 * Loss multiplied by `scale` before backward; gradients by 1/scale in the update.
 * A step with Inf/NaN gradients is skipped and the scale halved; after
 * growth_interval clean steps in a row it doubles. */
typedef struct mrcnn_loss_scaler {
    int enabled;         // 0: scale stays 1 (fp32, bf16)
    float scale;
    int growth_interval;
    int clean_steps;     // clean steps since the last change
    int64_t skipped;     // steps skipped for Inf/NaN, in total
} mrcnn_loss_scaler;

void mrcnn_loss_scaler_init(mrcnn_loss_scaler *s, int enabled, float init_scale, int growth_interval);

/* ---- SGD with momentum and weight decay over the flat arenas ----
 * decay multiplier per element (fp32, like the params arena): SOLVER.WEIGHT_DECAY
 * for weights, WEIGHT_DECAY_BIAS / WEIGHT_DECAY_NORM (as a ratio to WEIGHT_DECAY)
 * for parameters named "*.bias" / "*norm*", "*bn*" or "*.gn*" (detectron2's
 * groups), 0 for frozen parameters; and a preconditioner q per element, s^2 on a conv
 * weight with a frozen BN of scale s folded into it (optimizer.c derives why), 1
 * elsewhere. One fused backend call (sgd_update) per step:
 *   g = grad * grad_scale * q + weight_decay * mask * p;  v = momentum * v + g;  p -= lr * v
 * and clipping's norm is sqrt(sum q grad^2) (step.sum_squares weighted by precond). */
typedef struct mrcnn_sgd {
    mrcnn_arena momentum; // fp32, the params' layout, on their device
    mrcnn_tensor coef;    // (2, n) fp32: decay multipliers of weight_decay, then q; n = params.size / 4
    mrcnn_tensor precond; // (n) fp32: view of coef's second row
    void *coef_mem;
    int64_t preconditioned; // elements with q != 1
    float momentum_coef, weight_decay;
    const mrcnn_backend *be;
} mrcnn_sgd;

/* trainable may be NULL (all train); otherwise (params->n_entries) flags. precond:
 * (params->size / 4) host values q > 0, or NULL for all 1 (mrcnn_params_precond). */
void mrcnn_sgd_init(mrcnn_sgd *o, const mrcnn_backend *be, const mrcnn_arena *params,
                    const bool *trainable, const float *precond, const mrcnn_config *cfg);
/* Logs (info) what trains: the trainable parameter count, and per group (weights,
 * biases, norms: the decay rule's groups) its size, learning rate and decay. */
void mrcnn_sgd_log(const mrcnn_sgd *o, const mrcnn_arena *params, const bool *trainable, const mrcnn_config *cfg);
/* The decay multiplier of one parameter by its name (the rule above). */
float mrcnn_sgd_decay_multiplier(const char *name, const mrcnn_config *cfg);
void mrcnn_sgd_free(mrcnn_sgd *o);

/* The whole arena as one flat fp32 tensor. */
mrcnn_tensor mrcnn_arena_flat(const mrcnn_arena *a);
/* The first parameter whose gradient holds Inf/NaN (host copy), or -1. */
int mrcnn_first_nonfinite_param(const mrcnn_backend *be, const mrcnn_arena *grads);

/* ---- preemption signals ----
 * SIGTERM and SIGUSR1 set a flag; the trainer checks it (agreed over ranks) after
 * each step, checkpoints and exits with MRCNN_EXIT_REQUEUE. SIGXFSZ is ignored (a
 * file size limit makes the write fail with EFBIG, reported naming the file).
 * Idempotent; `mrcnn train` calls it first thing, the trainer again. */
void mrcnn_signals_install(void);
/* 0, or the signal number that arrived. */
int mrcnn_signals_pending(void);
/* For tests: with MRCNN_TEST_HOLD_AT_STEP=step in the environment, waits (up to 60 s)
 * until a signal has arrived (or MRCNN_TEST_HOLD_UNTIL's file exists); otherwise returns
 * at once (src/train/test_hooks.c). */
void mrcnn_signals_test_hold(int64_t step);

#ifdef __cplusplus
}
#endif
#endif
