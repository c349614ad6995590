/* Streaming parse of a COCO instances JSON into compact records (coco.h). The
 * top-level arrays may come in any order: a polygon whose image is already known
 * becomes compressed RLE at once; otherwise its coordinates wait (as doubles, never as
 * text) until coco_resolve. Memory: the records, RLE strings and deferred polygons. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coco.h"
#include "mrcnn/check.h"
#include "mrcnn/json.h"
#include "mrcnn/rle.h"

#define GROW(ptr, len, cap, need, what)                                              \
    do {                                                                             \
        if ((len) + (int64_t)(need) > (cap)) {                                       \
            int64_t c_ = (cap) ? (cap) * 2 : 1024;                                   \
            while (c_ < (len) + (int64_t)(need)) c_ *= 2;                            \
            (ptr) = MRCNN_REALLOC((ptr), (size_t)c_ * sizeof *(ptr), what);          \
            (cap) = c_;                                                              \
        }                                                                            \
    } while (0)

typedef struct {
    mrcnn_json *j;
    const char *path;
    coco_dataset *ds;
    coco_report *rep;
    double *seg;        // scratch: the current annotation's polygons, [npoly, k, xy..., ...]
    int64_t seg_len, seg_cap;
    uint32_t *counts;   // scratch: uncompressed RLE counts
    int64_t counts_len, counts_cap;
    void (*progress)(int64_t, void *);
    void *ctx;
    int64_t image_index; // the "images" entry being read, for messages
} parser;

static _Noreturn void json_fatal(parser *p) {
    mrcnn_failf("", "", __FILE__, __LINE__, "%s: malformed JSON: %s", p->path, mrcnn_json_error(p->j));
}

static mrcnn_json_token next(parser *p) {
    mrcnn_json_token t = mrcnn_json_next(p->j);
    if (t == MRCNN_JSON_ERROR) json_fatal(p);
    return t;
}

static void expect(parser *p, mrcnn_json_token t, mrcnn_json_token want, const char *what) {
    if (t != want) {
        mrcnn_json_fail(p->j, "expected %s", what);
        json_fatal(p);
    }
}

static void skip_value(parser *p) {
    next(p);
    if (!mrcnn_json_skip(p->j)) json_fatal(p);
}

static int64_t read_int(parser *p, const char *key) {
    expect(p, next(p), MRCNN_JSON_NUMBER, "an integer");
    int ok = 0;
    int64_t v = mrcnn_json_int64(p->j, &ok);
    if (!ok) {
        /* 1.0 style integers do occur in exported files; accept exact ones. */
        double d = mrcnn_json_double(p->j);
        if (d > -9.2e18 && d < 9.2e18 && d == (double)(int64_t)d) return (int64_t)d; // range first: no UB cast
        mrcnn_json_fail(p->j, "\"%s\" must be an integer", key);
        json_fatal(p);
    }
    return v;
}

/* An image's integer that must lie in [lo, hi]: out of it, the image entry is
 * malformed (fatal, as a missing height is, with the position and the entry's index),
 * never silently truncated to a narrower type. */
static int64_t read_int_range(parser *p, const char *key, int64_t lo, int64_t hi) {
    int64_t v = read_int(p, key);
    if (v < lo || v > hi) {
        mrcnn_json_fail(p->j, "images[%lld]: \"%s\" must be an integer in [%lld, %lld], not %s", (long long)p->image_index,
                        key, (long long)lo, (long long)hi, mrcnn_json_text(p->j, NULL));
        mrcnn_failf("", "", __FILE__, __LINE__, "%s: %s", p->path, mrcnn_json_error(p->j));
    }
    return v;
}

static double read_number(parser *p, const char *key) {
    mrcnn_json_token t = next(p);
    if (t != MRCNN_JSON_NUMBER) {
        mrcnn_json_fail(p->j, "\"%s\" must be a number", key);
        json_fatal(p);
    }
    return mrcnn_json_double(p->j);
}

static const char *read_string(parser *p, const char *key, size_t *len) {
    mrcnn_json_token t = next(p);
    if (t != MRCNN_JSON_STRING) {
        mrcnn_json_fail(p->j, "\"%s\" must be a string", key);
        json_fatal(p);
    }
    return mrcnn_json_text(p->j, len);
}

/* *nul is set when the string holds a NUL byte ("\u0000"), where a C string would end. */
static char *dup_string(parser *p, const char *key, int *nul) {
    size_t n = 0;
    const char *s = read_string(p, key, &n);
    if (memchr(s, 0, n)) *nul = 1;
    char *d = MRCNN_MALLOC(n + 1, key);
    memcpy(d, s, n + 1);
    return d;
}

/* ---- image id map ---- */
static uint64_t hash64(int64_t k) {
    uint64_t x = (uint64_t)k;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static void map_put(coco_dataset *ds, int64_t key, int64_t val);
static void map_grow(coco_dataset *ds) {
    int64_t old_cap = ds->map_cap, *ok = ds->map_keys, *ov = ds->map_vals;
    ds->map_cap = old_cap ? old_cap * 2 : 1024;
    ds->map_keys = MRCNN_MALLOC(sizeof(int64_t) * (size_t)ds->map_cap, "image id map");
    ds->map_vals = MRCNN_MALLOC(sizeof(int64_t) * (size_t)ds->map_cap, "image id map");
    for (int64_t i = 0; i < ds->map_cap; i++) ds->map_vals[i] = -1;
    for (int64_t i = 0; i < old_cap; i++)
        if (ov[i] >= 0) map_put(ds, ok[i], ov[i]);
    free(ok);
    free(ov);
}

/* Keeps the first index for a key (duplicates are reported by coco_resolve). */
static void map_put(coco_dataset *ds, int64_t key, int64_t val) {
    if (2 * (ds->num_images + 1) > ds->map_cap) map_grow(ds);
    uint64_t mask = (uint64_t)ds->map_cap - 1;
    for (uint64_t h = hash64(key) & mask;; h = (h + 1) & mask) {
        if (ds->map_vals[h] < 0) {
            ds->map_keys[h] = key;
            ds->map_vals[h] = val;
            return;
        }
        if (ds->map_keys[h] == key) return;
    }
}

int64_t coco_find_image(const coco_dataset *ds, int64_t id) {
    if (!ds->map_cap) return -1;
    uint64_t mask = (uint64_t)ds->map_cap - 1;
    for (uint64_t h = hash64(id) & mask;; h = (h + 1) & mask) {
        if (ds->map_vals[h] < 0) return -1;
        if (ds->map_keys[h] == id) return ds->map_vals[h];
    }
}

/* ---- images / categories ---- */
static void parse_images(parser *p) {
    coco_dataset *ds = p->ds;
    expect(p, next(p), MRCNN_JSON_ARRAY_BEGIN, "\"images\" to be an array");
    mrcnn_json_token t;
    while ((t = next(p)) == MRCNN_JSON_OBJECT_BEGIN) {
        coco_image im = {.id = 0, .height = -1, .width = -1, .name_off = -1, .ok = 1};
        p->image_index = ds->num_images;
        int has_id = 0;
        while ((t = next(p)) == MRCNN_JSON_KEY) {
            const char *k = mrcnn_json_text(p->j, NULL);
            if (!strcmp(k, "id")) {
                im.id = read_int(p, "id");
                has_id = 1;
            } else if (!strcmp(k, "height")) {
                im.height = (int32_t)read_int_range(p, "height", 1, MRCNN_MAX_IMAGE_SIDE);
            } else if (!strcmp(k, "width")) {
                im.width = (int32_t)read_int_range(p, "width", 1, MRCNN_MAX_IMAGE_SIDE);
            } else if (!strcmp(k, "file_name")) {
                size_t n = 0;
                const char *s = read_string(p, "file_name", &n);
                /* "\u0000" unescapes to a NUL byte: the stored name would end there (and
                 * could name another image). coco_resolve rejects the image. */
                im.bad_name = memchr(s, 0, n) != NULL;
                GROW(ds->names, ds->names_len, ds->names_cap, n + 1, "image file names");
                memcpy(ds->names + ds->names_len, s, n + 1);
                im.name_off = ds->names_len;
                ds->names_len += (int64_t)n + 1;
            } else {
                skip_value(p);
            }
        }
        expect(p, t, MRCNN_JSON_OBJECT_END, "an image member or '}'");
        if (!has_id || im.name_off < 0 || im.height <= 0 || im.width <= 0) {
            mrcnn_json_fail(p->j, "an image needs \"id\", \"file_name\" and positive \"height\" and \"width\"");
            json_fatal(p);
        }
        GROW(ds->images, ds->num_images, ds->cap_images, 1, "images");
        map_put(ds, im.id, ds->num_images);
        ds->images[ds->num_images++] = im;
        if (p->progress && (ds->num_images & 4095) == 0) p->progress(mrcnn_json_offset(p->j), p->ctx);
    }
    expect(p, t, MRCNN_JSON_ARRAY_END, "an image object or ']'");
}

static void parse_categories(parser *p) {
    prep_categories *c = &p->ds->cats;
    expect(p, next(p), MRCNN_JSON_ARRAY_BEGIN, "\"categories\" to be an array");
    mrcnn_json_token t;
    int cap = c->n;
    while ((t = next(p)) == MRCNN_JSON_OBJECT_BEGIN) {
        int64_t id = 0;
        int has_id = 0;
        char *name = NULL, *super = NULL;
        int name_nul = 0, super_nul = 0;
        while ((t = next(p)) == MRCNN_JSON_KEY) {
            const char *k = mrcnn_json_text(p->j, NULL);
            if (!strcmp(k, "id")) {
                id = read_int(p, "id");
                has_id = 1;
            } else if (!strcmp(k, "name")) {
                free(name);
                name = dup_string(p, "name", &name_nul);
            } else if (!strcmp(k, "supercategory")) {
                free(super);
                super = dup_string(p, "supercategory", &super_nul);
            } else {
                skip_value(p);
            }
        }
        expect(p, t, MRCNN_JSON_OBJECT_END, "a category member or '}'");
        if (!has_id) {
            mrcnn_json_fail(p->j, "a category needs an \"id\"");
            json_fatal(p);
        }
        /* Stored as C strings, such a name would be cut at the NUL (and could equal
         * another category's): refused, as nothing can be skipped in place of a category. */
        if (name_nul || super_nul)
            mrcnn_failf("", "", __FILE__, __LINE__, "%s: category id %lld: its \"%s\" holds a NUL byte (\\u0000), which no "
                        "category name may hold", p->path, (long long)id, name_nul ? "name" : "supercategory");
        if (c->n == cap) {
            cap = cap ? 2 * cap : 64;
            c->ids = MRCNN_REALLOC(c->ids, sizeof(int64_t) * cap, "categories");
            c->names = MRCNN_REALLOC(c->names, sizeof(char *) * cap, "categories");
            c->supers = MRCNN_REALLOC(c->supers, sizeof(char *) * cap, "categories");
        }
        c->ids[c->n] = id;
        c->names[c->n] = name ? name : strdup("");
        c->supers[c->n] = super ? super : strdup("");
        c->n++;
    }
    expect(p, t, MRCNN_JSON_ARRAY_END, "a category object or ']'");
}

/* ---- annotations ---- */
static void seg_push(parser *p, double v) {
    GROW(p->seg, p->seg_len, p->seg_cap, 1, "polygon scratch");
    p->seg[p->seg_len++] = v;
}

/* [[x, y, ...], ...]: returns SEG_POLY, SEG_BAD_POLY (fewer than 3 points, odd count) or
 * SEG_BAD (no polygon, or a list that is not all polygons of numbers: an RLE object
 * among polygons, a string coordinate). A wrong form is the annotation's fault, skipped
 * and counted like any malformed segmentation, not the file's: the JSON is valid. */
static int parse_polygons(parser *p, coco_ann *a) {
    p->seg_len = 0;
    seg_push(p, 0);
    int bad = 0, not_polygons = 0;
    mrcnn_json_token t;
    while ((t = next(p)) != MRCNN_JSON_ARRAY_END) {
        if (t != MRCNN_JSON_ARRAY_BEGIN) {
            if (!mrcnn_json_skip(p->j)) json_fatal(p);
            not_polygons = 1;
            continue;
        }
        int64_t at = p->seg_len;
        seg_push(p, 0);
        int64_t n = 0;
        while ((t = next(p)) != MRCNN_JSON_ARRAY_END) {
            if (t != MRCNN_JSON_NUMBER) {
                if (!mrcnn_json_skip(p->j)) json_fatal(p);
                not_polygons = 1;
                continue;
            }
            seg_push(p, mrcnn_json_double(p->j));
            n++;
        }
        if (n % 2 || n < 6) bad = 1;
        p->seg[at] = (double)(n / 2);
        p->seg[0] += 1;
    }
    if (not_polygons) {
        a->seg_why = SEGWHY_MIXED;
        return SEG_BAD;
    }
    if (bad) return SEG_BAD_POLY;
    return p->seg[0] > 0 ? SEG_POLY : SEG_BAD;
}

static void rles_push(coco_dataset *ds, const char *s, size_t n, coco_ann *a) {
    GROW(ds->rles, ds->rles_len, ds->rles_cap, n + 1, "RLE strings");
    memcpy(ds->rles + ds->rles_len, s, n);
    ds->rles[ds->rles_len + n] = 0;
    a->seg_off = ds->rles_len;
    ds->rles_len += (int64_t)n + 1;
}

/* {"counts": "..." | [..], "size": [h, w]} */
static int parse_rle(parser *p, coco_ann *a) {
    mrcnn_json_token t;
    int have_counts = 0, have_size = 0, compressed = 0, bad = 0;
    char *str = NULL;
    size_t str_len = 0;
    while ((t = next(p)) == MRCNN_JSON_KEY) {
        const char *k = mrcnn_json_text(p->j, NULL);
        if (!strcmp(k, "counts")) {
            t = next(p);
            have_counts = 1;
            if (t == MRCNN_JSON_STRING) {
                const char *s = mrcnn_json_text(p->j, &str_len);
                free(str);
                str = MRCNN_MALLOC(str_len + 1, "RLE string");
                memcpy(str, s, str_len + 1);
                compressed = 1;
            } else if (t == MRCNN_JSON_ARRAY_BEGIN) {
                p->counts_len = 0;
                while ((t = next(p)) == MRCNN_JSON_NUMBER) {
                    int ok = 0;
                    int64_t v = mrcnn_json_int64(p->j, &ok);
                    if (!ok || v < 0 || v > UINT32_MAX) bad = 1, a->seg_why = SEGWHY_RLE_COUNTS;
                    GROW(p->counts, p->counts_len, p->counts_cap, 1, "RLE counts");
                    p->counts[p->counts_len++] = (uint32_t)v;
                }
                expect(p, t, MRCNN_JSON_ARRAY_END, "an RLE count or ']'");
                compressed = 0;
            } else {
                if (!mrcnn_json_skip(p->j)) json_fatal(p);
                bad = 1;
            }
        } else if (!strcmp(k, "size")) {
            expect(p, next(p), MRCNN_JSON_ARRAY_BEGIN, "\"size\": [height, width]");
            const int64_t h = read_int(p, "size"), w = read_int(p, "size");
            expect(p, next(p), MRCNN_JSON_ARRAY_END, "']' after [height, width]");
            have_size = 1;
            if (h < 1 || h > MRCNN_MAX_IMAGE_SIDE || w < 1 || w > MRCNN_MAX_IMAGE_SIDE) {
                bad = 1; // never truncated to 32 bits: 2^32 + 64 is not 64
                a->seg_why = SEGWHY_RLE_SIZE;
                a->bad_rle_h = h, a->bad_rle_w = w;
            } else {
                a->rle_h = (int32_t)h;
                a->rle_w = (int32_t)w;
            }
        } else {
            skip_value(p);
        }
    }
    expect(p, t, MRCNN_JSON_OBJECT_END, "an RLE member or '}'");
    int kind = SEG_BAD;
    if (have_counts && have_size && !bad && a->rle_h > 0 && a->rle_w > 0) {
        if (compressed) {
            rles_push(p->ds, str, str_len, a);
            kind = SEG_RLE;
        } else {
            uint64_t sum = 0;
            for (int64_t i = 0; i < p->counts_len; i++) sum += p->counts[i];
            if (sum != (uint64_t)a->rle_h * (uint64_t)a->rle_w) {
                a->seg_why = SEGWHY_RLE_SUM;
                a->bad_rle_sum = (int64_t)sum;
            } else {
                mrcnn_rle r;
                mrcnn_rle_init(&r, a->rle_h, a->rle_w, p->counts_len, p->counts);
                char *s = mrcnn_rle_to_string(&r);
                rles_push(p->ds, s, strlen(s), a);
                free(s);
                mrcnn_rle_free(&r);
                kind = SEG_RLE;
            }
        }
    }
    free(str);
    return kind;
}

int coco_polygons_in_range(const double *p, int64_t h, int64_t w) {
    const int npoly = (int)p[0];
    const double *q = p + 1;
    for (int i = 0; i < npoly; i++) {
        int k = (int)q[0];
        if (!mrcnn_polygon_in_range(q + 1, 2 * (int64_t)k, h, w)) return 0;
        q += 1 + 2 * k;
    }
    return 1;
}

char *coco_polygons_to_rle(const double *p, int64_t h, int64_t w) {
    const int npoly = (int)p[0];
    mrcnn_rle *rs = MRCNN_CALLOC((size_t)npoly, sizeof *rs, "polygon RLEs");
    const double *q = p + 1;
    for (int i = 0; i < npoly; i++) {
        int k = (int)q[0];
        mrcnn_rle_from_polygon(&rs[i], q + 1, k, h, w);
        q += 1 + 2 * k;
    }
    char *s;
    if (npoly == 1) {
        s = mrcnn_rle_to_string(&rs[0]);
    } else {
        mrcnn_rle m;
        mrcnn_rle_merge(rs, npoly, &m, 0);
        s = mrcnn_rle_to_string(&m);
        mrcnn_rle_free(&m);
    }
    for (int i = 0; i < npoly; i++) mrcnn_rle_free(&rs[i]);
    free(rs);
    return s;
}

static void parse_annotations(parser *p) {
    coco_dataset *ds = p->ds;
    expect(p, next(p), MRCNN_JSON_ARRAY_BEGIN, "\"annotations\" to be an array");
    mrcnn_json_token t;
    while ((t = next(p)) == MRCNN_JSON_OBJECT_BEGIN) {
        coco_ann a;
        memset(&a, 0, sizeof a);
        a.image = -1;
        a.seg_off = -1;
        a.ok = 1;
        int has_id = 0, has_image = 0, has_cat = 0;
        while ((t = next(p)) == MRCNN_JSON_KEY) {
            const char *k = mrcnn_json_text(p->j, NULL);
            if (!strcmp(k, "id")) {
                a.id = read_int(p, "id");
                has_id = 1;
            } else if (!strcmp(k, "image_id")) {
                a.image_id = read_int(p, "image_id");
                has_image = 1;
            } else if (!strcmp(k, "category_id")) {
                a.category_id = read_int(p, "category_id");
                has_cat = 1;
            } else if (!strcmp(k, "iscrowd")) {
                a.iscrowd_value = read_int(p, "iscrowd");
                a.iscrowd = a.iscrowd_value != 0;
                if (a.iscrowd_value != 0 && a.iscrowd_value != 1) a.bad_number |= BADNUM_ISCROWD;
            } else if (!strcmp(k, "area")) {
                a.area = read_number(p, "area");
                a.has_area = 1;
                if (!isfinite(a.area) || a.area < 0) a.bad_number |= BADNUM_AREA;
            } else if (!strcmp(k, "bbox")) {
                expect(p, next(p), MRCNN_JSON_ARRAY_BEGIN, "\"bbox\": [x, y, w, h]");
                for (int i = 0; i < 4; i++) {
                    const double v = read_number(p, "bbox"); // 1e400 reads as inf, 1e39 fits no float
                    if (isfinite(v) && fabs(v) <= FLT_MAX) {
                        a.bbox[i] = (float)v;
                    } else {
                        a.bbox[i] = isnan(v) ? NAN : v < 0 ? -INFINITY : INFINITY;
                        a.bad_number |= BADNUM_BBOX;
                    }
                }
                expect(p, next(p), MRCNN_JSON_ARRAY_END, "']' after the 4 bbox numbers");
                a.has_bbox = 1;
            } else if (!strcmp(k, "segmentation")) {
                t = next(p);
                if (t == MRCNN_JSON_ARRAY_BEGIN) {
                    a.seg_kind = (uint8_t)parse_polygons(p, &a);
                } else if (t == MRCNN_JSON_OBJECT_BEGIN) {
                    a.seg_kind = (uint8_t)parse_rle(p, &a);
                } else {
                    if (!mrcnn_json_skip(p->j)) json_fatal(p);
                    a.seg_kind = SEG_BAD;
                }
            } else {
                skip_value(p);
            }
        }
        expect(p, t, MRCNN_JSON_OBJECT_END, "an annotation member or '}'");
        if (!has_id || !has_image || !has_cat) {
            mrcnn_json_fail(p->j, "an annotation needs \"id\", \"image_id\" and \"category_id\"");
            json_fatal(p);
        }
        if (a.seg_kind == SEG_POLY) {
            int64_t im = coco_find_image(ds, a.image_id);
            if (im >= 0 && !coco_polygons_in_range(p->seg, ds->images[im].height, ds->images[im].width)) {
                a.seg_kind = SEG_BAD_RANGE; // never rasterized: its coordinates would overflow the grid
            } else if (im >= 0) {
                char *s = coco_polygons_to_rle(p->seg, ds->images[im].height, ds->images[im].width);
                rles_push(ds, s, strlen(s), &a);
                a.rle_h = ds->images[im].height;
                a.rle_w = ds->images[im].width;
                a.seg_kind = SEG_RLE;
                free(s);
            } else {
                GROW(ds->polys, ds->polys_len, ds->polys_cap, p->seg_len, "deferred polygons");
                memcpy(ds->polys + ds->polys_len, p->seg, sizeof(double) * (size_t)p->seg_len);
                a.seg_off = ds->polys_len;
                ds->polys_len += p->seg_len;
            }
        }
        GROW(ds->anns, ds->num_anns, ds->cap_anns, 1, "annotations");
        ds->anns[ds->num_anns++] = a;
        if (p->progress && (ds->num_anns & 4095) == 0) p->progress(mrcnn_json_offset(p->j), p->ctx);
    }
    expect(p, t, MRCNN_JSON_ARRAY_END, "an annotation object or ']'");
}

void coco_parse(coco_dataset *ds, const char *path, coco_report *rep, void (*progress)(int64_t, void *), void *ctx) {
    parser p = {0};
    p.path = path;
    p.ds = ds;
    p.rep = rep;
    p.progress = progress;
    p.ctx = ctx;
    p.j = mrcnn_json_open_file(path);
    MRCNN_CHECK(p.j, "cannot open the annotations file %s", path);
    expect(&p, next(&p), MRCNN_JSON_OBJECT_BEGIN, "a JSON object at the top level");
    mrcnn_json_token t;
    int seen_images = 0, seen_anns = 0, seen_cats = 0;
    while ((t = next(&p)) == MRCNN_JSON_KEY) {
        const char *k = mrcnn_json_text(p.j, NULL);
        if (!strcmp(k, "images") && !seen_images) {
            seen_images = 1;
            parse_images(&p);
        } else if (!strcmp(k, "annotations") && !seen_anns) {
            seen_anns = 1;
            parse_annotations(&p);
        } else if (!strcmp(k, "categories") && !seen_cats) {
            seen_cats = 1;
            parse_categories(&p);
        } else {
            skip_value(&p);
        }
    }
    expect(&p, t, MRCNN_JSON_OBJECT_END, "a key or '}'");
    expect(&p, next(&p), MRCNN_JSON_EOF, "the end of the file after the top-level object");
    if (!seen_images || !seen_anns || !seen_cats) {
        mrcnn_failf("", "", __FILE__, __LINE__, "%s: a COCO instances file needs \"images\", \"annotations\" and \"categories\" (missing %s)",
                    path, !seen_images ? "images" : !seen_anns ? "annotations" : "categories");
    }
    mrcnn_json_close(p.j);
    free(p.seg);
    free(p.counts);
}

void coco_free(coco_dataset *ds) {
    for (int i = 0; i < ds->cats.n; i++) free(ds->cats.names[i]), free(ds->cats.supers[i]);
    free(ds->cats.ids);
    free(ds->cats.names);
    free(ds->cats.supers);
    free(ds->images);
    free(ds->anns);
    free(ds->names);
    free(ds->rles);
    free(ds->polys);
    free(ds->map_keys);
    free(ds->map_vals);
    free(ds->image_root);
    memset(ds, 0, sizeof *ds);
}
