/* The model checkpoint (schema v1): the weights of a mrcnn_model in HDF5
 * (src/model/checkpoint_io.c). The training checkpoint that adds the optimizer state
 * beside /model is the trainer's (train_checkpoint.h, src/train/checkpoint.c). */
#ifndef MRCNN_CHECKPOINT_H
#define MRCNN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include "mrcnn/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- checkpoint schema v1 -------------------------------------------------------
 * HDF5: attribute /schema_version = 1; dataset /model/<param name> per parameter in
 * the project layout. Loading also accepts unfolded backbone convs with their BN
 * tensors (/model/<bn>.weight, .bias, .running_mean, .running_var), as written by
 * data_prep/weights.py, and folds them. */
#define MRCNN_CHECKPOINT_SCHEMA_VERSION 1
/* Writes path atomically (temp file, fsync, rename). Host copy of the weights. */
void mrcnn_checkpoint_save_model(const mrcnn_model *m, const char *path);
void mrcnn_checkpoint_load_model(mrcnn_model *m, const char *path);
/* Loads the parameters the file has (e.g. an ImageNet ResNet imported by weights.py:
 * the backbone only) and leaves the others as they are; returns how many it loaded. */
int mrcnn_checkpoint_load_model_partial(mrcnn_model *m, const char *path);
/* The one writer and reader of the groups of a checkpoint, for the training checkpoint
 * that adds optimizer state beside /model in the same file (hid_t passed as int64_t to
 * keep HDF5 out of this header; path names the file in messages).
 * write_model_group: /model (every entry of values, read from the backend in one copy)
 * and /fold_scale/<name> (K) for each entry with a folded scale (fold_scale:
 * (values->n_entries) or NULL: none), as mrcnn_checkpoint_save_model writes them.
 * write_group: every entry of a as a dataset of group (made with its parents). Each
 * dataset is one chunk with the Fletcher-32 checksum; a failed write is fatal (exit 1). */
void mrcnn_checkpoint_write_model_group(int64_t file_id, const mrcnn_backend *be, const mrcnn_arena *values,
                                        float *const *fold_scale, const char *path);
void mrcnn_checkpoint_write_group(int64_t file_id, const char *group, const mrcnn_backend *be, const mrcnn_arena *a,
                                  const char *path);
/* Reads every entry of a from group into host (a->size bytes, the arena's layout).
 * Returns 0 with the reason in why, never exiting, when a dataset is missing, has
 * another shape, fails its checksum or holds a non-finite value. */
int mrcnn_checkpoint_try_read_group(int64_t file_id, const char *group, const mrcnn_arena *a, float *host, char *why,
                                    size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
