/* COCO run-length encoded masks with exactly pycocotools' semantics (maskApi):
 * runs over the column-major (Fortran) order of an h x w mask, starting with a
 * run of zeros. Our images are row-major (H, W); the to/from mask calls convert.
 * Implementation: src/core/rle.c. */
#ifndef MRCNN_RLE_H
#define MRCNN_RLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Image sides are at most 65535 pixels (JPEG's own limit): h * w then fits the 32-bit
 * run lengths of COCO RLE. Every reader and writer of image and mask sizes holds to it. */
#define MRCNN_MAX_IMAGE_SIDE 65535

/* The coordinates every input is held to (COCO JSON, results, shards): finite and at
 * most one image size plus MRCNN_COORD_SLACK pixels beyond each edge, x in
 * [-w - 64, 2w + 64] and y in [-h - 64, 2h + 64]; an unknown size (< 0) counts as
 * MRCNN_MAX_IMAGE_SIDE. Later arithmetic (areas, IoUs, the rasterizer's 5x integer
 * grid, float32 boxes) then neither overflows nor meets NaN, while boxes and polygons
 * that reach somewhat past the image (as real annotations and detections do) pass. */
#define MRCNN_COORD_SLACK 64
/* The smallest box side (pixels, in the image's own coordinates) a training set may
 * hold: a thinner box makes the box regression target log(w / w_anchor) blow up.
 * mrcnn-prep coco skips such an annotation (counted; fatal under --strict) and
 * `mrcnn-prep inspect --check` reports one. */
#define MRCNN_MIN_BOX_SIDE 1.0
int mrcnn_coord_in_range(double v, int64_t size);
/* [x, y, w, h]: x and x + w in range of the width, y and y + h of the height. */
int mrcnn_bbox_in_range(const double bbox[4], int64_t h, int64_t w);
/* n numbers x0 y0 x1 y1 ... (a polygon). */
int mrcnn_polygon_in_range(const double *xy, int64_t n, int64_t h, int64_t w);

typedef struct mrcnn_rle {
    int64_t h, w;
    int64_t m;      // number of runs
    uint32_t *cnts; // (m) run lengths, malloc'ed
} mrcnn_rle;

void mrcnn_rle_init(mrcnn_rle *r, int64_t h, int64_t w, int64_t m, const uint32_t *cnts);
void mrcnn_rle_free(mrcnn_rle *r);
/* mask (H, W) row-major, nonzero = inside. */
void mrcnn_rle_from_mask(mrcnn_rle *r, const uint8_t *mask, int64_t h, int64_t w);
void mrcnn_rle_to_mask(const mrcnn_rle *r, uint8_t *mask);
uint64_t mrcnn_rle_area(const mrcnn_rle *r);
/* [x, y, w, h] as pycocotools' toBbox. */
void mrcnn_rle_to_bbox(const mrcnn_rle *r, double bbox[4]);
void mrcnn_rle_from_bbox(mrcnn_rle *r, const double bbox[4], int64_t h, int64_t w);
/* One polygon of k points xy (2k) rasterized as pycocotools' frPoly. The points must
 * be in range (mrcnn_polygon_in_range) and h, w in [0, MRCNN_MAX_IMAGE_SIDE]: callers
 * check their input first; here it is a precondition (failure, never overflow). */
void mrcnn_rle_from_polygon(mrcnn_rle *r, const double *xy, int k, int64_t h, int64_t w);
/* Whether the runs add up to h * w (and h, w are in [0, MRCNN_MAX_IMAGE_SIDE]): every
 * RLE read from a file must, or walking two of them in step never ends. */
int mrcnn_rle_counts_valid(int64_t h, int64_t w, int64_t m, const uint32_t *cnts);
/* Union (intersect = 0) or intersection (1) of n masks of one size. */
void mrcnn_rle_merge(const mrcnn_rle *rs, int n, mrcnn_rle *out, int intersect);
/* iou (m, n) row-major: iou[d * n + g]; a crowd gt uses intersection / area(dt). */
void mrcnn_rle_iou(const mrcnn_rle *dt, int m, const mrcnn_rle *gt, int n, const uint8_t *iscrowd,
                   double *iou);
/* Boxes [x, y, w, h]; the same layout and crowd rule. */
void mrcnn_bbox_iou(const double *dt, int m, const double *gt, int n, const uint8_t *iscrowd,
                    double *iou);
/* COCO's compressed string form (LEB128-like, as rleToString); malloc'ed. */
char *mrcnn_rle_to_string(const mrcnn_rle *r);
/* Parses the compressed form; returns 0 (and leaves r empty) if malformed or if the
 * runs do not add up to h * w. */
int mrcnn_rle_from_string(mrcnn_rle *r, const char *s, int64_t h, int64_t w);

#ifdef __cplusplus
}
#endif
#endif
