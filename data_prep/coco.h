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
    ISSUE_IMAGE_PATH,           // file_name escapes the image folder (rejected)
    ISSUE_IMAGE_DUPLICATE,      // a second image with an id already seen
    ISSUE_IMAGE_NO_ANNOTATIONS, // kept, flagged
    ISSUE_ANN_UNKNOWN_IMAGE,
    ISSUE_ANN_UNKNOWN_CATEGORY,
    ISSUE_ANN_BAD_BOX,          // zero or negative width/height, or missing
    ISSUE_ANN_BAD_POLYGON,      // a polygon with fewer than 3 points (or an odd coordinate count)
    ISSUE_ANN_BAD_SEGMENTATION, // missing/empty segmentation, malformed RLE, RLE size != image size
    ISSUE_ANN_OF_SKIPPED_IMAGE, // dropped with its image (a consequence, not a cause)
    ISSUE_COUNT
} coco_issue;

typedef struct {
    int64_t count[ISSUE_COUNT];
    int strict;
    int print; // print messages (rank 0 for parse-time issues; every rank for its own files)
} coco_report;

const char *coco_issue_name(coco_issue k);
/* Counts one issue and prints its message (the first few of each kind); with --strict
 * it is fatal. */
void coco_report_issue(coco_report *r, coco_issue k, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

enum { SEG_NONE = 0, SEG_RLE, SEG_POLY, SEG_BAD_POLY, SEG_BAD };

typedef struct {
    int64_t id;
    int32_t height, width;
    int64_t name_off;   // into names
    int64_t file_bytes; // from stat
    int ok;             // 0: skipped
    int64_t num_ann;    // valid annotations
} coco_image;

typedef struct {
    int64_t id, image_id, category_id;
    float bbox[4];
    double area;
    uint8_t has_bbox, has_area, iscrowd, seg_kind;
    int32_t rle_h, rle_w; // the RLE's own size (SEG_RLE)
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
int64_t coco_find_image(const coco_dataset *ds, int64_t id);
int coco_find_category(const coco_dataset *ds, int64_t id);
/* pycocotools semantics: the polygons of one annotation rasterized and merged, as a
 * compressed RLE string (malloc'ed). */
char *coco_polygons_to_rle(const double *p, int64_t h, int64_t w);

#endif
