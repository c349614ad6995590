/* Mask R-CNN (model.h) as the trainer's trainable (trainer.h): the one binding that
 * `mrcnn train`, `mrcnn bench train` and the GPU model test share, over a batch source
 * each of them supplies (the loader's feed, the bench's fixed batches, the test's
 * synthetic ones). stage is the host half of a micro-batch (the source's next batch
 * uploaded by mrcnn_model_stage into the model's staging slot of that micro-batch, and
 * its shape key); run the device half (mrcnn_model_run, the loss terms added into the
 * trainer's accumulator on the device, the gradient-ready reports of the last
 * micro-batch), whose temporaries live in this binding's workspace and are released
 * before it returns, so that a captured replay owns them (src/train/model_trainable.c). */
#ifndef MRCNN_MODEL_TRAINABLE_H
#define MRCNN_MODEL_TRAINABLE_H

#include <stdint.h>

#include "mrcnn/dist.h"
#include "mrcnn/model.h"
#include "mrcnn/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills *b (zeroed first) with micro-batch `micro` of optimizer step `step`: images
 * (host_images with the shape in images, or a device tensor), image_hw, gt and, for the
 * RNG keys, image_index and epoch. What b points to must stay valid until the next
 * call. Returns the seconds it waited for data. */
typedef double (*mrcnn_batch_source)(void *ctx, int64_t step, int micro, mrcnn_batch *b);

typedef struct mrcnn_model_trainable {
    /* What the trainer takes (&mt->tm): params, grads, trainable, loss names, stage and
     * run are set by init; the caller may add get_cursor, set_cursor and evaluate, which
     * receive tm.ctx = this struct (source_ctx holds the caller's state). */
    mrcnn_trainable tm;
    mrcnn_model *model;         // not owned
    mrcnn_ws ws;                // run's temporaries, reset before run returns
    mrcnn_batch_source next;
    void *source_ctx;
    /* Gradient-ready reports of the last micro-batch: NULL marks the parameter ready in
     * its bucket (mrcnn_buckets_mark_ready); a caller that also watches them (the
     * bench's timeline) sets its own and marks the bucket itself. */
    void (*on_ready)(int param_index, mrcnn_buckets *bk, void *ctx);
    void *on_ready_ctx;
    mrcnn_buckets *bk;          // private: the current run's
} mrcnn_model_trainable;

/* Binds model m (its params and grads, MRCNN_N_LOSSES terms, loss scaling by the model)
 * to batches from next(source_ctx, ...). */
void mrcnn_model_trainable_init(mrcnn_model_trainable *mt, mrcnn_model *m, mrcnn_batch_source next,
                                void *source_ctx);
void mrcnn_model_trainable_free(mrcnn_model_trainable *mt);

#ifdef __cplusplus
}
#endif
#endif
