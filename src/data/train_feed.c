/* Loader -> trainer: drops crowd annotations (detectron2 trains without them), shifts
 * the 0-based contiguous classes to the model's 1-based labels and points at each kept
 * instance's mask in the loader's canvas (the model's staging copies its crop). */
#include "mrcnn/train_feed.h"

#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/data.h"
#include "mrcnn/log.h"

struct mrcnn_train_feed {
    mrcnn_loader *loader;
    mrcnn_train_feed_batch out;
    mrcnn_train_feed_image *img;
    int *hw;
    float *boxes;
    int32_t *labels;
    const uint8_t **masks; // (cap_inst) first rows in the loader's batch
    size_t cap_inst;
    int cap_img;
};

mrcnn_train_feed *mrcnn_train_feed_create(const mrcnn_config *cfg, MPI_Comm comm, int per_rank, int64_t epoch, int64_t step) {
    MRCNN_CHECK(cfg->datasets_train[0], "DATASETS.TRAIN is empty: set it to the shard index (NAME-index.h5) "
                                         "written by mrcnn-prep coco");
    mrcnn_train_feed *f = MRCNN_CALLOC(1, sizeof *f, "train feed");
    mrcnn_loader_opts o;
    mrcnn_loader_opts_from_config(&o, cfg, 1);
    o.index_path = cfg->datasets_train;
    o.comm = comm;
    o.batch_size = per_rank;
    o.masks = 1;
    o.start_epoch = epoch;
    o.start_step = step;
    f->loader = mrcnn_loader_create(&o);
    return f;
}

const mrcnn_train_feed_batch *mrcnn_train_feed_next(mrcnn_train_feed *f, double *wait_s) {
    double t0 = mrcnn_time_now();
    const mrcnn_data_batch *b = mrcnn_loader_next(f->loader);
    *wait_s = mrcnn_time_now() - t0;
    if (b->n > f->cap_img) {
        f->cap_img = b->n;
        f->img = MRCNN_REALLOC(f->img, sizeof *f->img * b->n, "feed images");
        f->hw = MRCNN_REALLOC(f->hw, sizeof(int) * 2 * b->n, "feed image sizes");
    }
    size_t ni = (size_t)(b->num_instances > 0 ? b->num_instances : 1);
    if (ni > f->cap_inst) {
        f->cap_inst = ni;
        f->boxes = MRCNN_REALLOC(f->boxes, sizeof(float) * 4 * ni, "feed boxes");
        f->labels = MRCNN_REALLOC(f->labels, sizeof(int32_t) * ni, "feed labels");
        f->masks = MRCNN_REALLOC(f->masks, sizeof *f->masks * ni, "feed mask rows");
    }
    size_t k = 0;
    for (int i = 0; i < b->n; i++) {
        int h = b->image_h[i], w = b->image_w[i];
        f->hw[2 * i] = h;
        f->hw[2 * i + 1] = w;
        mrcnn_train_feed_image *im = &f->img[i];
        im->h = h;
        im->w = w;
        im->boxes = f->boxes + 4 * k;
        im->labels = f->labels + k;
        im->n = 0;
        for (int64_t a = b->inst_start[i]; a < b->inst_start[i + 1]; a++) {
            if (b->iscrowd[a]) continue;
            memcpy(f->boxes + 4 * k, b->boxes + 4 * a, 4 * sizeof(float));
            f->labels[k] = b->classes[a] + 1;
            if (b->masks) f->masks[k] = b->masks + (size_t)a * b->height * b->width;
            k++;
            im->n++;
        }
    }
    f->out = (mrcnn_train_feed_batch){.n = b->n, .height = b->height, .width = b->width, .images = b->images,
                                .image_hw = f->hw, .image_index = b->image_index, .epoch = b->epoch, .img = f->img,
                                .mask_rows = b->masks ? f->masks : NULL, .mask_stride = b->width};
    return &f->out;
}

void mrcnn_train_feed_cursor(const mrcnn_train_feed *f, int64_t *epoch, int64_t *step) { mrcnn_loader_cursor(f->loader, epoch, step); }

void mrcnn_train_feed_destroy(mrcnn_train_feed *f) {
    if (!f) return;
    mrcnn_loader_destroy(f->loader);
    free(f->img);
    free(f->hw);
    free(f->boxes);
    free(f->labels);
    free(f->masks);
    free(f);
}
