/* COCO box and mask evaluation with exactly pycocotools' COCOeval semantics (area
 * ranges, maxDets 1/10/100, crowd and ignore flags, greedy matching in score order,
 * 101-point interpolated precision, per-category accumulation, the 12 stats).
 * Ground truth and results come from COCO JSON (streamed) or, for results, from an
 * array built in memory by inference. Ids are int64 everywhere.
 * Implementation: src/eval/coco_load.c (JSON in/out), src/eval/cocoeval.c (evaluate,
 * accumulate), src/eval/coco_summary.c (stats, printing). */
#ifndef MRCNN_COCOEVAL_H
#define MRCNN_COCOEVAL_H

#include <stdint.h>
#include <stdio.h>

#include "mrcnn/rle.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MRCNN_IOU_BBOX = 0, MRCNN_IOU_SEGM = 1 } mrcnn_iou_type;

/* A segmentation as COCO JSON spells it. */
typedef enum {
    MRCNN_SEGM_NONE = 0,
    MRCNN_SEGM_POLYGONS, // [[x0, y0, x1, y1, ...], ...] in image pixels
    MRCNN_SEGM_COUNTS,   // {"size": [h, w], "counts": [runs...]} (uncompressed RLE)
    MRCNN_SEGM_STRING    // {"size": [h, w], "counts": "..."} (compressed RLE)
} mrcnn_segm_kind;

typedef struct mrcnn_coco_segm {
    mrcnn_segm_kind kind;
    int64_t h, w;     // RLE size (COUNTS, STRING)
    int n_poly;       // POLYGONS
    int *poly_len;    // (n_poly) numbers in each polygon
    double *poly;     // (sum of poly_len) x0 y0 x1 y1 ... of all polygons
    int64_t m;        // COUNTS: number of runs
    uint32_t *counts; // (m) COUNTS
    char *str;        // STRING: compressed counts, NUL-terminated
} mrcnn_coco_segm;

/* One ground-truth annotation or one detection. */
typedef struct mrcnn_coco_ann {
    int64_t id; // gt: the annotation id; detections: set to 1..N in order, as loadRes does
    int64_t image_id, category_id;
    double bbox[4]; // [x, y, w, h]
    int has_bbox;
    double area; // gt: the 'area' field
    int iscrowd;
    double score; // detections
    mrcnn_coco_segm segm;
} mrcnn_coco_ann;

typedef struct mrcnn_coco_image {
    int64_t id, height, width;
} mrcnn_coco_image;

typedef struct mrcnn_coco_category {
    int64_t id;
    char *name;
} mrcnn_coco_category;

typedef struct mrcnn_coco_gt {
    mrcnn_coco_image *images;  // (n_images) in file order
    int64_t n_images;
    mrcnn_coco_category *cats; // (n_cats) in file order; ids may have gaps
    int64_t n_cats;
    mrcnn_coco_ann *anns;      // (n_anns)
    int64_t n_anns;
    int64_t *image_by_id;      // (n_images) indices into images sorted by id, for lookups
    int64_t *cat_by_id;        // (n_cats) likewise into cats
} mrcnn_coco_gt;

typedef struct mrcnn_coco_dets {
    mrcnn_coco_ann *anns; // (n) in results order
    int64_t n, cap;
} mrcnn_coco_dets;

/* Loads instances JSON; a malformed or inconsistent file fails (check family) with
 * the path, line and byte, and what is wrong. */
void mrcnn_coco_gt_load(mrcnn_coco_gt *gt, const char *path);
void mrcnn_coco_gt_free(mrcnn_coco_gt *gt);
/* Builds the id lookups of a ground truth filled in memory (images, cats, anns set;
 * strings and segmentations malloc'ed, freed by mrcnn_coco_gt_free). Fails on
 * duplicate ids, naming `what`. */
void mrcnn_coco_gt_index(mrcnn_coco_gt *gt, const char *what);
/* Index of an image / category id in gt->images / gt->cats, or -1. */
int64_t mrcnn_coco_gt_find_image(const mrcnn_coco_gt *gt, int64_t id);
int64_t mrcnn_coco_gt_find_category(const mrcnn_coco_gt *gt, int64_t id);

void mrcnn_coco_dets_init(mrcnn_coco_dets *d);
/* Appends a detection; the array takes ownership of a->segm's buffers. */
void mrcnn_coco_dets_add(mrcnn_coco_dets *d, const mrcnn_coco_ann *a);
/* Adds a detection with a box and, when mask is not NULL, its mask as compressed RLE. */
void mrcnn_coco_dets_add_rle(mrcnn_coco_dets *d, int64_t image_id, int64_t category_id, double score,
                             const double bbox[4], const mrcnn_rle *mask);
void mrcnn_coco_dets_free(mrcnn_coco_dets *d);
/* Loads a results JSON array. With gt, image and category ids unknown to it fail
 * right away, naming the id, the result's index and its line and byte. */
void mrcnn_coco_dets_load(mrcnn_coco_dets *d, const char *path, const mrcnn_coco_gt *gt);
/* Writes a results JSON array (bbox; segm as compressed RLE strings). */
void mrcnn_coco_dets_write(const mrcnn_coco_dets *d, const char *path);
/* Fails when a detection names an image or category the ground truth lacks, or
 * lacks what loadRes needs (a box in every result when the first has one, else RLE masks). */
void mrcnn_coco_dets_check(const mrcnn_coco_dets *d, const mrcnn_coco_gt *gt);

#define MRCNN_COCO_T 10  // IoU thresholds .50:.05:.95
#define MRCNN_COCO_R 101 // recall points 0:.01:1
#define MRCNN_COCO_A 4   // all, small, medium, large
#define MRCNN_COCO_M 3   // maxDets 1, 10, 100

typedef struct mrcnn_coco_eval {
    mrcnn_iou_type iou_type;
    int64_t K;              // categories evaluated (all gt categories, sorted by id)
    int64_t *cat_ids;       // (K)
    double iou_thrs[MRCNN_COCO_T];
    double rec_thrs[MRCNN_COCO_R];
    double *precision;      // (T, R, K, A, M); -1 where a setting has no gt
    double *recall;         // (T, K, A, M)
    double stats[12];       // pycocotools' order: AP AP50 AP75 APs APm APl AR1 AR10 AR100 ARs ARm ARl
    double seconds;         // wall time of evaluate + accumulate
} mrcnn_coco_eval;

/* evaluate() + accumulate() + the stats of summarize(). threads <= 0: OpenMP's default. */
void mrcnn_coco_evaluate(const mrcnn_coco_gt *gt, const mrcnn_coco_dets *dets, mrcnn_iou_type type,
                         int threads, mrcnn_coco_eval *out);
void mrcnn_coco_eval_free(mrcnn_coco_eval *e);
/* Fills e->stats from precision and recall (evaluate calls it). */
void mrcnn_coco_eval_compute_stats(mrcnn_coco_eval *e);
/* The 12 lines of COCOeval.summarize(). */
void mrcnn_coco_eval_print(const mrcnn_coco_eval *e, FILE *out);
/* Mean precision of category k over IoU thresholds (iou < 0) or at one threshold,
 * area all, maxDets 100; NaN when the category has no gt. */
double mrcnn_coco_eval_category_ap(const mrcnn_coco_eval *e, int64_t k, double iou);
/* A table: category id, name, AP, AP50, AP75. */
void mrcnn_coco_eval_print_per_category(const mrcnn_coco_eval *e, const mrcnn_coco_gt *gt, FILE *out);
/* {"stats": [12], "AP": ..., ..., "per_category": [{"id", "name", "AP", "AP50", "AP75"}]} */
void mrcnn_coco_eval_write_json(const mrcnn_coco_eval *e, const mrcnn_coco_gt *gt, FILE *out);

/* Evaluation pictures drawn by gnuplot (src/eval/eval_plots.c on mrcnn/plot.h). */
/* dir/eval_<iou>_pr.png: precision against recall at IoU .50, .75 and .50:.95, and at
 * .50:.95 per object area, as pycocotools' analyze figures; dir/eval_<iou>_categories.png:
 * AP (.50:.95) per category, sorted. iou: "bbox" or "segm". */
void mrcnn_plot_eval(const mrcnn_coco_eval *e, const mrcnn_coco_gt *gt, const char *iou, const char *dir);


#ifdef __cplusplus
}
#endif
#endif
