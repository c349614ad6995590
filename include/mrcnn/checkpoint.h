/* The model checkpoint (schema v1): the weights of a mrcnn_model in HDF5
 * (src/model/checkpoint_io.c). The training checkpoint that adds the optimizer state
 * beside /model is the trainer's (trainer.h, src/train/checkpoint.c). */
#ifndef MRCNN_CHECKPOINT_H
#define MRCNN_CHECKPOINT_H

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
/* The group helpers, for the training checkpoint that adds optimizer state beside
 * /model in the same file (hid_t passed as int64_t to keep HDF5 out of this header). */
void mrcnn_checkpoint_write_model_group(const mrcnn_model *m, int64_t file_id);
void mrcnn_checkpoint_read_model_group(mrcnn_model *m, int64_t file_id, const char *path);

#ifdef __cplusplus
}
#endif
#endif
