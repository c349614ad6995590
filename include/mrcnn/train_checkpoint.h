/* Training checkpoints (src/train/checkpoint.c): the weights with the optimizer state
 * and the run's position, so that --resume continues bit for bit.
 *
 * OUTPUT_DIR/model_<step, 7 digits>.h5 written by rank 0 as a temporary file
 * (.model_*.h5.tmp), fsynced and renamed, so a file with the final name is always
 * complete; the newest SOLVER.CHECKPOINT_KEEP are kept. Layout:
 *   /model/<param name>              fp32 master weights (the model's schema, v1)
 *   /fold_scale/<param name>         (K) the frozen BN scale folded into a conv weight
 *   /optimizer/momentum/<param name> fp32 SGD momentum
 *   /config                          the config used (YAML, mrcnn_config_dump)
 *   attributes on /: schema_version, step, epoch, loader_step, loader_batch,
 *     images_seen, nonfinite, loss_scale_enabled, loss_scale,
 *     loss_scale_growth_interval, loss_scale_clean_steps, loss_scale_skipped,
 *     lr, base_lr, world_size, global_batch, seed, complete (= 1, written last)
 * Every dataset is one chunk with HDF5's Fletcher-32 checksum and the file uses the
 * HDF5 1.10 format (checksummed metadata; the attributes stay in the root's header),
 * so any flipped byte fails the load (src/train/checkpoint.c). A write that fails
 * removes its temporary file and stops the run (exit 1) naming the file and why.
 *
 * /model and /fold_scale are the model file's (checkpoint.h): a training checkpoint
 * is also a MODEL.WEIGHTS for a new run, and weights.py export reads it. */
#ifndef MRCNN_TRAIN_CHECKPOINT_H
#define MRCNN_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "mrcnn/arena.h"
#include "mrcnn/backend.h"
#include "mrcnn/config.h"
#include "mrcnn/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The state a checkpoint carries beside the weights. */
typedef struct mrcnn_train_state {
    int64_t step;         // optimizer steps done
    int64_t epoch, loader_step; // loader cursor
    int loader_batch;     // images per loader step over all ranks (ranks x per-rank batch)
    int64_t nonfinite;    // non-finite steps seen (fp32/bf16)
    mrcnn_loss_scaler scaler;
    double lr, base_lr;
    int world_size, global_batch;
    int64_t seed;
} mrcnn_train_state;

/* HDF5 calls from the training thread while a loader thread also uses HDF5 must be
 * serialized by the loader's lock (data.h): pass it here (NULL: none). */
void mrcnn_checkpoint_set_lock(void (*lock)(void), void (*unlock)(void));
/* Writes dir/model_<step>.h5 atomically (the caller is rank 0): params and fold_scale
 * (mrcnn_trainable's, NULL: none) through the model's /model writer, the momentum when
 * not NULL, the state and the config; then deletes all but the newest keep. Returns
 * through path (>= 1024 bytes) the file written. */
void mrcnn_checkpoint_save(const char *dir, const mrcnn_backend *be, const mrcnn_arena *params,
                           float *const *fold_scale, const mrcnn_arena *momentum, const mrcnn_train_state *st,
                           const mrcnn_config *cfg, int keep, char *path);
/* The paths of dir/model_*.h5, newest first; free with mrcnn_checkpoint_list_free.
 * (--resume takes the newest that mrcnn_checkpoint_try_load loads.) */
int mrcnn_checkpoint_list(const char *dir, char ***paths);
void mrcnn_checkpoint_list_free(char **paths, int n);
/* Loads weights by name (every parameter must be present with its shape), the
 * momentum when momentum != NULL, and the state when st != NULL. Returns 0 with the
 * reason in why (nothing loaded: the arenas are written only when all of it loads)
 * when the file is unreadable, not marked complete, lacks a dataset or an attribute,
 * has a dataset of another shape, fails a checksum (a flipped byte; trainer.c's
 * checkpoints are checksummed, checkpoint.c says how) or holds non-finite weights or
 * momentum. */
int mrcnn_checkpoint_try_load(const char *path, const mrcnn_backend *be, mrcnn_arena *params,
                              mrcnn_arena *momentum, mrcnn_train_state *st, char *why, size_t why_len);
/* Whether the checkpoint's weights mean what this process would train: its
 * /fold_scale (the frozen BN scales folded into its convs) equal, bit for bit, the
 * scales fold_scale ((params->n_entries) or NULL: none) holds now. 0 with the first
 * difference in why. A checkpoint without /fold_scale (written before the scales were
 * stored) matches. */
int mrcnn_checkpoint_fold_scales_match(const char *path, const mrcnn_arena *params, float *const *fold_scale,
                                       char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
