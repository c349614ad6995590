/* The loader side of `mrcnn train`: loader batches (mrcnn_data_batch) turned into
 * what the model trains on (crowd dropped, 1-based labels, each mask viewed in place in
 * the loader's padded canvas: no copy here, the model's staging crops it). */
#ifndef MRCNN_TRAIN_FEED_H
#define MRCNN_TRAIN_FEED_H

#include <mpi.h>
#include <stdint.h>

#include "mrcnn/config.h"

typedef struct mrcnn_train_feed mrcnn_train_feed;

typedef struct mrcnn_train_feed_image {
    int h, w;              // resized size inside the canvas
    int n;                 // instances (crowd annotations dropped)
    const float *boxes;    // (n, 4) x1, y1, x2, y2 canvas pixels
    const int32_t *labels; // (n) 1..num_classes (0 is background)
} mrcnn_train_feed_image;

typedef struct mrcnn_train_feed_batch {
    int n, height, width;      // images, padded canvas
    const float *images;       // (n, height, width, 3) normalized
    const int *image_hw;       // (n, 2)
    const int64_t *image_index; // (n) global indices
    int64_t epoch;
    const mrcnn_train_feed_image *img; // (n)
    const uint8_t *const *mask_rows;   // (sum of img[i].n) image by image, each kept mask's first row in
                                       // the loader's canvas; NULL without masks
    int mask_stride;                   // bytes from one mask row to the next (the canvas width)
} mrcnn_train_feed_batch;

/* Collective over comm: opens DATASETS.TRAIN with per_rank images per step from the
 * cursor (epoch, step). */
mrcnn_train_feed *mrcnn_train_feed_create(const mrcnn_config *cfg, MPI_Comm comm, int per_rank, int64_t epoch, int64_t step);
/* Blocks for the next batch; *wait_s gets the seconds it waited. The batch (and the
 * loader's buffers its masks point into) is valid until the next call. */
const mrcnn_train_feed_batch *mrcnn_train_feed_next(mrcnn_train_feed *f, double *wait_s);
void mrcnn_train_feed_cursor(const mrcnn_train_feed *f, int64_t *epoch, int64_t *step);
void mrcnn_train_feed_destroy(mrcnn_train_feed *f);

#endif
