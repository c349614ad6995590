/* COCO instances and results JSON, streamed in (mrcnn/json.h) and written out.
 * Errors name the file, the line and byte, and the id or field that is wrong. */
#include "mrcnn/cocoeval.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/ids.h"
#include "mrcnn/json.h"

typedef struct {
    mrcnn_json *j;
    const char *path;
    char at[64]; // the record being read ("results[3]", "annotations[12]"), for messages
} parser;

static _Noreturn void parse_fail(parser *p, const char *fmt, ...) MRCNN_PRINTF(2, 3);
static _Noreturn void parse_fail(parser *p, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mrcnn_json_fail(p->j, "%s%s%s", p->at, p->at[0] ? ": " : "", msg);
    char full[1024];
    snprintf(full, sizeof full, "%s: %s", p->path, mrcnn_json_error(p->j));
    mrcnn_json_close(p->j);
    mrcnn_failf("coco", "", __FILE__, __LINE__, "%s", full);
}

/* The next token; a syntax error fails with its position. */
static mrcnn_json_token next(parser *p) {
    mrcnn_json_token t = mrcnn_json_next(p->j);
    if (t == MRCNN_JSON_ERROR) {
        char full[1024];
        snprintf(full, sizeof full, "%s: malformed JSON: %s", p->path, mrcnn_json_error(p->j));
        mrcnn_json_close(p->j);
        mrcnn_failf("coco", "", __FILE__, __LINE__, "%s", full);
    }
    return t;
}

static void skip_value(parser *p) {
    if (!mrcnn_json_skip(p->j)) next(p); // reports the syntax error
}

static void expect(parser *p, mrcnn_json_token want, const char *what) {
    if (next(p) != want) parse_fail(p, "%s", what);
}

static int64_t read_int(parser *p, const char *field) {
    if (next(p) != MRCNN_JSON_NUMBER) parse_fail(p, "'%s' must be an integer", field);
    int ok;
    int64_t v = mrcnn_json_int64(p->j, &ok);
    if (!ok) parse_fail(p, "'%s' must be an integer in int64 range, not %s", field, mrcnn_json_text(p->j, NULL));
    return v;
}

/* An integer in [lo, hi]: never truncated, never wrapped. */
static int64_t read_int_range(parser *p, const char *field, int64_t lo, int64_t hi) {
    int64_t v = read_int(p, field);
    if (v < lo || v > hi)
        parse_fail(p, "'%s' must be an integer in [%lld, %lld], not %lld", field, (long long)lo, (long long)hi, (long long)v);
    return v;
}

/* Numbers are finite where they enter: 1e400 parses as inf, and an inf or NaN box,
 * area, score or coordinate only turns into NaN IoUs (or a stuck sort) later. */
static double read_number(parser *p, const char *field) {
    if (next(p) != MRCNN_JSON_NUMBER) parse_fail(p, "'%s' must be a number", field);
    double v = mrcnn_json_double(p->j);
    if (!isfinite(v)) parse_fail(p, "'%s' must be a finite number, not %s", field, mrcnn_json_text(p->j, NULL));
    return v;
}

static char *xstrndup(const char *s, size_t len) {
    char *d = MRCNN_MALLOC(len + 1, "coco string");
    memcpy(d, s, len);
    d[len] = 0;
    return d;
}

static char *xstrdup(const char *s) { return xstrndup(s, strlen(s)); }

/* [x, y, w, h]; [] counts as no box, as loadRes treats it. */
static int read_bbox(parser *p, double bbox[4]) {
    expect(p, MRCNN_JSON_ARRAY_BEGIN, "'bbox' must be an array [x, y, w, h]");
    int n = 0;
    for (;;) {
        mrcnn_json_token t = next(p);
        if (t == MRCNN_JSON_ARRAY_END) break;
        if (t != MRCNN_JSON_NUMBER || n == 4) parse_fail(p, "'bbox' must be 4 numbers [x, y, w, h]");
        bbox[n] = mrcnn_json_double(p->j);
        if (!isfinite(bbox[n])) parse_fail(p, "'bbox' must be 4 finite numbers, not %s", mrcnn_json_text(p->j, NULL));
        n++;
    }
    if (n != 0 && n != 4) parse_fail(p, "'bbox' must be 4 numbers [x, y, w, h], not %d", n);
    return n == 4;
}

static void segm_free(mrcnn_coco_segm *s) {
    free(s->poly_len);
    free(s->poly);
    free(s->counts);
    free(s->str);
    memset(s, 0, sizeof *s);
}

static void read_polygons(parser *p, mrcnn_coco_segm *s) {
    s->kind = MRCNN_SEGM_POLYGONS;
    int64_t cap = 16, n = 0, pcap = 4;
    s->poly = MRCNN_MALLOC(sizeof(double) * (size_t)cap, "polygon coordinates");
    s->poly_len = MRCNN_MALLOC(sizeof(int) * (size_t)pcap, "polygon lengths");
    for (;;) {
        mrcnn_json_token t = next(p);
        if (t == MRCNN_JSON_ARRAY_END) break;
        if (t != MRCNN_JSON_ARRAY_BEGIN) parse_fail(p, "'segmentation' polygons must be arrays of numbers");
        if (s->n_poly == pcap) {
            pcap *= 2;
            s->poly_len = MRCNN_REALLOC(s->poly_len, sizeof(int) * (size_t)pcap, "polygon lengths");
        }
        int len = 0;
        while ((t = next(p)) != MRCNN_JSON_ARRAY_END) {
            if (t != MRCNN_JSON_NUMBER) parse_fail(p, "'segmentation' polygons must be arrays of numbers");
            if (n == cap) {
                cap *= 2;
                s->poly = MRCNN_REALLOC(s->poly, sizeof(double) * (size_t)cap, "polygon coordinates");
            }
            s->poly[n] = mrcnn_json_double(p->j);
            if (!isfinite(s->poly[n]))
                parse_fail(p, "'segmentation' polygon coordinates must be finite, not %s", mrcnn_json_text(p->j, NULL));
            n++;
            if (len == INT32_MAX) parse_fail(p, "a 'segmentation' polygon has too many coordinates");
            len++;
        }
        s->poly_len[s->n_poly++] = len;
    }
}

static void read_rle_object(parser *p, mrcnn_coco_segm *s) {
    int have_size = 0;
    mrcnn_json_token t;
    while ((t = next(p)) != MRCNN_JSON_OBJECT_END) {
        const char *key = mrcnn_json_text(p->j, NULL);
        if (!strcmp(key, "size")) {
            expect(p, MRCNN_JSON_ARRAY_BEGIN, "'size' must be [height, width]");
            s->h = read_int_range(p, "size", 0, MRCNN_MAX_IMAGE_SIDE);
            s->w = read_int_range(p, "size", 0, MRCNN_MAX_IMAGE_SIDE);
            expect(p, MRCNN_JSON_ARRAY_END, "'size' must be [height, width]");
            have_size = 1;
        } else if (!strcmp(key, "counts")) {
            t = next(p);
            if (t == MRCNN_JSON_STRING) {
                s->kind = MRCNN_SEGM_STRING;
                free(s->str);
                size_t len;
                const char *txt = mrcnn_json_text(p->j, &len);
                s->str = xstrndup(txt, len);
            } else if (t == MRCNN_JSON_ARRAY_BEGIN) {
                s->kind = MRCNN_SEGM_COUNTS;
                int64_t cap = 16;
                s->counts = MRCNN_MALLOC(sizeof(uint32_t) * (size_t)cap, "rle counts");
                while ((t = next(p)) != MRCNN_JSON_ARRAY_END) {
                    int ok;
                    int64_t v = t == MRCNN_JSON_NUMBER ? mrcnn_json_int64(p->j, &ok) : (ok = 0);
                    if (!ok || v < 0 || v > (int64_t)UINT32_MAX) parse_fail(p, "RLE 'counts' must be non-negative 32-bit integers");
                    if (s->m == cap) {
                        cap *= 2;
                        s->counts = MRCNN_REALLOC(s->counts, sizeof(uint32_t) * (size_t)cap, "rle counts");
                    }
                    s->counts[s->m++] = (uint32_t)v;
                }
            } else {
                parse_fail(p, "RLE 'counts' must be a string or an array of integers");
            }
        } else {
            skip_value(p);
        }
    }
    if (!have_size || s->kind == MRCNN_SEGM_NONE) parse_fail(p, "an RLE 'segmentation' needs both 'size' and 'counts'");
    /* Runs that do not cover h x w exactly would leave IoU's walk over two masks stuck. */
    if (s->kind == MRCNN_SEGM_COUNTS && !mrcnn_rle_counts_valid(s->h, s->w, s->m, s->counts)) {
        unsigned long long sum = 0;
        for (int64_t i = 0; i < s->m; i++) sum += s->counts[i];
        parse_fail(p, "RLE 'counts' add up to %llu, not 'size' %lld x %lld = %lld", sum, (long long)s->h, (long long)s->w,
                   (long long)(s->h * s->w));
    }
}

static void read_segm(parser *p, mrcnn_coco_segm *s) {
    segm_free(s);
    mrcnn_json_token t = next(p);
    if (t == MRCNN_JSON_ARRAY_BEGIN) read_polygons(p, s);
    else if (t == MRCNN_JSON_OBJECT_BEGIN) read_rle_object(p, s);
    else parse_fail(p, "'segmentation' must be polygons [[x, y, ...], ...] or an RLE {\"size\", \"counts\"}");
}

/* One annotation or result object; `is_result` selects the required fields. */
static void read_ann(parser *p, mrcnn_coco_ann *a, int is_result) {
    memset(a, 0, sizeof *a);
    int have_id = 0, have_img = 0, have_cat = 0, have_area = 0, have_score = 0;
    int64_t line = mrcnn_json_line(p->j), off = mrcnn_json_offset(p->j);
    mrcnn_json_token t;
    while ((t = next(p)) != MRCNN_JSON_OBJECT_END) {
        const char *key = mrcnn_json_text(p->j, NULL);
        if (!strcmp(key, "image_id")) a->image_id = read_int(p, "image_id"), have_img = 1;
        else if (!strcmp(key, "category_id")) a->category_id = read_int(p, "category_id"), have_cat = 1;
        else if (!strcmp(key, "bbox")) a->has_bbox = read_bbox(p, a->bbox);
        else if (!strcmp(key, "segmentation")) read_segm(p, &a->segm);
        else if (!is_result && !strcmp(key, "id")) a->id = read_int(p, "id"), have_id = 1;
        else if (!is_result && !strcmp(key, "area")) {
            a->area = read_number(p, "area"), have_area = 1;
            if (a->area < 0) parse_fail(p, "'area' must not be negative, not %s", mrcnn_json_text(p->j, NULL));
        }
        else if (!is_result && !strcmp(key, "iscrowd")) {
            t = next(p);
            double v = t == MRCNN_JSON_NUMBER ? mrcnn_json_double(p->j) : -1;
            if (t == MRCNN_JSON_NUMBER && (v == 0 || v == 1)) a->iscrowd = v != 0;
            else if (t == MRCNN_JSON_TRUE || t == MRCNN_JSON_FALSE) a->iscrowd = t == MRCNN_JSON_TRUE;
            else parse_fail(p, "'iscrowd' must be 0 or 1%s%s", t == MRCNN_JSON_NUMBER ? ", not " : "",
                            t == MRCNN_JSON_NUMBER ? mrcnn_json_text(p->j, NULL) : "");
        } else if (is_result && !strcmp(key, "score")) a->score = read_number(p, "score"), have_score = 1;
        else skip_value(p);
    }
    const char *missing = !have_img ? "image_id" : !have_cat ? "category_id"
                        : is_result ? (!have_score ? "score" : NULL)
                        : !have_id ? "id" : !have_area ? "area" : NULL;
    if (missing) {
        char full[1024];
        snprintf(full, sizeof full, "%s: line %lld (byte %lld): %s has no '%s'", p->path, (long long)line,
                 (long long)off, is_result ? "a result" : "an annotation", missing);
        mrcnn_json_close(p->j);
        mrcnn_failf("coco", "", __FILE__, __LINE__, "%s", full);
    }
}

/* A box or polygon coordinate far outside its image (more than an image size + 64
 * pixels: mrcnn_bbox_in_range) is a damaged number, not a detection: it would overflow
 * the rasterizer's integer grid or the IoU arithmetic. Checked once the image is known
 * (a file's arrays may come in any order). Returns the field at fault, or NULL. */
static const char *out_of_range(const mrcnn_coco_ann *a, const mrcnn_coco_image *im, char *why, size_t len) {
    const int64_t h = im ? im->height : -1, w = im ? im->width : -1;
    const char *where = "outside";
    char dims[96] = " its image (size unknown: taken as the largest)";
    if (im && h > 0 && w > 0) snprintf(dims, sizeof dims, " image %lld (%lldx%lld)", (long long)im->id, (long long)h, (long long)w);
    if (a->has_bbox && !mrcnn_bbox_in_range(a->bbox, h, w)) {
        snprintf(why, len, "'bbox' [%.17g, %.17g, %.17g, %.17g] reaches more than an image size (+%d) %s%s", a->bbox[0],
                 a->bbox[1], a->bbox[2], a->bbox[3], MRCNN_COORD_SLACK, where, dims);
        return "bbox";
    }
    if (a->segm.kind == MRCNN_SEGM_POLYGONS) {
        const double *xy = a->segm.poly;
        for (int q = 0; q < a->segm.n_poly; xy += a->segm.poly_len[q], q++)
            if (!mrcnn_polygon_in_range(xy, a->segm.poly_len[q], h, w)) {
                snprintf(why, len, "'segmentation' polygon %d has a coordinate more than an image size (+%d) %s%s", q,
                         MRCNN_COORD_SLACK, where, dims);
                return "segmentation";
            }
    }
    return NULL;
}

static parser open_parser(const char *path) {
    parser p = {mrcnn_json_open_file(path), path, ""};
    MRCNN_CHECK(p.j, "cannot open '%s': %s", path, strerror(errno));
    return p;
}

/* ---- ground truth -------------------------------------------------------------------- */

static const mrcnn_coco_gt *g_sort_gt; // qsort has no context argument

static int cmp_image_idx(const void *a, const void *b) {
    int64_t x = g_sort_gt->images[*(const int64_t *)a].id, y = g_sort_gt->images[*(const int64_t *)b].id;
    return x < y ? -1 : x > y;
}

static int cmp_cat_idx(const void *a, const void *b) {
    int64_t x = g_sort_gt->cats[*(const int64_t *)a].id, y = g_sort_gt->cats[*(const int64_t *)b].id;
    return x < y ? -1 : x > y;
}

void mrcnn_coco_gt_index(mrcnn_coco_gt *gt, const char *path) {
    gt->image_by_id = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(gt->n_images + 1), "image index");
    gt->cat_by_id = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(gt->n_cats + 1), "category index");
    for (int64_t i = 0; i < gt->n_images; i++) gt->image_by_id[i] = i;
    for (int64_t i = 0; i < gt->n_cats; i++) gt->cat_by_id[i] = i;
    g_sort_gt = gt;
    qsort(gt->image_by_id, (size_t)gt->n_images, sizeof(int64_t), cmp_image_idx);
    qsort(gt->cat_by_id, (size_t)gt->n_cats, sizeof(int64_t), cmp_cat_idx);
    for (int64_t i = 1; i < gt->n_images; i++)
        MRCNN_CHECK(gt->images[gt->image_by_id[i]].id != gt->images[gt->image_by_id[i - 1]].id,
                    "%s: duplicate image id %lld", path, (long long)gt->images[gt->image_by_id[i]].id);
    for (int64_t i = 1; i < gt->n_cats; i++)
        MRCNN_CHECK(gt->cats[gt->cat_by_id[i]].id != gt->cats[gt->cat_by_id[i - 1]].id,
                    "%s: duplicate category id %lld", path, (long long)gt->cats[gt->cat_by_id[i]].id);
    /* pycocotools keys annotations by id, so duplicates would silently alias. The rule the
     * converter and inspect --check hold to (mrcnn/ids.h), so that a set they pass is one
     * evaluation takes. */
    int64_t *ids = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(gt->n_anns + 1), "annotation ids");
    for (int64_t i = 0; i < gt->n_anns; i++) ids[i] = gt->anns[i].id;
    int64_t id = 0, first = 0, again = 0;
    const int64_t dups = mrcnn_ids_duplicates(ids, gt->n_anns, NULL, &id, &first, &again);
    free(ids);
    MRCNN_CHECK(dups == 0, "%s: duplicate annotation id %lld (annotations[%lld] and [%lld]; %lld duplicates in all)", path,
                (long long)id, (long long)first, (long long)again, (long long)dups);
}

static int64_t find_sorted(const int64_t *order, int64_t n, int64_t id, const void *base, size_t stride) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        int64_t v = *(const int64_t *)((const char *)base + stride * (size_t)order[mid]);
        if (v < id) lo = mid + 1;
        else hi = mid;
    }
    if (lo < n && *(const int64_t *)((const char *)base + stride * (size_t)order[lo]) == id) return order[lo];
    return -1;
}

int64_t mrcnn_coco_gt_find_image(const mrcnn_coco_gt *gt, int64_t id) {
    return find_sorted(gt->image_by_id, gt->n_images, id, &gt->images[0].id, sizeof(mrcnn_coco_image));
}

int64_t mrcnn_coco_gt_find_category(const mrcnn_coco_gt *gt, int64_t id) {
    return find_sorted(gt->cat_by_id, gt->n_cats, id, &gt->cats[0].id, sizeof(mrcnn_coco_category));
}

static void read_images(parser *p, mrcnn_coco_gt *gt) {
    expect(p, MRCNN_JSON_ARRAY_BEGIN, "'images' must be an array");
    int64_t cap = 0;
    mrcnn_json_token t;
    while ((t = next(p)) != MRCNN_JSON_ARRAY_END) {
        if (t != MRCNN_JSON_OBJECT_BEGIN) parse_fail(p, "'images' must hold objects");
        if (gt->n_images == cap) {
            cap = cap ? 2 * cap : 1024;
            gt->images = MRCNN_REALLOC(gt->images, sizeof(mrcnn_coco_image) * (size_t)cap, "coco images");
        }
        snprintf(p->at, sizeof p->at, "images[%lld]", (long long)gt->n_images);
        mrcnn_coco_image *im = &gt->images[gt->n_images++];
        im->height = im->width = -1;
        int have_id = 0;
        while ((t = next(p)) != MRCNN_JSON_OBJECT_END) {
            const char *key = mrcnn_json_text(p->j, NULL);
            if (!strcmp(key, "id")) im->id = read_int(p, "id"), have_id = 1;
            else if (!strcmp(key, "height")) im->height = read_int_range(p, "height", 1, MRCNN_MAX_IMAGE_SIDE);
            else if (!strcmp(key, "width")) im->width = read_int_range(p, "width", 1, MRCNN_MAX_IMAGE_SIDE);
            else skip_value(p);
        }
        if (!have_id) parse_fail(p, "an image has no 'id'");
    }
    p->at[0] = 0;
}

static void read_categories(parser *p, mrcnn_coco_gt *gt) {
    expect(p, MRCNN_JSON_ARRAY_BEGIN, "'categories' must be an array");
    int64_t cap = 0;
    mrcnn_json_token t;
    while ((t = next(p)) != MRCNN_JSON_ARRAY_END) {
        if (t != MRCNN_JSON_OBJECT_BEGIN) parse_fail(p, "'categories' must hold objects");
        if (gt->n_cats == cap) {
            cap = cap ? 2 * cap : 128;
            gt->cats = MRCNN_REALLOC(gt->cats, sizeof(mrcnn_coco_category) * (size_t)cap, "coco categories");
        }
        snprintf(p->at, sizeof p->at, "categories[%lld]", (long long)gt->n_cats);
        mrcnn_coco_category *c = &gt->cats[gt->n_cats++];
        c->name = NULL;
        int have_id = 0;
        while ((t = next(p)) != MRCNN_JSON_OBJECT_END) {
            const char *key = mrcnn_json_text(p->j, NULL);
            if (!strcmp(key, "id")) c->id = read_int(p, "id"), have_id = 1;
            else if (!strcmp(key, "name")) {
                if (next(p) != MRCNN_JSON_STRING) parse_fail(p, "a category's 'name' must be a string");
                free(c->name);
                c->name = xstrdup(mrcnn_json_text(p->j, NULL));
            } else skip_value(p);
        }
        if (!have_id) parse_fail(p, "a category has no 'id'");
        if (!c->name) c->name = xstrdup("");
    }
    p->at[0] = 0;
}

static void read_annotations(parser *p, mrcnn_coco_gt *gt) {
    expect(p, MRCNN_JSON_ARRAY_BEGIN, "'annotations' must be an array");
    int64_t cap = 0;
    mrcnn_json_token t;
    while ((t = next(p)) != MRCNN_JSON_ARRAY_END) {
        if (t != MRCNN_JSON_OBJECT_BEGIN) parse_fail(p, "'annotations' must hold objects");
        if (gt->n_anns == cap) {
            cap = cap ? 2 * cap : 4096;
            gt->anns = MRCNN_REALLOC(gt->anns, sizeof(mrcnn_coco_ann) * (size_t)cap, "coco annotations");
        }
        snprintf(p->at, sizeof p->at, "annotations[%lld]", (long long)gt->n_anns);
        read_ann(p, &gt->anns[gt->n_anns++], 0);
    }
    p->at[0] = 0;
}

void mrcnn_coco_gt_load(mrcnn_coco_gt *gt, const char *path) {
    memset(gt, 0, sizeof *gt);
    parser p = open_parser(path);
    expect(&p, MRCNN_JSON_OBJECT_BEGIN, "a COCO ground-truth file must be a JSON object");
    int seen_images = 0, seen_cats = 0;
    mrcnn_json_token t;
    while ((t = next(&p)) != MRCNN_JSON_OBJECT_END) {
        const char *key = mrcnn_json_text(p.j, NULL);
        if (!strcmp(key, "images")) read_images(&p, gt), seen_images = 1;
        else if (!strcmp(key, "categories")) read_categories(&p, gt), seen_cats = 1;
        else if (!strcmp(key, "annotations")) read_annotations(&p, gt);
        else skip_value(&p);
    }
    next(&p); // trailing garbage is an error too
    mrcnn_json_close(p.j);
    MRCNN_CHECK(seen_images && seen_cats, "%s: a COCO ground-truth file needs 'images' and 'categories'", path);
    mrcnn_coco_gt_index(gt, path);
    char why[512];
    for (int64_t i = 0; i < gt->n_anns; i++) {
        const mrcnn_coco_ann *a = &gt->anns[i];
        const int64_t im = mrcnn_coco_gt_find_image(gt, a->image_id);
        if (out_of_range(a, im >= 0 ? &gt->images[im] : NULL, why, sizeof why))
            mrcnn_failf("coco", "", __FILE__, __LINE__, "%s: annotations[%lld] (id %lld): %s", path, (long long)i,
                        (long long)a->id, why);
    }
}

void mrcnn_coco_gt_free(mrcnn_coco_gt *gt) {
    for (int64_t i = 0; i < gt->n_anns; i++) segm_free(&gt->anns[i].segm);
    for (int64_t i = 0; i < gt->n_cats; i++) free(gt->cats[i].name);
    free(gt->anns);
    free(gt->images);
    free(gt->cats);
    free(gt->image_by_id);
    free(gt->cat_by_id);
    memset(gt, 0, sizeof *gt);
}

/* ---- results -------------------------------------------------------------------------- */

void mrcnn_coco_dets_init(mrcnn_coco_dets *d) { memset(d, 0, sizeof *d); }

void mrcnn_coco_dets_add(mrcnn_coco_dets *d, const mrcnn_coco_ann *a) {
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 4096;
        d->anns = MRCNN_REALLOC(d->anns, sizeof(mrcnn_coco_ann) * (size_t)d->cap, "coco detections");
    }
    d->anns[d->n] = *a;
    d->anns[d->n].id = d->n + 1; // loadRes numbers results from 1
    d->anns[d->n].iscrowd = 0;
    d->n++;
}

void mrcnn_coco_dets_add_rle(mrcnn_coco_dets *d, int64_t image_id, int64_t category_id, double score,
                             const double bbox[4], const mrcnn_rle *mask) {
    mrcnn_coco_ann a;
    memset(&a, 0, sizeof a);
    a.image_id = image_id;
    a.category_id = category_id;
    a.score = score;
    if (bbox) {
        memcpy(a.bbox, bbox, sizeof a.bbox);
        a.has_bbox = 1;
    }
    if (mask) {
        a.segm.kind = MRCNN_SEGM_STRING;
        a.segm.h = mask->h;
        a.segm.w = mask->w;
        a.segm.str = mrcnn_rle_to_string(mask);
    }
    mrcnn_coco_dets_add(d, &a);
}

void mrcnn_coco_dets_free(mrcnn_coco_dets *d) {
    for (int64_t i = 0; i < d->n; i++) segm_free(&d->anns[i].segm);
    free(d->anns);
    memset(d, 0, sizeof *d);
}

void mrcnn_coco_dets_load(mrcnn_coco_dets *d, const char *path, const mrcnn_coco_gt *gt) {
    mrcnn_coco_dets_init(d);
    parser p = open_parser(path);
    expect(&p, MRCNN_JSON_ARRAY_BEGIN, "a COCO results file must be a JSON array of objects");
    mrcnn_json_token t;
    while ((t = next(&p)) != MRCNN_JSON_ARRAY_END) {
        if (t != MRCNN_JSON_OBJECT_BEGIN) parse_fail(&p, "results[%lld] is not an object", (long long)d->n);
        int64_t line = mrcnn_json_line(p.j), off = mrcnn_json_offset(p.j);
        mrcnn_coco_ann a;
        snprintf(p.at, sizeof p.at, "results[%lld]", (long long)d->n);
        read_ann(&p, &a, 1);
        p.at[0] = 0;
        const char *bad = NULL;
        int64_t bad_id = 0;
        if (gt && mrcnn_coco_gt_find_image(gt, a.image_id) < 0) bad = "image_id", bad_id = a.image_id;
        else if (gt && mrcnn_coco_gt_find_category(gt, a.category_id) < 0) bad = "category_id", bad_id = a.category_id;
        if (bad) {
            char full[1024];
            snprintf(full, sizeof full, "%s: results[%lld] at line %lld (byte %lld): %s %lld is not in the ground truth",
                     path, (long long)d->n, (long long)line, (long long)off, bad, (long long)bad_id);
            mrcnn_json_close(p.j);
            mrcnn_failf("coco", "", __FILE__, __LINE__, "%s", full);
        }
        char why[512];
        const int64_t im = gt ? mrcnn_coco_gt_find_image(gt, a.image_id) : -1;
        if (out_of_range(&a, im >= 0 ? &gt->images[im] : NULL, why, sizeof why)) {
            char full[1024];
            snprintf(full, sizeof full, "%s: results[%lld] at line %lld (byte %lld): %s", path, (long long)d->n,
                     (long long)line, (long long)off, why);
            mrcnn_json_close(p.j);
            mrcnn_failf("coco", "", __FILE__, __LINE__, "%s", full);
        }
        mrcnn_coco_dets_add(d, &a);
    }
    next(&p);
    mrcnn_json_close(p.j);
}

void mrcnn_coco_dets_check(const mrcnn_coco_dets *d, const mrcnn_coco_gt *gt) {
    if (d->n == 0) return;
    int box_branch = d->anns[0].has_bbox; // loadRes decides by the first result
    MRCNN_CHECK(box_branch || d->anns[0].segm.kind != MRCNN_SEGM_NONE,
                "results[0] has neither a 'bbox' nor a 'segmentation'");
    for (int64_t i = 0; i < d->n; i++) {
        const mrcnn_coco_ann *a = &d->anns[i];
        MRCNN_CHECK(mrcnn_coco_gt_find_image(gt, a->image_id) >= 0,
                    "results[%lld]: image_id %lld is not in the ground truth", (long long)i, (long long)a->image_id);
        MRCNN_CHECK(mrcnn_coco_gt_find_category(gt, a->category_id) >= 0,
                    "results[%lld]: category_id %lld is not in the ground truth", (long long)i,
                    (long long)a->category_id);
        if (box_branch)
            MRCNN_CHECK(a->has_bbox, "results[%lld] has no 'bbox' but results[0] has one (pycocotools then takes every result's area from its box)",
                        (long long)i);
        else
            MRCNN_CHECK(a->segm.kind == MRCNN_SEGM_STRING || a->segm.kind == MRCNN_SEGM_COUNTS,
                        "results[%lld] needs an RLE 'segmentation' (results without boxes are masks, as in pycocotools' loadRes)",
                        (long long)i);
    }
}

void mrcnn_coco_dets_write(const mrcnn_coco_dets *d, const char *path) {
    FILE *f = fopen(path, "w");
    MRCNN_CHECK(f, "cannot write '%s': %s", path, strerror(errno));
    fputc('[', f);
    for (int64_t i = 0; i < d->n; i++) {
        const mrcnn_coco_ann *a = &d->anns[i];
        fprintf(f, "%s{\"image_id\": %lld, \"category_id\": %lld, \"score\": %.17g", i ? ",\n" : "\n",
                (long long)a->image_id, (long long)a->category_id, a->score);
        if (a->has_bbox)
            fprintf(f, ", \"bbox\": [%.17g, %.17g, %.17g, %.17g]", a->bbox[0], a->bbox[1], a->bbox[2], a->bbox[3]);
        if (a->segm.kind == MRCNN_SEGM_STRING) {
            fprintf(f, ", \"segmentation\": {\"size\": [%lld, %lld], \"counts\": ", (long long)a->segm.h,
                    (long long)a->segm.w);
            mrcnn_json_write_string(f, a->segm.str);
            fputc('}', f);
        }
        fputc('}', f);
    }
    fputs("\n]\n", f);
    MRCNN_CHECK(fclose(f) == 0, "writing '%s' failed: %s", path, strerror(errno));
}
