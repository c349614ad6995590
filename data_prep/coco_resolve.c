/* After the parse: cross-references, validity checks and the bad-input report. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coco.h"
#include "mrcnn/check.h"
#include "mrcnn/ids.h"
#include "mrcnn/rle.h"

#define MESSAGES_PER_KIND 5
#define MAX_INSTANCES_TEXT_(n) #n
#define MAX_INSTANCES_TEXT(n) MAX_INSTANCES_TEXT_(n)

static const char *k_issue_names[ISSUE_COUNT] = {
    "missing or unreadable image", "truncated or corrupt image", "file_name escapes the image folder",
    "file_name with a NUL byte", "duplicate image id", "image without annotations (kept, flagged)",
    "annotation with unknown image", "annotation with unknown category", "box under 1 pixel wide or high",
    "polygon with fewer than 3 points", "missing or malformed segmentation", "non-finite or out-of-range number",
    "annotation of a skipped image", "duplicate annotation id",
    "image with more than " MAX_INSTANCES_TEXT(COCO_MAX_INSTANCES_PER_IMAGE) " annotations"};

const char *coco_issue_name(coco_issue k) { return k_issue_names[k]; }

void coco_report_issue(coco_report *r, coco_issue k, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->count[k]++;
    /* An image without annotations is normal data (COCO train2017 has ~1000), not bad
     * input: kept and flagged, and counted, also under --strict. */
    const int normal = k == ISSUE_IMAGE_NO_ANNOTATIONS;
    if (r->strict && k != ISSUE_ANN_OF_SKIPPED_IMAGE && !normal) {
        if (!r->defer_strict)
            mrcnn_failf("", "", __FILE__, __LINE__, "bad input (--strict makes it fatal): %s: %s", k_issue_names[k], msg);
        if (!r->strict_failed)
            snprintf(r->strict_msg, sizeof r->strict_msg, "bad input (--strict makes it fatal): %s: %s", k_issue_names[k],
                     msg);
        r->strict_failed = 1;
        return;
    }
    if (!r->print) return;
    if (r->count[k] <= MESSAGES_PER_KIND)
        fprintf(stderr, "mrcnn-prep coco: %s: %s: %s\n", normal ? "note" : "warning", k_issue_names[k], msg);
    if (r->count[k] == MESSAGES_PER_KIND + 1)
        fprintf(stderr, "mrcnn-prep coco: warning: further '%s' messages are only counted\n", k_issue_names[k]);
}

int coco_find_category(const coco_dataset *ds, int64_t id) {
    int lo = 0, hi = ds->cats.n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (ds->cats.ids[mid] == id) return mid;
        if (ds->cats.ids[mid] < id) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

static void sort_categories(prep_categories *c) {
    for (int i = 1; i < c->n; i++) /* insertion sort: COCO has 80, already in order */
        for (int j = i; j > 0 && c->ids[j - 1] > c->ids[j]; j--) {
            int64_t t = c->ids[j]; c->ids[j] = c->ids[j - 1]; c->ids[j - 1] = t;
            char *s = c->names[j]; c->names[j] = c->names[j - 1]; c->names[j - 1] = s;
            s = c->supers[j]; c->supers[j] = c->supers[j - 1]; c->supers[j - 1] = s;
        }
    for (int i = 1; i < c->n; i++)
        MRCNN_CHECK(c->ids[i] != c->ids[i - 1], "the categories list has id %lld twice", (long long)c->ids[i]);
}

/* Relative, no "..", no empty name: the file must resolve inside the image folder. */
static int path_is_safe(const char *name) {
    if (!name[0] || name[0] == '/') return 0;
    const char *p = name;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') return 0;
        if (!e) break;
        p = e + 1;
    }
    return 1;
}

int coco_image_path(const char *root, const char *image_dir, const char *name, char *out, size_t len) {
    char joined[PATH_MAX + 256], real[PATH_MAX];
    snprintf(out, len, "%s/%s", image_dir, name);
    if ((size_t)snprintf(joined, sizeof joined, "%s/%s", image_dir, name) >= sizeof joined) return 0;
    if (!realpath(joined, real)) return 0;
    snprintf(out, len, "%s", real);
    /* Inside: root itself is a folder, so the file must be below "root/". */
    size_t n = strlen(root);
    if (n == 1 && root[0] == '/') return real[0] == '/' && real[1] ? 1 : -1;
    return strncmp(real, root, n) == 0 && real[n] == '/' ? 1 : -1;
}

/* Image i: a first id, a name without NUL, a path that stays inside root (links followed)
 * to a readable regular file, whose size it records; otherwise reported and not ok. */
static void resolve_image(coco_dataset *ds, int64_t i, const char *root, const char *image_dir, coco_report *rep) {
    char path[PATH_MAX + 256];
    coco_image *im = &ds->images[i];
    const char *name = ds->names + im->name_off;
    if (coco_find_image(ds, im->id) != i) {
        coco_report_issue(rep, ISSUE_IMAGE_DUPLICATE, "image id %lld ('%s') appears again; the first is kept",
                          (long long)im->id, name);
        im->ok = 0;
        return;
    }
    if (im->bad_name) {
        coco_report_issue(rep, ISSUE_IMAGE_BAD_NAME, "image id %lld: file_name '%s\\u0000...' holds a NUL byte (\\u0000)",
                          (long long)im->id, name);
        im->ok = 0;
        return;
    }
    if (!path_is_safe(name)) {
        coco_report_issue(rep, ISSUE_IMAGE_PATH, "image id %lld: file_name '%s' is outside %s",
                          (long long)im->id, name, image_dir);
        im->ok = 0;
        return;
    }
    /* Symbolic links are followed: the file itself must lie inside the folder. */
    int where = coco_image_path(root, image_dir, name, path, sizeof path);
    if (where < 0) {
        coco_report_issue(rep, ISSUE_IMAGE_PATH, "image id %lld: file_name '%s' resolves to %s, outside %s",
                          (long long)im->id, name, path, root);
        im->ok = 0;
        return;
    }
    struct stat st;
    if (where == 0 || stat(path, &st) != 0 || !S_ISREG(st.st_mode) || access(path, R_OK) != 0) {
        coco_report_issue(rep, ISSUE_IMAGE_MISSING, "image id %lld: cannot read %s", (long long)im->id, path);
        im->ok = 0;
        return;
    }
    im->file_bytes = (int64_t)st.st_size;
}

/* Flags (num_anns, caller frees) of the annotations whose id an earlier one has.
 * Evaluation refuses a data set with two annotations of one id (mrcnn/ids.h), so the
 * converter keeps the first and skips the others (fatal under --strict). */
static uint8_t *duplicate_annotations(const coco_dataset *ds) {
    uint8_t *dup = MRCNN_CALLOC((size_t)(ds->num_anns > 0 ? ds->num_anns : 1), 1, "duplicate annotation flags");
    int64_t *ids = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(ds->num_anns > 0 ? ds->num_anns : 1), "annotation ids");
    for (int64_t i = 0; i < ds->num_anns; i++) ids[i] = ds->anns[i].id;
    mrcnn_ids_duplicates(ids, ds->num_anns, dup, NULL, NULL, NULL);
    free(ids);
    return dup;
}

/* The annotation's numbers and box: finite, a box at least MRCNN_MIN_BOX_SIDE wide and
 * high and not far outside its image. Reports the first fault; returns 1 when none. */
static int annotation_box_ok(const coco_ann *a, const coco_image *im, coco_report *rep) {
    const long long aid = (long long)a->id;
    if (a->bad_number) {
        const float *b = a->bbox;
        if (a->bad_number & BADNUM_BBOX)
            coco_report_issue(rep, ISSUE_ANN_BAD_NUMBER, "annotation id %lld: \"bbox\" [%g, %g, %g, %g] is not finite (in float32)",
                              aid, b[0], b[1], b[2], b[3]);
        else if (a->bad_number & BADNUM_AREA)
            coco_report_issue(rep, ISSUE_ANN_BAD_NUMBER, "annotation id %lld: \"area\" %g is not a finite number >= 0", aid,
                              a->area);
        else
            coco_report_issue(rep, ISSUE_ANN_BAD_NUMBER, "annotation id %lld: \"iscrowd\" is %lld, not 0 or 1", aid,
                              (long long)a->iscrowd_value);
        return 0;
    }
    /* One rule with inspect --check (MRCNN_MIN_BOX_SIDE): a box
     * under a pixel wide or high makes the box regression's log(w / w_anchor) target
     * blow up, and every step that samples it is skipped as non-finite. */
    if (!a->has_bbox || !(a->bbox[2] >= MRCNN_MIN_BOX_SIDE) || !(a->bbox[3] >= MRCNN_MIN_BOX_SIDE)) {
        if (a->has_bbox)
            coco_report_issue(rep, ISSUE_ANN_BAD_BOX, "annotation id %lld: bbox [%g, %g, %g, %g] is under %g pixel wide "
                              "or high", aid, a->bbox[0], a->bbox[1], a->bbox[2], a->bbox[3], MRCNN_MIN_BOX_SIDE);
        else
            coco_report_issue(rep, ISSUE_ANN_BAD_BOX, "annotation id %lld: no \"bbox\"", aid);
        return 0;
    }
    const double bd[4] = {a->bbox[0], a->bbox[1], a->bbox[2], a->bbox[3]};
    if (!mrcnn_bbox_in_range(bd, im->height, im->width)) {
        coco_report_issue(rep, ISSUE_ANN_BAD_NUMBER,
                          "annotation id %lld: \"bbox\" [%g, %g, %g, %g] reaches more than an image size (+%d) outside image %lld's %dx%d",
                          aid, bd[0], bd[1], bd[2], bd[3], MRCNN_COORD_SLACK, (long long)im->id, im->height, im->width);
        return 0;
    }
    return 1;
}

/* A polygon segmentation as RLE of its image's size, appended to ds->rles. */
static void polygons_to_stored_rle(coco_dataset *ds, coco_ann *a, const coco_image *im) {
    char *s = coco_polygons_to_rle(ds->polys + a->seg_off, im->height, im->width);
    size_t n = strlen(s);
    if (ds->rles_len + (int64_t)n + 1 > ds->rles_cap) {
        int64_t c = ds->rles_cap ? ds->rles_cap * 2 : 1024;
        while (c < ds->rles_len + (int64_t)n + 1) c *= 2;
        ds->rles = MRCNN_REALLOC(ds->rles, (size_t)c, "RLE strings");
        ds->rles_cap = c;
    }
    memcpy(ds->rles + ds->rles_len, s, n + 1);
    a->seg_off = ds->rles_len;
    ds->rles_len += (int64_t)n + 1;
    free(s);
    a->seg_kind = SEG_RLE;
    a->rle_h = im->height;
    a->rle_w = im->width;
}

/* The annotation's segmentation: polygons in range (made RLE), or an RLE of its image's
 * size that decodes; the area from it when the JSON gives none. Reports the first fault;
 * returns 1 when none. */
static int annotation_segmentation_ok(coco_dataset *ds, coco_ann *a, const coco_image *im, coco_report *rep) {
    const long long aid = (long long)a->id;
    if (a->seg_kind == SEG_BAD_POLY) {
        coco_report_issue(rep, ISSUE_ANN_BAD_POLYGON, "annotation id %lld: a polygon has fewer than 3 points (or an odd coordinate count)", aid);
        return 0;
    }
    if (a->seg_kind == SEG_NONE || a->seg_kind == SEG_BAD) {
        char why[160] = "neither polygons nor a valid RLE";
        if (a->seg_kind == SEG_NONE) snprintf(why, sizeof why, "missing");
        else if (a->seg_why == SEGWHY_RLE_SIZE)
            snprintf(why, sizeof why, "an RLE of size [%lld, %lld], outside [1, %d]", (long long)a->bad_rle_h,
                     (long long)a->bad_rle_w, MRCNN_MAX_IMAGE_SIDE);
        else if (a->seg_why == SEGWHY_RLE_SUM)
            snprintf(why, sizeof why, "an RLE whose counts add up to %lld, not %d x %d", (long long)a->bad_rle_sum,
                     a->rle_h, a->rle_w);
        else if (a->seg_why == SEGWHY_RLE_COUNTS)
            snprintf(why, sizeof why, "an RLE whose counts are not all integers in [0, 2^32)");
        else if (a->seg_why == SEGWHY_MIXED)
            snprintf(why, sizeof why, "a list that is not all polygons of numbers (polygons and an RLE mixed?)");
        coco_report_issue(rep, ISSUE_ANN_BAD_SEGMENTATION, "annotation id %lld: \"segmentation\" is %s", aid, why);
        return 0;
    }
    if (a->seg_kind == SEG_BAD_RANGE ||
        (a->seg_kind == SEG_POLY && !coco_polygons_in_range(ds->polys + a->seg_off, im->height, im->width))) {
        coco_report_issue(rep, ISSUE_ANN_BAD_NUMBER,
                          "annotation id %lld: a \"segmentation\" polygon coordinate is not finite or more than an image size (+%d) outside image %lld's %dx%d",
                          aid, MRCNN_COORD_SLACK, (long long)im->id, im->height, im->width);
        return 0;
    }
    if (a->seg_kind == SEG_POLY) polygons_to_stored_rle(ds, a, im);
    if (a->rle_h != im->height || a->rle_w != im->width) {
        coco_report_issue(rep, ISSUE_ANN_BAD_SEGMENTATION, "annotation id %lld: RLE size %dx%d differs from image %lld's %dx%d",
                          aid, a->rle_h, a->rle_w, (long long)im->id, im->height, im->width);
        return 0;
    }
    mrcnn_rle r;
    if (!mrcnn_rle_from_string(&r, ds->rles + a->seg_off, im->height, im->width)) {
        coco_report_issue(rep, ISSUE_ANN_BAD_SEGMENTATION, "annotation id %lld: the RLE counts are malformed or do not cover %dx%d",
                          aid, im->height, im->width);
        return 0;
    }
    if (!a->has_area) a->area = (double)mrcnn_rle_area(&r);
    mrcnn_rle_free(&r);
    return 1;
}

/* Annotation i: a first id, of a known image and category, with a sound box and
 * segmentation, of an image that is kept; then ok and counted to its image. */
static void resolve_annotation(coco_dataset *ds, int64_t i, const uint8_t *dup, coco_report *rep) {
    coco_ann *a = &ds->anns[i];
    const long long aid = (long long)a->id;
    a->ok = 0;
    if (dup[i]) {
        coco_report_issue(rep, ISSUE_ANN_DUPLICATE, "annotation id %lld (annotations[%lld]) appears again; the first is "
                          "kept (evaluation refuses duplicate ids)", aid, (long long)i);
        return;
    }
    a->image = coco_find_image(ds, a->image_id);
    if (a->image < 0) {
        coco_report_issue(rep, ISSUE_ANN_UNKNOWN_IMAGE, "annotation id %lld: image_id %lld is not in \"images\"", aid,
                          (long long)a->image_id);
        return;
    }
    coco_image *im = &ds->images[a->image];
    a->class_index = coco_find_category(ds, a->category_id);
    if (a->class_index < 0) {
        coco_report_issue(rep, ISSUE_ANN_UNKNOWN_CATEGORY, "annotation id %lld: category_id %lld is not in \"categories\"",
                          aid, (long long)a->category_id);
        return;
    }
    if (!annotation_box_ok(a, im, rep) || !annotation_segmentation_ok(ds, a, im, rep)) return;
    if (!im->ok) {
        coco_report_issue(rep, ISSUE_ANN_OF_SKIPPED_IMAGE, "annotation id %lld: its image %lld was skipped", aid,
                          (long long)im->id);
        return;
    }
    a->ok = 1;
    im->num_ann++;
}

/* Images with more than COCO_MAX_INSTANCES_PER_IMAGE valid annotations are skipped, with
 * their annotations. */
static void skip_crowded_images(coco_dataset *ds, coco_report *rep) {
    int skipped_crowded = 0;
    for (int64_t i = 0; i < ds->num_images; i++) {
        coco_image *im = &ds->images[i];
        if (im->ok && im->num_ann > COCO_MAX_INSTANCES_PER_IMAGE) {
            coco_report_issue(rep, ISSUE_IMAGE_TOO_MANY, "image id %lld ('%s') has %lld valid annotations, more than the %d "
                              "one image may bring to training (COCO_MAX_INSTANCES_PER_IMAGE); skipped with them",
                              (long long)im->id, ds->names + im->name_off, (long long)im->num_ann,
                              COCO_MAX_INSTANCES_PER_IMAGE);
            im->ok = 0;
            skipped_crowded = 1;
        }
    }
    for (int64_t i = 0; skipped_crowded && i < ds->num_anns; i++) {
        coco_ann *a = &ds->anns[i];
        if (!a->ok || ds->images[a->image].ok) continue;
        a->ok = 0;
        ds->images[a->image].num_ann--;
        coco_report_issue(rep, ISSUE_ANN_OF_SKIPPED_IMAGE, "annotation id %lld: its image %lld was skipped",
                          (long long)a->id, (long long)ds->images[a->image].id);
    }
}

void coco_resolve(coco_dataset *ds, const char *image_dir, coco_report *rep) {
    sort_categories(&ds->cats);
    char *root = realpath(image_dir, NULL);
    MRCNN_CHECK(root, "--images %s: %s", image_dir, strerror(errno));
    /* A file there would make every image "missing": a set of nothing, and exit 0. */
    struct stat rs;
    MRCNN_CHECK(stat(root, &rs) == 0 && S_ISDIR(rs.st_mode), "--images %s is not a directory (it names the folder that "
                "holds the images: the JSON's file_name values are relative to it)", image_dir);
    free(ds->image_root);
    ds->image_root = root;
    for (int64_t i = 0; i < ds->num_images; i++) resolve_image(ds, i, root, image_dir, rep);
    uint8_t *dup = duplicate_annotations(ds);
    for (int64_t i = 0; i < ds->num_anns; i++) resolve_annotation(ds, i, dup, rep);
    free(dup);
    free(ds->polys); /* every deferred polygon is RLE now */
    ds->polys = NULL;
    ds->polys_len = ds->polys_cap = 0;
    skip_crowded_images(ds, rep);
    for (int64_t i = 0; i < ds->num_images; i++) {
        coco_image *im = &ds->images[i];
        if (im->ok && im->num_ann == 0)
            coco_report_issue(rep, ISSUE_IMAGE_NO_ANNOTATIONS, "image id %lld ('%s') has no valid annotation; kept and flagged",
                              (long long)im->id, ds->names + im->name_off);
    }
}
