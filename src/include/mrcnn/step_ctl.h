/* The device-resident state of a training step: one small fp32 device
 * tensor, the "step control" vector, that holds the step's loss terms, its Inf/NaN
 * flag, the gradient norm, the decision to apply the update and its gradient
 * multiplier, the fp16 loss scaler's state and the log window's sums. The trainer
 * (src/train/trainer_step.c) writes it through the backend's step ops (backend.h,
 * be->step) and reads it once per log period, so that no step waits for the device.
 *
 * The decision (mrcnn_step_decide) is one scalar function shared by the CPU backend
 * and the CUDA kernel (one thread), so both decide alike; it mirrors the host
 * policies it replaces: the fp16 loss scaler (torch's GradScaler; the tests' host
 * reference is tests/common/test_support.c), clipping by the global L2 norm (SOLVER.CLIP_GRADIENTS) and the
 * counting of skipped steps toward SOLVER.MAX_NONFINITE.
 *
 * Counts and the step index are fp32: exact below 2^24 (16.7M steps), far beyond any
 * run's length (the 90k-step 1x schedule uses 0.5% of it). */
#ifndef MRCNN_STEP_CTL_H
#define MRCNN_STEP_CTL_H

#include <math.h>

#ifdef __CUDACC__
#define MRCNN_STEP_HD __host__ __device__
#else
#define MRCNN_STEP_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Fixed slots of the control vector, then the per-term ones (n = loss terms). */
enum {
    MRCNN_CTL_SUMSQ = 0,      // in: sum of squares of the stored (scaled) gradients
    MRCNN_CTL_APPLY = 1,      // out: 1 apply the update, 0 skip it (sgd view: APPLY, GRAD_SCALE)
    MRCNN_CTL_GRAD_SCALE = 2, // out: the gradients' multiplier in the update (unscale x clip)
    MRCNN_CTL_SCALE = 3,      // state: loss scale (fp16), 1 otherwise
    MRCNN_CTL_CLEAN = 4,      // state: clean steps since the scale last changed
    MRCNN_CTL_SKIPPED = 5,    // state: steps the scaler skipped, in total (scaler.skipped)
    MRCNN_CTL_NONFINITE = 6,  // state: non-finite steps counted toward MAX_NONFINITE, in total
    MRCNN_CTL_USED_SCALE = 7, // out: the loss scale this step's gradients carried
    /* in: what changes every step, written by the host with one be->mem.write before the
     * step's device region (trainer_step.c), so that the region's backend calls take the
     * same arguments every step and can be replayed as one CUDA graph: */
    MRCNN_CTL_LR = 8,         // the step's learning rate (be->step.sgd_update reads it)
    MRCNN_CTL_STEP_INDEX = 9, // the step's index (decide's newest-skipped-step bookkeeping);
                              // fp32, exact below 2^24 steps (the window stores it + 1)
    MRCNN_CTL_STEP = 10,      // (n) this step's loss terms (the trainable's run adds into them), then
                              // the flag: 0 finite; after the all-reduce, the ranks that saw Inf/NaN
};
#define MRCNN_CTL_FLAG(n) (MRCNN_CTL_STEP + (n))
/* The log window: zeroed as a whole when the trainer takes it. */
#define MRCNN_CTL_WIN(n) (MRCNN_CTL_STEP + (n) + 1)
#define MRCNN_CTL_WIN_FINITE(n) (MRCNN_CTL_WIN(n) + 0)    // steps applied
#define MRCNN_CTL_WIN_COUNTED(n) (MRCNN_CTL_WIN(n) + 1)   // skipped, counted toward MAX_NONFINITE
#define MRCNN_CTL_WIN_ADAPT(n) (MRCNN_CTL_WIN(n) + 2)     // skipped, the fp16 scale halving
#define MRCNN_CTL_WIN_BAD_STEP(n) (MRCNN_CTL_WIN(n) + 3)  // newest skipped step's index + 1 (0: none)
#define MRCNN_CTL_WIN_BAD_SCALE(n) (MRCNN_CTL_WIN(n) + 4) // the loss scale after it
#define MRCNN_CTL_WIN_SUM(n) (MRCNN_CTL_WIN(n) + 5)       // (n) terms summed over the applied steps
#define MRCNN_CTL_WIN_LAST(n) (MRCNN_CTL_WIN(n) + 5 + (n)) // (n) the newest step's terms
#define MRCNN_CTL_WIN_BAD(n) (MRCNN_CTL_WIN(n) + 5 + 2 * (n)) // (n) the newest skipped step's terms
#define MRCNN_CTL_WIN_SIZE(n) (5 + 3 * (n))
#define MRCNN_CTL_SIZE(n) (MRCNN_CTL_WIN(n) + MRCNN_CTL_WIN_SIZE(n))

/* What the decision needs from the host: fixed for the whole run. */
typedef struct mrcnn_step_desc {
    int n_losses;
    int scaler_enabled;  // fp16 dynamic loss scaling (the scaler's state then moves)
    int scales_loss;     // the model multiplied its gradients by the scale (trainer.h)
    int growth_interval; // clean steps before the scale doubles
    int clip_enabled;    // SOLVER.CLIP_GRADIENTS (needs SUMSQ)
    float clip_value;
    float inv_world;     // 1 / ranks: the step's terms are sums over the ranks
    float inv_accum;     // 1 / ACCUM_STEPS: the multiplier when the model does not scale
    /* Nothing here changes from step to step (the step index and the lr are in the
     * control vector, MRCNN_CTL_STEP_INDEX and MRCNN_CTL_LR): a captured decide replays. */
} mrcnn_step_desc;

/* One step's decision on c (the control vector), after the step's terms and flag were
 * summed over the ranks, SUMSQ was computed (when clipping) and the host wrote
 * STEP_INDEX. The policies are those
 * the host applied before (trainer_step.c, the loss scaler), in the same float/double
 * arithmetic, so fp16 runs keep their scale trajectory. */
MRCNN_STEP_HD static inline void mrcnn_step_decide(const mrcnn_step_desc *d, float *c) {
    const int n = d->n_losses;
    const int nonfinite = c[MRCNN_CTL_FLAG(n)] != 0.0f;
    const float used = d->scales_loss ? c[MRCNN_CTL_SCALE] : 1.0f;
    float grad_scale = d->scales_loss ? 1.0f / used : d->inv_accum;
    if (!nonfinite && d->clip_enabled) {
        double norm = sqrt((double)c[MRCNN_CTL_SUMSQ]) * fabs((double)grad_scale);
        if (norm > d->clip_value) grad_scale *= (float)(d->clip_value / (norm + 1e-6));
    }
    /* the loss scaler (train.h: mrcnn_loss_scaler) */
    if (d->scaler_enabled) {
        if (nonfinite) {
            float s = c[MRCNN_CTL_SCALE] * 0.5f;
            c[MRCNN_CTL_SCALE] = s < 1.1754944e-38f ? 1.1754944e-38f : s;
            c[MRCNN_CTL_CLEAN] = 0.0f;
            c[MRCNN_CTL_SKIPPED] += 1.0f;
        } else {
            c[MRCNN_CTL_CLEAN] += 1.0f;
            if (c[MRCNN_CTL_CLEAN] >= (float)d->growth_interval) {
                if (c[MRCNN_CTL_SCALE] * 2.0f < 3.0e38f) c[MRCNN_CTL_SCALE] *= 2.0f;
                c[MRCNN_CTL_CLEAN] = 0.0f;
            }
        }
    }
    c[MRCNN_CTL_APPLY] = nonfinite ? 0.0f : 1.0f;
    c[MRCNN_CTL_GRAD_SCALE] = grad_scale;
    c[MRCNN_CTL_USED_SCALE] = used;
    /* An fp16 overflow while the scale is above 1 is the scale adapting, not an
     * error; from 1 down it counts like an fp32 one, so no run skips forever. */
    if (nonfinite) {
        if (d->scaler_enabled && used > 1.0f) c[MRCNN_CTL_WIN_ADAPT(n)] += 1.0f;
        else {
            c[MRCNN_CTL_WIN_COUNTED(n)] += 1.0f;
            c[MRCNN_CTL_NONFINITE] += 1.0f;
        }
        c[MRCNN_CTL_WIN_BAD_STEP(n)] = c[MRCNN_CTL_STEP_INDEX] + 1.0f; // exact below 2^24 - 1
        c[MRCNN_CTL_WIN_BAD_SCALE(n)] = c[MRCNN_CTL_SCALE];
    } else
        c[MRCNN_CTL_WIN_FINITE(n)] += 1.0f;
    for (int i = 0; i < n; i++) {
        float v = c[MRCNN_CTL_STEP + i] * d->inv_world;
        if (!nonfinite) c[MRCNN_CTL_WIN_SUM(n) + i] += v;
        else c[MRCNN_CTL_WIN_BAD(n) + i] = v;
        c[MRCNN_CTL_WIN_LAST(n) + i] = v;
    }
}

struct mrcnn_backend;
/* Installs the host implementation of be->step (src/backend/cpu/backend_cpu_step.c): for the
 * CPU backend and for host stand-in backends in tests. */
void mrcnn_backend_cpu_fill_step(struct mrcnn_backend *be);

#ifdef __cplusplus
}
#endif
#endif
