/* The COCO converter's compact in-memory dataset: what the streaming parse keeps of
 * a COCO instances JSON (never its text), and the bad-input report. */
#ifndef MRCNN_PREP_COCO_H
#define MRCNN_PREP_COCO_H

#include <stddef.h>
#include <stdint.h>

#include "prep.h"

/* Every kind of bad input the converter recognizes; each has a count and a message. */
typedef enum {
    ISSUE_IMAGE_MISSING,        // missing or unreadable image file
    ISSUE_IMAGE_CORRUPT,        // truncated or corrupt JPEG/PNG, or size differs from the JSON
    ISSUE_IMAGE_PATH,           // file_name escapes the image folder (rejected), also through a symbolic link
    ISSUE_IMAGE_BAD_NAME,       // file_name with a NUL byte (it would be cut there)
    ISSUE_IMAGE_DUPLICATE,      // a second image with an id already seen
    ISSUE_IMAGE_NO_ANNOTATIONS, // kept, flagged
    ISSUE_ANN_UNKNOWN_IMAGE,
    ISSUE_ANN_UNKNOWN_CATEGORY,
    ISSUE_ANN_BAD_BOX,          // width or height under MRCNN_MIN_BOX_SIDE (1 pixel), or missing
    ISSUE_ANN_BAD_POLYGON,      // a polygon with fewer than 3 points (or an odd coordinate count)
    ISSUE_ANN_BAD_SEGMENTATION, // missing/empty segmentation, malformed RLE, RLE size != image size
    ISSUE_ANN_BAD_NUMBER,       // a bbox, area, iscrowd or polygon number not finite or out of range
    ISSUE_ANN_OF_SKIPPED_IMAGE, // dropped with its image (a consequence, not a cause)
    ISSUE_ANN_DUPLICATE,        // a second annotation with an id already seen (mrcnn/ids.h): evaluation refuses it
    ISSUE_IMAGE_TOO_MANY,       // more valid annotations than COCO_MAX_INSTANCES_PER_IMAGE: skipped with them
    ISSUE_COUNT
} coco_issue;

/* The most annotations one image may bring to training: each is a full-image mask in a
 * training batch and a column of every anchor-to-ground-truth IoU matrix, so 200,000 on
 * one image took more than 24 GB. COCO's most crowded image has under 100, LVIS's under
 * 800. A converted image with more is skipped with its annotations (fatal under --strict). */
#define COCO_MAX_INSTANCES_PER_IMAGE 1000

typedef struct {
    int64_t count[ISSUE_COUNT];
    int strict;
    int print; // print messages (rank 0 for parse-time issues; every rank for its own files)
    /* 1: a --strict violation is recorded (the first one's message) instead of failing at
     * once, so that every rank stops writing before the failing one removes the staging
     * folder; the caller fails with strict_msg after agreeing across ranks. */
    int defer_strict;
    int strict_failed;
    char strict_msg[1200];
} coco_report;

const char *coco_issue_name(coco_issue k);
/* Counts one issue and prints its message (the first few of each kind); with --strict
 * it is fatal, except for an image without annotations (normal data: COCO train2017
 * has about a thousand) and the annotations dropped with a skipped image. */
void coco_report_issue(coco_report *r, coco_issue k, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* SEG_BAD_RANGE: polygons with a coordinate that is not finite or far outside the image
 * (mrcnn_polygon_in_range): counted as ISSUE_ANN_BAD_NUMBER. */
enum { SEG_NONE = 0, SEG_RLE, SEG_POLY, SEG_BAD_POLY, SEG_BAD, SEG_BAD_RANGE };
/* Why a segmentation is SEG_BAD, for the message. */
enum { SEGWHY_FORM = 0, SEGWHY_RLE_SIZE, SEGWHY_RLE_SUM, SEGWHY_RLE_COUNTS, SEGWHY_MIXED };
/* coco_ann.bad_number: the fields whose number is not finite or out of range. */
enum { BADNUM_BBOX = 1, BADNUM_AREA = 2, BADNUM_ISCROWD = 4 };

typedef struct {
    int64_t id;
    int32_t height, width;
    int64_t name_off;   // into names
    int64_t file_bytes; // from stat
    int ok;             // 0: skipped
    int bad_name;       // file_name holds a NUL byte
    int64_t num_ann;    // valid annotations
} coco_image;

typedef struct {
    int64_t id, image_id, category_id;
    float bbox[4];
    double area;
    uint8_t has_bbox, has_area, iscrowd, seg_kind;
    uint8_t bad_number;   // BADNUM_* bits
    uint8_t seg_why;      // SEGWHY_* when seg_kind is SEG_BAD
    int32_t rle_h, rle_w; // the RLE's own size (SEG_RLE)
    int64_t bad_rle_h, bad_rle_w, bad_rle_sum; // what was wrong (SEGWHY_RLE_SIZE / _SUM)
    int64_t iscrowd_value; // as given
    int64_t seg_off;      // SEG_RLE: into rles (NUL-terminated); SEG_POLY: into polys
    int64_t image;        // index into images once resolved, -1 if unknown
    int32_t class_index;
    int ok;
} coco_ann;

typedef struct {
    coco_image *images;
    int64_t num_images, cap_images;
    coco_ann *anns;
    int64_t num_anns, cap_anns;
    char *names; // image file names, NUL-terminated, concatenated
    int64_t names_len, names_cap;
    char *rles;  // compressed RLE strings, NUL-terminated, concatenated
    int64_t rles_len, rles_cap;
    double *polys; // deferred polygons: [npoly, k1, 2*k1 coords, k2, ...]
    int64_t polys_len, polys_cap;
    prep_categories cats; // sorted by id after coco_finish
    /* image id -> index (open addressing) */
    int64_t *map_keys, *map_vals;
    int64_t map_cap;
    char *image_root; // realpath of the image folder (coco_resolve)
} coco_dataset;

/* Streams the JSON into ds; malformed JSON is fatal with line and byte offset.
 * progress: called now and then with the byte offset reached (may be NULL). */
void coco_parse(coco_dataset *ds, const char *path, coco_report *rep, void (*progress)(int64_t offset, void *ctx),
                void *ctx);
/* Resolves references after the whole file was read: sorts categories, drops duplicate
 * images, checks annotations (unknown image/category, boxes, segmentations), converts
 * deferred polygons, and checks that every image's file exists inside image_dir. */
void coco_resolve(coco_dataset *ds, const char *image_dir, coco_report *rep);
void coco_free(coco_dataset *ds);
/* image_dir/name resolved (symbolic links followed) into out; 1 when it is a file
 * inside root (the image folder's realpath), 0 when it cannot be resolved (missing),
 * -1 when it resolves outside root. */
int coco_image_path(const char *root, const char *image_dir, const char *name, char *out, size_t len);
int64_t coco_find_image(const coco_dataset *ds, int64_t id);
int coco_find_category(const coco_dataset *ds, int64_t id);
/* Whether every coordinate of an annotation's polygons is finite and within reach of
 * an h x w image (mrcnn_polygon_in_range). */
int coco_polygons_in_range(const double *p, int64_t h, int64_t w);
/* pycocotools semantics: the polygons of one annotation rasterized and merged, as a
 * compressed RLE string (malloc'ed); they must be in range. */
char *coco_polygons_to_rle(const double *p, int64_t h, int64_t w);

#endif
