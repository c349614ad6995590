/* `mrcnn-prep shapes`: a synthetic COCO-format dataset (circles, squares, triangles)
 * for the demo and the tests, with no download.
 *
 * Choices, so that the data exercise the converter:
 * - Masks are the VISIBLE parts: shapes are painted in order and a later shape hides
 *   what it covers. A placement that would hide more than half of an earlier shape's
 *   visible pixels is redrawn, so every annotation keeps a meaningful mask.
 * - An unoccluded square or triangle is written as a polygon; a circle as compressed
 *   RLE (even image indices) or uncompressed RLE counts (odd); any occluded shape as
 *   compressed RLE of its visible part. Pixels are painted from the very rasterization
 *   (pycocotools' polygon semantics) that the annotation describes.
 * - Category ids 1, 3, 7 (circle, square, triangle): gaps exercise the id mapping.
 *   Image ids have gaps too, annotation ids exceed 2^32, and the train JSON puts
 *   "annotations" before "images" and "categories" last.
 * - Deterministic: every draw is keyed by (seed, split, image index, MRCNN_RNG_SYNTH).
 * - --noise A adds uniform pixel noise in [-A, A] (its own stream) so that JPEGs carry
 *   photo-like entropy, e.g. for the loader benchmark; masks are unaffected.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/json.h"
#include "mrcnn/log.h"
#include "mrcnn/rle.h"
#include "mrcnn/rng.h"
#include "prep.h"

enum { SHAPE_CIRCLE, SHAPE_SQUARE, SHAPE_TRIANGLE, SHAPE_PENTAGON, SHAPE_HEXAGON, SHAPE_STAR, SHAPE_KINDS };
static const int64_t k_cat_id[SHAPE_KINDS] = {1, 3, 7, 8, 10, 12};
static const char *k_cat_name[SHAPE_KINDS] = {"circle", "square", "triangle", "pentagon", "hexagon", "star"};
static const int k_vertices[SHAPE_KINDS] = {0, 4, 3, 5, 6, 10};
#define MAX_SHAPES 32

/* The knobs of a harder set; the defaults give the original set, byte for byte
 * (options at their defaults draw nothing extra). */
typedef struct {
    int classes;            // kinds used: the first `classes` of k_cat_id
    int min_obj, max_obj;   // objects per image (drawn uniformly)
    double scale_lo, scale_span; // radius = min side x (lo + span x u)
    double occlusion;       // a later shape may hide up to this fraction of an earlier one
    int empty_pct;          // percent of images without any object
    int crowd_pct;          // percent of images with one crowd region (iscrowd 1)
} shapes_opts;

typedef struct {
    int kind;
    double xy[20]; // polygon vertices, rounded to 0.01
    int k;         // vertex count
    int crowd;     // a crowd region: a cluster of small shapes of one kind, one annotation
    uint8_t color[3];
} shape;

typedef struct {
    mrcnn_rng rng;
    uint64_t draw;
} stream;

static double uni(stream *s) { return mrcnn_rng_uniform(&s->rng, s->draw++); }
static int below(stream *s, int n) { return (int)mrcnn_rng_below(&s->rng, s->draw++, (uint32_t)n); }

static void polygon(shape *sh, double cx, double cy, double r, double theta) {
    sh->k = k_vertices[sh->kind];
    for (int v = 0; v < sh->k; v++) {
        double a = theta + 6.283185307179586 * v / sh->k;
        double rv = sh->kind == SHAPE_STAR && (v & 1) ? 0.45 * r : r;
        sh->xy[2 * v] = round((cx + rv * cos(a)) * 100) / 100;
        sh->xy[2 * v + 1] = round((cy + rv * sin(a)) * 100) / 100;
    }
}

static void rasterize(const shape *sh, double cx, double cy, double r, int h, int w, uint8_t *mask) {
    if (sh->kind == SHAPE_CIRCLE) {
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                double dx = x + 0.5 - cx, dy = y + 0.5 - cy;
                mask[(size_t)y * w + x] = dx * dx + dy * dy <= r * r;
            }
        return;
    }
    mrcnn_rle rle;
    mrcnn_rle_from_polygon(&rle, sh->xy, sh->k, h, w);
    mrcnn_rle_to_mask(&rle, mask);
    mrcnn_rle_free(&rle);
}

static void write_rle_counts(FILE *f, const mrcnn_rle *r) {
    fprintf(f, "{\"size\": [%lld, %lld], \"counts\": [", (long long)r->h, (long long)r->w);
    for (int64_t i = 0; i < r->m; i++) fprintf(f, "%s%u", i ? ", " : "", r->cnts[i]);
    fprintf(f, "]}");
}

typedef struct {
    FILE *images, *anns; // JSON fragments (memory streams)
    int64_t n_images, n_anns;
    int64_t next_ann_id;
} split_out;

/* One image: draw, save the JPEG, append its JSON records. */
static void add_noise(uint8_t *rgb, size_t n, int amp, uint64_t seed, int split, int64_t index) {
    const mrcnn_rng r = mrcnn_rng_make(seed, (uint32_t)split + 16, index, MRCNN_RNG_SYNTH);
    uint32_t block[4];
    for (size_t i = 0; i < n; i++) {
        if ((i & 15) == 0) mrcnn_philox4x32(&r, (uint32_t)(i >> 4), block);
        const int byte = (int)((block[(i >> 2) & 3] >> (8 * (i & 3))) & 255u);
        int v = rgb[i] + byte % (2 * amp + 1) - amp;
        rgb[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

/* A crowd region (painted first, so that the objects may hide part of it): 5-12
 * small shapes of one kind in one colour clustered in a disc, annotated as ONE
 * iscrowd = 1 region (their union), as COCO annotates a crowd. Returns its area. */
static int64_t paint_crowd(const shapes_opts *op, stream *s, shape *sh, const uint8_t c0[3], int h, int w,
                           uint8_t *mask) {
    const double smin = h < w ? h : w;
    sh->crowd = 1;
    sh->k = 0;
    sh->kind = below(s, op->classes);
    do {
        for (int c = 0; c < 3; c++) sh->color[c] = (uint8_t)below(s, 256);
    } while (abs(sh->color[0] - c0[0]) + abs(sh->color[1] - c0[1]) + abs(sh->color[2] - c0[2]) < 120);
    const double R = smin * (0.08 + 0.08 * uni(s));
    const double cx = R + (w - 2 * R) * uni(s), cy = R + (h - 2 * R) * uni(s);
    const int parts = 5 + below(s, 8);
    uint8_t *part = MRCNN_MALLOC((size_t)h * w, "crowd part");
    memset(mask, 0, (size_t)h * w);
    for (int q = 0; q < parts; q++) {
        const double rp = smin * (0.015 + 0.02 * uni(s));
        double px = cx + R * (2 * uni(s) - 1), py = cy + R * (2 * uni(s) - 1);
        px = px < rp ? rp : px > w - rp ? w - rp : px;
        py = py < rp ? rp : py > h - rp ? h - rp : py;
        shape p = {.kind = sh->kind};
        polygon(&p, px, py, rp, 6.283185307179586 * uni(s));
        rasterize(&p, px, py, rp, h, w, part);
        for (size_t i = 0; i < (size_t)h * w; i++) mask[i] |= part[i];
    }
    free(part);
    int64_t area = 0;
    for (size_t i = 0; i < (size_t)h * w; i++) area += mask[i];
    return area;
}

/* The objects of one image, in painting order: a later one hides what it covers. */
typedef struct {
    shape shapes[MAX_SHAPES];
    int64_t visible[MAX_SHAPES], full[MAX_SHAPES]; // pixels: not hidden, and as drawn
    int n;
} scene;

/* Background: a vertical gradient between two random colours (c0: the top one). */
static void paint_background(stream *s, int h, int w, uint8_t c0[3], uint8_t *rgb) {
    uint8_t c1[3];
    for (int c = 0; c < 3; c++) c0[c] = (uint8_t)below(s, 256), c1[c] = (uint8_t)below(s, 256);
    for (int y = 0; y < h; y++) {
        double t = h > 1 ? (double)y / (h - 1) : 0;
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                rgb[((size_t)y * w + x) * 3 + c] = (uint8_t)lrint(c0[c] * (1 - t) + c1[c] * t);
    }
}

/* Pixels where mask is set become object n's: its colour, its owner index. */
static void paint_owner(const uint8_t *mask, size_t pixels, int n, const uint8_t color[3], uint8_t *rgb, int8_t *owner) {
    for (size_t p = 0; p < pixels; p++)
        if (mask[p]) {
            owner[p] = (int8_t)n;
            memcpy(rgb + 3 * p, color, 3);
        }
}

/* One placement attempt of a shape over the scene: kept (returns 1) unless it is under 16
 * pixels or hides more than op->occlusion of an earlier object's visible pixels. */
static int place_shape(const shapes_opts *op, stream *s, scene *sc, const uint8_t c0[3], int h, int w, uint8_t *rgb,
                       int8_t *owner, uint8_t *mask) {
    const int n = sc->n;
    const double smin = h < w ? h : w;
    shape *sh = &sc->shapes[n];
    sh->kind = below(s, op->classes);
    const double r = smin * (op->scale_lo + op->scale_span * uni(s));
    const double cx = r + (w - 2 * r) * uni(s), cy = r + (h - 2 * r) * uni(s);
    const double theta = 6.283185307179586 * uni(s);
    sh->crowd = 0;
    polygon(sh, cx, cy, r, theta);
    do {
        for (int c = 0; c < 3; c++) sh->color[c] = (uint8_t)below(s, 256);
    } while (abs(sh->color[0] - c0[0]) + abs(sh->color[1] - c0[1]) + abs(sh->color[2] - c0[2]) < 120);
    rasterize(sh, cx, cy, r, h, w, mask);
    int64_t lost[MAX_SHAPES] = {0}, area = 0;
    for (size_t p = 0; p < (size_t)h * w; p++)
        if (mask[p]) {
            area++;
            if (owner[p] >= 0) lost[owner[p]]++;
        }
    int ok = area >= 16;
    for (int j = 0; j < n && ok; j++)
        ok = op->occlusion == 0.5 ? 2 * (sc->visible[j] - lost[j]) >= sc->visible[j]
                                  : (double)(sc->visible[j] - lost[j]) >= (1.0 - op->occlusion) * (double)sc->visible[j];
    if (!ok) return 0;
    for (int j = 0; j < n; j++) sc->visible[j] -= lost[j];
    sc->visible[n] = sc->full[n] = area;
    paint_owner(mask, (size_t)h * w, n, sh->color, rgb, owner);
    sc->n++;
    return 1;
}

/* The objects of one image: maybe none (empty_pct), maybe a crowd region first
 * (crowd_pct), then up to `want` shapes in at most 12 attempts each. */
static void place_objects(const shapes_opts *op, stream *s, scene *sc, const uint8_t c0[3], int h, int w, uint8_t *rgb,
                          int8_t *owner, uint8_t *mask) {
    memset(owner, -1, (size_t)h * w);
    sc->n = 0;
    const int empty = op->empty_pct > 0 && below(s, 100) < op->empty_pct;
    const int crowd = op->crowd_pct > 0 && below(s, 100) < op->crowd_pct;
    const int want = empty ? 0 : op->min_obj + below(s, op->max_obj - op->min_obj + 1);
    if (crowd && !empty) {
        const int64_t area = paint_crowd(op, s, &sc->shapes[0], c0, h, w, mask);
        if (area >= 16) {
            sc->visible[0] = sc->full[0] = area;
            paint_owner(mask, (size_t)h * w, 0, sc->shapes[0].color, rgb, owner);
            sc->n = 1;
        }
    }
    const int base = sc->n;
    for (int attempt = 0; attempt < 12 * want && sc->n - base < want; attempt++)
        place_shape(op, s, sc, c0, h, w, rgb, owner, mask);
}

/* Object j's annotation (its visible pixels, from owner), in the segmentation format the
 * file header describes. */
static void write_annotation(split_out *o, const scene *sc, int j, int64_t image_id, int64_t index, int h, int w,
                             const int8_t *owner, uint8_t *mask) {
    const shape *sh = &sc->shapes[j];
    for (size_t p = 0; p < (size_t)h * w; p++) mask[p] = owner[p] == j;
    mrcnn_rle rle;
    mrcnn_rle_from_mask(&rle, mask, h, w);
    double bbox[4];
    mrcnn_rle_to_bbox(&rle, bbox);
    fprintf(o->anns, "%s{\"id\": %lld, \"image_id\": %lld, \"category_id\": %lld, \"iscrowd\": %d, ",
            o->n_anns ? ",\n  " : "\n  ", (long long)o->next_ann_id++, (long long)image_id,
            (long long)k_cat_id[sh->kind], sh->crowd);
    fprintf(o->anns, "\"area\": %llu, \"bbox\": [%g, %g, %g, %g], \"segmentation\": ",
            (unsigned long long)mrcnn_rle_area(&rle), bbox[0], bbox[1], bbox[2], bbox[3]);
    const int occluded = sc->visible[j] != sc->full[j];
    if (sh->crowd) {
        write_rle_counts(o->anns, &rle); // COCO writes crowd regions as uncompressed RLE
    } else if (!occluded && sh->kind != SHAPE_CIRCLE) {
        fprintf(o->anns, "[[");
        for (int v = 0; v < 2 * sh->k; v++) fprintf(o->anns, "%s%.2f", v ? ", " : "", sh->xy[v]);
        fprintf(o->anns, "]]");
    } else if (!occluded && (index & 1)) {
        write_rle_counts(o->anns, &rle);
    } else {
        char *str = mrcnn_rle_to_string(&rle);
        fprintf(o->anns, "{\"size\": [%d, %d], \"counts\": ", h, w);
        mrcnn_json_write_string(o->anns, str);
        fprintf(o->anns, "}");
        free(str);
    }
    fprintf(o->anns, "}");
    o->n_anns++;
    mrcnn_rle_free(&rle);
}

static void make_image(const shapes_opts *op, uint64_t seed, int split, int64_t index, int h, int w, int quality, int noise,
                       const char *img_dir, split_out *o, uint8_t *rgb, int8_t *owner, uint8_t *mask) {
    stream s = {mrcnn_rng_make(seed, (uint32_t)split, index, MRCNN_RNG_SYNTH), 0};
    const int64_t image_id = (split == 0 ? 1 : 500001) + 3 * index;
    uint8_t c0[3];
    paint_background(&s, h, w, c0, rgb);
    scene sc;
    place_objects(op, &s, &sc, c0, h, w, rgb, owner, mask);
    if (noise > 0) add_noise(rgb, (size_t)h * w * 3, noise, seed, split, index);
    char name[64], path[4096];
    snprintf(name, sizeof name, "%012lld.jpg", (long long)image_id);
    snprintf(path, sizeof path, "%s/%s", img_dir, name);
    MRCNN_CHECK(prep_jpeg_write(path, rgb, h, w, quality), "cannot write %s", path);

    fprintf(o->images, "%s{\"id\": %lld, \"file_name\": ", o->n_images ? ",\n  " : "\n  ", (long long)image_id);
    mrcnn_json_write_string(o->images, name);
    fprintf(o->images, ", \"height\": %d, \"width\": %d}", h, w);
    o->n_images++;
    for (int j = 0; j < sc.n; j++) write_annotation(o, &sc, j, image_id, index, h, w, owner, mask);
}

static void write_split(const shapes_opts *op, const char *out, const char *split_name, int split, int64_t count, int h, int w,
                        uint64_t seed, int quality, int noise) {
    char img_dir[4096], ann_dir[4096], json_path[4096], tmp_path[4200];
    snprintf(img_dir, sizeof img_dir, "%s/%s", out, split_name);
    snprintf(ann_dir, sizeof ann_dir, "%s/annotations", out);
    prep_mkdirs(img_dir);
    prep_mkdirs(ann_dir);
    split_out o = {0};
    o.next_ann_id = ((int64_t)1 << 32) + (split ? 5000000 : 0) + 11;
    char *ibuf = NULL, *abuf = NULL;
    size_t ilen = 0, alen = 0;
    o.images = open_memstream(&ibuf, &ilen);
    o.anns = open_memstream(&abuf, &alen);
    MRCNN_CHECK(o.images && o.anns, "open_memstream failed");
    uint8_t *rgb = MRCNN_MALLOC((size_t)h * w * 3, "shapes image");
    int8_t *owner = MRCNN_MALLOC((size_t)h * w, "shapes owner map");
    uint8_t *mask = MRCNN_MALLOC((size_t)h * w, "shapes mask");
    for (int64_t i = 0; i < count; i++) make_image(op, seed, split, i, h, w, quality, noise, img_dir, &o, rgb, owner, mask);
    fclose(o.images);
    fclose(o.anns);
    free(rgb);
    free(owner);
    free(mask);

    snprintf(json_path, sizeof json_path, "%s/instances_%s.json", ann_dir, split_name);
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp", json_path);
    FILE *f = fopen(tmp_path, "w");
    MRCNN_CHECK(f, "cannot write %s", tmp_path);
    fprintf(f, "{\"info\": {\"description\": \"mrcnn synthetic shapes\", \"seed\": %llu},\n", (unsigned long long)seed);
    char cats[512];
    int cl = snprintf(cats, sizeof cats, "\"categories\": [");
    for (int k = 0; k < op->classes; k++)
        cl += snprintf(cats + cl, sizeof cats - cl, "%s{\"id\": %lld, \"name\": \"%s\", \"supercategory\": \"shape\"}",
                       k ? ", " : "", (long long)k_cat_id[k], k_cat_name[k]);
    snprintf(cats + cl, sizeof cats - cl, "]");
    if (split == 0) /* annotations first: the converter must not assume COCO's usual order */
        fprintf(f, "\"annotations\": [%.*s],\n\"images\": [%.*s],\n%s}\n", (int)alen, abuf, (int)ilen, ibuf, cats);
    else
        fprintf(f, "%s,\n\"images\": [%.*s],\n\"annotations\": [%.*s]}\n", cats, (int)ilen, ibuf, (int)alen, abuf);
    MRCNN_CHECK(fclose(f) == 0, "cannot write %s", tmp_path);
    MRCNN_CHECK(rename(tmp_path, json_path) == 0, "cannot rename %s", tmp_path);
    mrcnn_info("shapes: %s: %lld images, %lld annotations -> %s", split_name, (long long)o.n_images,
               (long long)o.n_anns, json_path);
    free(ibuf);
    free(abuf);
}

static void shapes_usage(FILE *f) {
    fprintf(f,
            "usage: mrcnn-prep shapes --out DIR [--train N] [--val M] [--size HxW] [--seed S] [--quality Q]\n"
            "Writes a synthetic COCO-format dataset of circles, squares and triangles:\n"
            "  DIR/train/*.jpg, DIR/val/*.jpg, DIR/annotations/instances_{train,val}.json\n"
            "  --train N     training images (default 64)\n"
            "  --val M       validation images (default 16)\n"
            "  --size HxW    image size (default 240x320)\n"
            "  --seed S      seed; the same seed gives the same files (default 42)\n"
            "  --quality Q   JPEG quality (default 90)\n"
            "  --noise A     add uniform pixel noise in [-A, A] (default 0): photo-like JPEG sizes\n"
            "A harder set (the defaults give the original one, byte for byte):\n"
            "  --classes K   shape kinds 1-6: circle, square, triangle, pentagon, hexagon, star\n"
            "                (category ids 1, 3, 7, 8, 10, 12; default 3)\n"
            "  --objects A:B objects per image, uniform in [A, B] (default 2:6)\n"
            "  --scale L:H   radius as a fraction of the short side, uniform in [L, H] (default 0.08:0.25)\n"
            "  --occlusion F a later shape may hide up to F of an earlier one's visible pixels (default 0.5)\n"
            "  --empty P     P%% of the images have no object at all (default 0)\n"
            "  --crowd P     P%% of the images have one crowd region (iscrowd 1: a cluster of small\n"
            "                shapes of one kind, one annotation, uncompressed RLE; default 0)\n"
            "Masks are the visible parts of occluded shapes; categories have ids 1, 3, 7 (8, 10, 12).\n");
}

int prep_cmd_shapes(int argc, char **argv) {
    const char *out = NULL;
    long long n_train = 64, n_val = 16, seed = 42, quality = 90, noise = 0;
    int h = 240, w = 320;
    shapes_opts op = {.classes = 3, .min_obj = 2, .max_obj = 6, .scale_lo = 0.08, .scale_span = 0.17,
                      .occlusion = 0.5, .empty_pct = 0, .crowd_pct = 0};
    for (int i = 1; i < argc; i++) {
        if (prep_is_help(argv[i])) {
            shapes_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--out")) {
            out = prep_arg_value(argc, argv, &i);
        } else if (!strcmp(argv[i], "--train")) {
            n_train = prep_arg_int(argc, argv, &i, 0, 100000000);
        } else if (!strcmp(argv[i], "--val")) {
            n_val = prep_arg_int(argc, argv, &i, 0, 100000000);
        } else if (!strcmp(argv[i], "--seed")) {
            seed = prep_arg_int(argc, argv, &i, 0, (long long)9e18);
        } else if (!strcmp(argv[i], "--noise")) {
            noise = prep_arg_int(argc, argv, &i, 0, 127);
        } else if (!strcmp(argv[i], "--quality")) {
            quality = prep_arg_int(argc, argv, &i, 1, 100);
        } else if (!strcmp(argv[i], "--classes")) {
            op.classes = (int)prep_arg_int(argc, argv, &i, 1, SHAPE_KINDS);
        } else if (!strcmp(argv[i], "--empty")) {
            op.empty_pct = (int)prep_arg_int(argc, argv, &i, 0, 100);
        } else if (!strcmp(argv[i], "--crowd")) {
            op.crowd_pct = (int)prep_arg_int(argc, argv, &i, 0, 100);
        } else if (!strcmp(argv[i], "--objects")) {
            const char *v = prep_arg_value(argc, argv, &i);
            char tail;
            MRCNN_CHECK(sscanf(v, "%d:%d%c", &op.min_obj, &op.max_obj, &tail) == 2 && op.min_obj >= 0 &&
                            op.min_obj <= op.max_obj && op.max_obj <= MAX_SHAPES - 2,
                        "--objects: '%s' is not MIN:MAX with 0 <= MIN <= MAX <= %d", v, MAX_SHAPES - 2);
        } else if (!strcmp(argv[i], "--scale")) {
            const char *v = prep_arg_value(argc, argv, &i);
            double lo, hi;
            char tail;
            MRCNN_CHECK(sscanf(v, "%lf:%lf%c", &lo, &hi, &tail) == 2 && lo >= 0.01 && lo <= hi && hi <= 0.5,
                        "--scale: '%s' is not LO:HI with 0.01 <= LO <= HI <= 0.5", v);
            op.scale_lo = lo;
            // the default written out keeps the default's span literal (0.25 - 0.08 != 0.17 in
            // binary), so `--scale 0.08:0.25` gives the default set byte for byte
            op.scale_span = lo == 0.08 && hi == 0.25 ? 0.17 : hi - lo;
        } else if (!strcmp(argv[i], "--occlusion")) {
            const char *v = prep_arg_value(argc, argv, &i);
            char *end;
            op.occlusion = strtod(v, &end);
            MRCNN_CHECK(*v && !*end && op.occlusion >= 0 && op.occlusion <= 0.95,
                        "--occlusion: '%s' is not a fraction in [0, 0.95]", v);
        } else if (!strcmp(argv[i], "--size")) {
            const char *v = prep_arg_value(argc, argv, &i);
            MRCNN_CHECK(sscanf(v, "%dx%d", &h, &w) == 2 && h >= 32 && w >= 32 && h <= 8192 && w <= 8192,
                        "--size: '%s' is not HxW with sides in [32, 8192]", v);
        } else {
            fprintf(stderr, "mrcnn-prep shapes: unknown option '%s'\n", argv[i]);
            shapes_usage(stderr);
            return 2;
        }
    }
    if (!out) {
        fprintf(stderr, "mrcnn-prep shapes: --out is required\n");
        shapes_usage(stderr);
        return 2;
    }
    write_split(&op, out, "train", 0, n_train, h, w, (uint64_t)seed, (int)quality, (int)noise);
    write_split(&op, out, "val", 1, n_val, h, w, (uint64_t)seed, (int)quality, (int)noise);
    return 0;
}
