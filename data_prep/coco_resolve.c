/* After the parse: cross-references, validity checks and the bad-input report. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coco.h"
#include "mrcnn/check.h"
#include "mrcnn/rle.h"

#define MESSAGES_PER_KIND 5

static const char *k_issue_names[ISSUE_COUNT] = {
    "missing or unreadable image", "truncated or corrupt image", "file_name escapes the image folder",
    "duplicate image id", "image without annotations (kept, flagged)", "annotation with unknown image",
    "annotation with unknown category", "zero or negative box", "polygon with fewer than 3 points",
    "missing or malformed segmentation", "annotation of a skipped image"};

const char *coco_issue_name(coco_issue k) { return k_issue_names[k]; }

void coco_report_issue(coco_report *r, coco_issue k, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->count[k]++;
    if (r->strict && k != ISSUE_ANN_OF_SKIPPED_IMAGE)
        mrcnn_failf("", "", __FILE__, __LINE__, "bad input (--strict makes it fatal): %s: %s", k_issue_names[k], msg);
    if (!r->print) return;
    if (r->count[k] <= MESSAGES_PER_KIND)
        fprintf(stderr, "mrcnn-prep coco: warning: %s: %s\n", k_issue_names[k], msg);
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

void coco_resolve(coco_dataset *ds, const char *image_dir, coco_report *rep) {
    sort_categories(&ds->cats);
    char path[8192];
    for (int64_t i = 0; i < ds->num_images; i++) {
        coco_image *im = &ds->images[i];
        const char *name = ds->names + im->name_off;
        if (coco_find_image(ds, im->id) != i) {
            coco_report_issue(rep, ISSUE_IMAGE_DUPLICATE, "image id %lld ('%s') appears again; the first is kept",
                              (long long)im->id, name);
            im->ok = 0;
            continue;
        }
        if (!path_is_safe(name)) {
            coco_report_issue(rep, ISSUE_IMAGE_PATH, "image id %lld: file_name '%s' is outside %s",
                              (long long)im->id, name, image_dir);
            im->ok = 0;
            continue;
        }
        snprintf(path, sizeof path, "%s/%s", image_dir, name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || access(path, R_OK) != 0) {
            coco_report_issue(rep, ISSUE_IMAGE_MISSING, "image id %lld: cannot read %s", (long long)im->id, path);
            im->ok = 0;
            continue;
        }
        im->file_bytes = (int64_t)st.st_size;
    }
    for (int64_t i = 0; i < ds->num_anns; i++) {
        coco_ann *a = &ds->anns[i];
        const long long aid = (long long)a->id;
        a->ok = 0;
        a->image = coco_find_image(ds, a->image_id);
        if (a->image < 0) {
            coco_report_issue(rep, ISSUE_ANN_UNKNOWN_IMAGE, "annotation id %lld: image_id %lld is not in \"images\"", aid,
                              (long long)a->image_id);
            continue;
        }
        coco_image *im = &ds->images[a->image];
        a->class_index = coco_find_category(ds, a->category_id);
        if (a->class_index < 0) {
            coco_report_issue(rep, ISSUE_ANN_UNKNOWN_CATEGORY, "annotation id %lld: category_id %lld is not in \"categories\"",
                              aid, (long long)a->category_id);
            continue;
        }
        if (!a->has_bbox || !(a->bbox[2] > 0) || !(a->bbox[3] > 0)) {
            if (a->has_bbox)
                coco_report_issue(rep, ISSUE_ANN_BAD_BOX, "annotation id %lld: bbox [%g, %g, %g, %g] has no area", aid,
                                  a->bbox[0], a->bbox[1], a->bbox[2], a->bbox[3]);
            else
                coco_report_issue(rep, ISSUE_ANN_BAD_BOX, "annotation id %lld: no \"bbox\"", aid);
            continue;
        }
        if (a->seg_kind == SEG_BAD_POLY) {
            coco_report_issue(rep, ISSUE_ANN_BAD_POLYGON, "annotation id %lld: a polygon has fewer than 3 points (or an odd coordinate count)", aid);
            continue;
        }
        if (a->seg_kind == SEG_NONE || a->seg_kind == SEG_BAD) {
            coco_report_issue(rep, ISSUE_ANN_BAD_SEGMENTATION, "annotation id %lld: \"segmentation\" is %s", aid,
                              a->seg_kind == SEG_NONE ? "missing" : "neither polygons nor a valid RLE");
            continue;
        }
        if (a->seg_kind == SEG_POLY) {
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
        if (a->rle_h != im->height || a->rle_w != im->width) {
            coco_report_issue(rep, ISSUE_ANN_BAD_SEGMENTATION, "annotation id %lld: RLE size %dx%d differs from image %lld's %dx%d",
                              aid, a->rle_h, a->rle_w, (long long)im->id, im->height, im->width);
            continue;
        }
        mrcnn_rle r;
        if (!mrcnn_rle_from_string(&r, ds->rles + a->seg_off, im->height, im->width)) {
            coco_report_issue(rep, ISSUE_ANN_BAD_SEGMENTATION, "annotation id %lld: the RLE counts are malformed or do not cover %dx%d",
                              aid, im->height, im->width);
            continue;
        }
        if (!a->has_area) a->area = (double)mrcnn_rle_area(&r);
        mrcnn_rle_free(&r);
        if (!im->ok) {
            coco_report_issue(rep, ISSUE_ANN_OF_SKIPPED_IMAGE, "annotation id %lld: its image %lld was skipped", aid,
                              (long long)im->id);
            continue;
        }
        a->ok = 1;
        im->num_ann++;
    }
    free(ds->polys); /* every deferred polygon is RLE now */
    ds->polys = NULL;
    ds->polys_len = ds->polys_cap = 0;
    for (int64_t i = 0; i < ds->num_images; i++) {
        coco_image *im = &ds->images[i];
        if (im->ok && im->num_ann == 0)
            coco_report_issue(rep, ISSUE_IMAGE_NO_ANNOTATIONS, "image id %lld ('%s') has no valid annotation; kept and flagged",
                              (long long)im->id, ds->names + im->name_off);
    }
}
