/* Inference for `mrcnn eval` (over shards) and `mrcnn predict` (over image files):
 * a trained model on one image at a time, outputs in the original image's pixels
 * with masks pasted and RLE-encoded, as torchvision's GeneralizedRCNNTransform.
 * postprocess + paste_masks_in_image (> 0.5) and detectron2's COCO results do.
 *
 * One image per forward on purpose: a batch pads its images to a common canvas,
 * which changes the features near the borders, so results would depend on which
 * images share a batch (and therefore on the number of ranks). Activations are kept
 * in fp32 whatever SOLVER.PRECISION says (training's setting; detectron2 evaluates in
 * fp32 too).
 *
 * This header includes neither model.h nor data.h: src/eval/infer.c is the model
 * side, src/eval/infer_input.c the data side.
 * Implementation: src/eval/infer.c, src/eval/infer_input.c, src/eval/coco_shards.c. */
#ifndef MRCNN_INFER_H
#define MRCNN_INFER_H

#include <mpi.h>
#include <stdint.h>

#include "mrcnn/arena.h"
#include "mrcnn/backend.h"
#include "mrcnn/cocoeval.h"
#include "mrcnn/config.h"
#include "mrcnn/rle.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- one prepared image ---- */
typedef struct mrcnn_infer_input {
    float *canvas;          // (canvas_h, canvas_w, 3) normalized, zero padding
    int canvas_h, canvas_w; // padded to INPUT.SIZE_DIVISIBILITY (or INPUT.FIXED_SIZE)
    int h, w;               // resized size inside the canvas (INPUT.MIN/MAX_SIZE_TEST)
    int orig_h, orig_w;     // size of the image as stored
    int64_t image_id;       // COCO id (shards) or the 1-based position on the command line
    int64_t image_index;    // global index in the shard set (shards), else the position
} mrcnn_infer_input;

/* The detections of one image, in its original pixels. */
typedef struct mrcnn_instances {
    int n;
    float *boxes;      // (n, 4) x1, y1, x2, y2
    float *scores;     // (n) descending
    int32_t *classes;  // (n) contiguous class index, 0-based (model label - 1)
    mrcnn_rle *masks;  // (n) pasted at (orig_h, orig_w), thresholded at 0.5
    int h, w;          // orig_h, orig_w
} mrcnn_instances;
void mrcnn_instances_free(mrcnn_instances *inst);

/* ---- the model side (src/eval/infer.c) ---- */
typedef struct mrcnn_infer mrcnn_infer; // opaque: backend + model + workspace

/* Builds the model cfg describes on the CPU, or on GPU `device` when MODEL.DEVICE is
 * cuda and device >= 0 (falls back to the CPU with a warning when the GPU backend is
 * unavailable), and loads weights (an HDF5 model or training checkpoint). */
mrcnn_infer *mrcnn_infer_create(const mrcnn_config *cfg, const char *weights, int device);
/* As mrcnn_infer_create, with the weights copied from params (the fp32 master weights
 * of a model built from the same cfg, on backend src_be: training's own) instead of a
 * file: what `mrcnn train` evaluates with (TEST.EVAL_PERIOD). */
mrcnn_infer *mrcnn_infer_create_from_params(const mrcnn_config *cfg, int device, const mrcnn_backend *src_be,
                                            const mrcnn_arena *params);
/* Copies params (as above) over the current weights. */
void mrcnn_infer_set_weights(mrcnn_infer *inf, const mrcnn_backend *src_be, const mrcnn_arena *params);
void mrcnn_infer_destroy(mrcnn_infer *inf);
const char *mrcnn_infer_backend_name(const mrcnn_infer *inf);
/* Detects, rescales the boxes to (orig_h, orig_w), pastes and encodes the masks. */
void mrcnn_infer_run(mrcnn_infer *inf, const mrcnn_infer_input *in, mrcnn_instances *out);

/* ---- the data side (src/eval/infer_input.c) ---- */
/* Decodes a JPEG or PNG file and prepares it with the test transform. Returns 1, or 0
 * with the reason in err (missing file, not an image, corrupt data). rgb (orig_h,
 * orig_w, 3) gets the decoded pixels (malloc'ed; free it and in->canvas). */
int mrcnn_infer_load_file(const mrcnn_config *cfg, const char *path, mrcnn_infer_input *in, uint8_t **rgb,
                          char *err, size_t err_len);

/* The images of a shard set spread over the ranks of comm, each image exactly once
 * (dataset order; the loader's evaluation mode). Collective create/destroy. */
typedef struct mrcnn_infer_shards mrcnn_infer_shards;
mrcnn_infer_shards *mrcnn_infer_shards_create(const mrcnn_config *cfg, const char *index_path, MPI_Comm comm);
/* Steps: equal on every rank; some steps of some ranks have no image. */
int64_t mrcnn_infer_shards_steps(const mrcnn_infer_shards *s);
int64_t mrcnn_infer_shards_num_images(const mrcnn_infer_shards *s);
/* Fills in (canvas valid until the next call) and returns 1, or returns 0 when this
 * rank has no image in this step (the padding of the last step). */
int mrcnn_infer_shards_next(mrcnn_infer_shards *s, mrcnn_infer_input *in);
void mrcnn_infer_shards_destroy(mrcnn_infer_shards *s);
/* MPI thread level the shard reader needs. */
int mrcnn_infer_thread_level(void);

/* The dataset's category table (contiguous class -> id, name) from a shard index. */
typedef struct mrcnn_category_table {
    int n;
    int64_t *ids;  // (n) ascending
    char **names;  // (n)
} mrcnn_category_table;
void mrcnn_category_table_load(mrcnn_category_table *t, const char *index_path);
void mrcnn_category_table_free(mrcnn_category_table *t);

/* ---- ground truth from shards (src/eval/coco_shards.c) ---- */
/* The same ground truth that `mrcnn-prep export` writes as JSON (boxes rounded as
 * its %.9g does), built in memory: images, categories, annotations with RLE masks. */
void mrcnn_coco_gt_from_shards(mrcnn_coco_gt *gt, const char *index_path);

/* Appends inst as COCO results: category ids from table (class c -> table->ids[c]), or
 * c + 1 when table is NULL; bbox [x, y, w, h]; masks when with_masks. */
void mrcnn_instances_to_dets(const mrcnn_instances *inst, int64_t image_id, const mrcnn_category_table *table,
                             int with_masks, mrcnn_coco_dets *dets);

#ifdef __cplusplus
}
#endif
#endif
