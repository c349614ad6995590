/* The loader's feed as the Mask R-CNN trainable's batch source (feed_source.h). */
#include "mrcnn/feed_source.h"
#include "mrcnn/check.h"

#include <stdlib.h>
#include <string.h>

void mrcnn_feed_source_init(mrcnn_feed_source *s, const mrcnn_config *cfg, mrcnn_dist *dist, mrcnn_device device,
                            int per_rank) {
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->dist = dist;
    s->device = device;
    s->per_rank = per_rank;
}

double mrcnn_feed_source_next(mrcnn_feed_source *s, mrcnn_batch *out) {
    if (!s->feed) s->feed = mrcnn_train_feed_create(s->cfg, s->dist->comm, s->per_rank, s->epoch0, s->step0);
    double wait_s = 0;
    const mrcnn_train_feed_batch *fb = mrcnn_train_feed_next(s->feed, &wait_s);
    if (fb->n > s->gt_cap) {
        s->gt_cap = fb->n;
        s->gt = MRCNN_REALLOC(s->gt, sizeof *s->gt * fb->n, "ground truth per image");
    }
    for (int i = 0; i < fb->n; i++)
        s->gt[i] = (mrcnn_image_gt){.n = fb->img[i].n, .boxes = fb->img[i].boxes, .labels = fb->img[i].labels};
    *out = (mrcnn_batch){.images = mrcnn_tensor_view(NULL, MRCNN_DTYPE_F32, s->device, 4,
                                                     (int64_t[]){fb->n, fb->height, fb->width, 3}),
                         .host_images = fb->images,
                         .image_hw = fb->image_hw,
                         .gt = s->gt,
                         .mask_rows = fb->mask_rows,
                         .mask_stride = fb->mask_stride,
                         .image_index = fb->image_index,
                         .epoch = (uint32_t)fb->epoch};
    return wait_s;
}

void mrcnn_feed_source_cursor(const mrcnn_feed_source *s, int64_t *epoch, int64_t *loader_step) {
    if (s->feed) mrcnn_train_feed_cursor(s->feed, epoch, loader_step);
    else {
        *epoch = s->epoch0;
        *loader_step = s->step0;
    }
}

void mrcnn_feed_source_set_cursor(mrcnn_feed_source *s, int64_t epoch, int64_t loader_step) {
    MRCNN_CHECK(s->feed == NULL, "the loader cursor can only be set before the first batch");
    s->epoch0 = epoch;
    s->step0 = loader_step;
}

void mrcnn_feed_source_free(mrcnn_feed_source *s) {
    mrcnn_train_feed_destroy(s->feed);
    free(s->gt);
    memset(s, 0, sizeof *s);
}
