/* The loader's feed (train_feed.h) as the batch source of the Mask R-CNN trainable
 * (model_trainable.h): each micro-batch is this rank's next loader batch, its images
 * left in the feed's buffer for the model's stage to upload and its ground truth viewed
 * in place. The feed opens at the first batch, from the cursor set before it (--resume
 * sets it), so a resumed run reads on from where the checkpoint's loader stopped
 * (src/train/feed_source.c). */
#ifndef MRCNN_FEED_SOURCE_H
#define MRCNN_FEED_SOURCE_H

#include <stdint.h>

#include "mrcnn/config.h"
#include "mrcnn/dist.h"
#include "mrcnn/model.h"
#include "mrcnn/train_feed.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mrcnn_feed_source {
    const mrcnn_config *cfg;
    mrcnn_dist *dist;
    mrcnn_device device;    // where the model's images go
    int per_rank;           // images per rank in a micro-batch
    mrcnn_train_feed *feed; // NULL until the first batch
    int64_t epoch0, step0;  // the loader cursor to start from
    mrcnn_image_gt *gt;     // (gt_cap) views of the current batch's ground truth
    int gt_cap;
} mrcnn_feed_source;

void mrcnn_feed_source_init(mrcnn_feed_source *s, const mrcnn_config *cfg, mrcnn_dist *dist, mrcnn_device device,
                            int per_rank);
/* A mrcnn_batch_source (model_trainable.h): the next batch of this rank. */
double mrcnn_feed_source_next(mrcnn_feed_source *s, mrcnn_batch *out);
/* The loader position of the next batch (the start cursor before the first). */
void mrcnn_feed_source_cursor(const mrcnn_feed_source *s, int64_t *epoch, int64_t *loader_step);
/* Where the first batch starts; only before it (fails after). */
void mrcnn_feed_source_set_cursor(mrcnn_feed_source *s, int64_t epoch, int64_t loader_step);
void mrcnn_feed_source_free(mrcnn_feed_source *s);

#ifdef __cplusplus
}
#endif
#endif
