/* `mrcnn-prep inspect`: a shard set's summary, its integrity check, and a render of one
 * image with its masks and boxes. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/ids.h"
#include "mrcnn/data.h"
#include "mrcnn/png_write.h"
#include "mrcnn/rle.h"
#include "prep.h"

static void inspect_usage(FILE *f) {
    fprintf(f,
            "usage: mrcnn-prep inspect NAME-index.h5 [--check] [--render IMAGE_INDEX --png OUT.png]\n"
            "Prints the shard set's summary (shards, images, annotations, bytes, categories).\n"
            "  --check            verifies every shard: counts against the index, image byte offsets\n"
            "                     and bounds, annotation ranges, class/category agreement, every RLE\n"
            "                     string (decodes to the image's size) and every image (decodes, size\n"
            "                     matches); exits 1 on any problem\n"
            "  --render I --png F draws global image I with its masks and boxes into F\n");
}

typedef struct {
    int64_t errors;
    const char *path;
} checker;

static void bad(checker *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bad(checker *c, const char *fmt, ...) {
    c->errors++;
    if (c->errors > 20) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "inspect: %s: ", c->path);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* A reader's message without the leading "PATH: " (bad() prints the path already). */
static const char *after_path(const char *err, const char *path) {
    size_t n = strlen(path);
    return !strncmp(err, path, n) && !strncmp(err + n, ": ", 2) ? err + n + 2 : err;
}

/* ids (grown): every annotation id of the set, for the duplicate check across shards. */
typedef struct {
    int64_t *v;
    int64_t n, cap;
} id_list;

static int64_t check_shard(const mrcnn_shard_set *set, int s, id_list *ids) {
    char path[8192], err[1024];
    mrcnn_shard_set_path(set, s, path, sizeof path);
    checker c = {0, path};
    mrcnn_shard sh;
    /* Opening validates every table (and its checksums) and its counts against the
     * index; a damaged table ends the check there, with one line saying what it is. */
    mrcnn_shard_set_open_shard(set, s, &sh, 0);
    int64_t expect_off = 0, expect_ann = 0;
    uint8_t *img = NULL;
    size_t img_cap = 0;
    char *rles = NULL;
    size_t rles_cap = 0;
    for (int64_t i = 0; i < sh.num_images; i++) {
        if (sh.offset[i] != expect_off || sh.length[i] <= 0 || sh.offset[i] + sh.length[i] > sh.image_bytes) {
            bad(&c, "image %lld: bytes [%lld, +%lld) are not where the previous image ended (%lld) or outside %lld",
                (long long)i, (long long)sh.offset[i], (long long)sh.length[i], (long long)expect_off,
                (long long)sh.image_bytes);
            break;
        }
        expect_off += sh.length[i];
        if (sh.name_offset[i] > sh.name_offset[i + 1]) bad(&c, "image %lld: file name offsets out of order", (long long)i);
        if (sh.ann_start[i] != expect_ann || sh.ann_count[i] < 0 || sh.ann_start[i] + sh.ann_count[i] > sh.num_annotations) {
            bad(&c, "image %lld: annotation range [%lld, +%lld) is invalid", (long long)i, (long long)sh.ann_start[i],
                (long long)sh.ann_count[i]);
            break;
        }
        expect_ann += sh.ann_count[i];
        if (!sh.ann_count[i] != !!(sh.flags[i] & MRCNN_IMAGE_FLAG_NO_ANNOTATIONS))
            bad(&c, "image %lld: the no-annotations flag disagrees with its %lld annotations", (long long)i,
                (long long)sh.ann_count[i]);
        size_t len = 0;
        int h = 0, w = 0;
        if (!mrcnn_shard_try_read_image(&sh, i, &img, &img_cap, &len, err, sizeof err))
            bad(&c, "%s", after_path(err, path));
        else if (!mrcnn_image_check(img, len, &h, &w, err, sizeof err))
            bad(&c, "image %lld (id %lld): %s", (long long)i, (long long)sh.image_id[i], err);
        else if (h != sh.height[i] || w != sh.width[i])
            bad(&c, "image %lld: decodes to %dx%d, the table says %dx%d", (long long)i, h, w, sh.height[i], sh.width[i]);
        if (!mrcnn_shard_try_read_rles(&sh, sh.ann_start[i], sh.ann_count[i], &rles, &rles_cap, &len, err, sizeof err)) {
            bad(&c, "%s", after_path(err, path));
            continue;
        }
        const char *r = rles;
        for (int64_t a = sh.ann_start[i]; a < sh.ann_start[i] + sh.ann_count[i]; a++) {
            if (ids->n == ids->cap) {
                ids->cap = ids->cap ? 2 * ids->cap : 1024;
                ids->v = MRCNN_REALLOC(ids->v, sizeof(int64_t) * (size_t)ids->cap, "annotation ids");
            }
            ids->v[ids->n++] = sh.ann_id[a];
            if (sh.ann_image[a] != i) bad(&c, "annotation %lld: image %lld, expected %lld", (long long)a, (long long)sh.ann_image[a], (long long)i);
            int cls = sh.ann_class[a];
            if (cls < 0 || cls >= set->num_classes || set->category_ids[cls] != sh.ann_category_id[a])
                bad(&c, "annotation %lld: class %d does not map to category %lld", (long long)a, cls,
                    (long long)sh.ann_category_id[a]);
            const float *b = sh.ann_bbox + 4 * a;
            const double bd[4] = {b[0], b[1], b[2], b[3]};
            if (!(b[2] > 0 && b[3] > 0)) bad(&c, "annotation %lld: box without area", (long long)a);
            else if (!(b[2] >= MRCNN_MIN_BOX_SIDE && b[3] >= MRCNN_MIN_BOX_SIDE))
                bad(&c, "annotation %lld (id %lld): box [%g, %g, %g, %g] is under %g pixel wide or high (training cannot "
                    "use it; the converter skips such boxes)", (long long)a, (long long)sh.ann_id[a], bd[0], bd[1], bd[2],
                    bd[3], MRCNN_MIN_BOX_SIDE);
            else if (!mrcnn_bbox_in_range(bd, sh.height[i], sh.width[i]))
                bad(&c, "annotation %lld: box [%g, %g, %g, %g] is not finite or out of range", (long long)a, bd[0], bd[1],
                    bd[2], bd[3]);
            if (!isfinite(sh.ann_area[a]) || sh.ann_area[a] < 0)
                bad(&c, "annotation %lld: area %g is not finite and >= 0", (long long)a, sh.ann_area[a]);
            mrcnn_rle rle;
            if (!mrcnn_rle_from_string(&rle, r, sh.height[i], sh.width[i]))
                bad(&c, "annotation %lld (id %lld): RLE string does not decode to %dx%d", (long long)a,
                    (long long)sh.ann_id[a], sh.height[i], sh.width[i]);
            else
                mrcnn_rle_free(&rle);
            r += strlen(r) + 1;
        }
    }
    if (c.errors == 0 && expect_off != sh.image_bytes) bad(&c, "%lld image bytes unaccounted for", (long long)(sh.image_bytes - expect_off));
    if (c.errors == 0 && expect_ann != sh.num_annotations) bad(&c, "annotations not covered by any image");
    if (c.errors == 0 && sh.rle_offset[sh.num_annotations] != sh.rle_bytes) bad(&c, "RLE bytes unaccounted for");
    free(img);
    free(rles);
    mrcnn_shard_close(&sh);
    printf("  check %-40s %s\n", set->files[s], c.errors ? "FAILED" : "ok");
    return c.errors;
}

static void render(const mrcnn_shard_set *set, int64_t g, const char *png) {
    MRCNN_CHECK(g >= 0 && g < set->num_images, "--render %lld: the set has %lld images", (long long)g, (long long)set->num_images);
    int s = 0;
    while (set->image_base[s + 1] <= g) s++;
    const int64_t i = g - set->image_base[s];
    char err[512];
    mrcnn_shard sh;
    mrcnn_shard_set_open_shard(set, s, &sh, 0);
    uint8_t *img = NULL, *rgb = NULL;
    size_t img_cap = 0, rgb_cap = 0;
    size_t len = mrcnn_shard_read_image(&sh, i, &img, &img_cap);
    int h = 0, w = 0;
    MRCNN_CHECK(mrcnn_image_decode(img, len, &rgb, &rgb_cap, &h, &w, err, sizeof err), "image %lld: %s", (long long)g, err);
    char *rles = NULL;
    size_t rles_cap = 0;
    mrcnn_shard_read_rles(&sh, sh.ann_start[i], sh.ann_count[i], &rles, &rles_cap);
    uint8_t *mask = MRCNN_MALLOC((size_t)h * w, "mask");
    const char *r = rles;
    for (int64_t k = 0; k < sh.ann_count[i]; k++, r += strlen(r) + 1) {
        const int64_t a = sh.ann_start[i] + k;
        /* A colour per class, from a fixed palette. */
        static const uint8_t pal[8][3] = {{230, 25, 75}, {60, 180, 75}, {255, 225, 25}, {0, 130, 200},
                                          {245, 130, 48}, {145, 30, 180}, {70, 240, 240}, {240, 50, 230}};
        const uint8_t *col = pal[(sh.ann_class[a] + 8) % 8];
        mrcnn_rle rle;
        if (mrcnn_rle_from_string(&rle, r, h, w)) {
            mrcnn_rle_to_mask(&rle, mask);
            mrcnn_rle_free(&rle);
            for (size_t p = 0; p < (size_t)h * w; p++)
                if (mask[p])
                    for (int c = 0; c < 3; c++) rgb[3 * p + c] = (uint8_t)((rgb[3 * p + c] + col[c]) / 2);
        }
        const float *b = sh.ann_bbox + 4 * a;
        int x0 = (int)b[0], y0 = (int)b[1], x1 = (int)(b[0] + b[2]), y1 = (int)(b[1] + b[3]);
        for (int y = y0; y <= y1; y++)
            for (int x = x0; x <= x1; x++) {
                if (x < 0 || y < 0 || x >= w || y >= h) continue;
                if (x != x0 && x != x1 && y != y0 && y != y1) continue;
                memcpy(rgb + 3 * ((size_t)y * w + x), col, 3);
            }
    }
    MRCNN_CHECK(mrcnn_png_write_rgb(png, rgb, h, w, NULL, err, sizeof err), "%s", err);
    printf("rendered image %lld (id %lld, %s, %dx%d, %lld annotations) to %s\n", (long long)g, (long long)sh.image_id[i],
           set->files[s], w, h, (long long)sh.ann_count[i], png);
    free(mask);
    free(img);
    free(rgb);
    free(rles);
    mrcnn_shard_close(&sh);
}

int prep_cmd_inspect(int argc, char **argv) {
    const char *index = NULL, *png = NULL;
    int check = 0;
    long long render_index = -1;
    for (int i = 1; i < argc; i++) {
        if (prep_is_help(argv[i])) {
            inspect_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--check")) {
            check = 1;
        } else if (!strcmp(argv[i], "--render")) {
            render_index = prep_arg_int(argc, argv, &i, 0, (long long)9e18);
        } else if (!strcmp(argv[i], "--png")) {
            png = prep_arg_value(argc, argv, &i);
        } else if (argv[i][0] != '-' && !index) {
            index = argv[i];
        } else {
            fprintf(stderr, "mrcnn-prep inspect: unknown option '%s'\n", argv[i]);
            inspect_usage(stderr);
            return 2;
        }
    }
    if (!index || (render_index >= 0) != (png != NULL)) {
        fprintf(stderr, "mrcnn-prep inspect: %s\n", !index ? "the index file is required" : "--render and --png go together");
        inspect_usage(stderr);
        return 2;
    }
    mrcnn_shard_set set;
    mrcnn_shard_set_open(&set, index);
    int64_t bytes = 0;
    for (int s = 0; s < set.num_shards; s++) bytes += set.shard_bytes[s];
    printf("shard set %s (schema %d): %d shards, %lld images, %lld annotations, %.1f MB of images, %d classes\n",
           set.name, MRCNN_SHARD_SCHEMA_VERSION, set.num_shards, (long long)set.num_images,
           (long long)set.num_annotations, bytes / 1e6, set.num_classes);
    for (int s = 0; s < set.num_shards; s++)
        printf("  %-40s %8lld images %9lld annotations %13lld bytes\n", set.files[s], (long long)set.shard_images[s],
               (long long)set.shard_annotations[s], (long long)set.shard_bytes[s]);
    printf("  categories (class index: id name [supercategory]):");
    for (int c = 0; c < set.num_classes; c++)
        printf("%s%d: %lld %s [%s]", c % 4 ? ", " : "\n    ", c, (long long)set.category_ids[c], set.category_names[c],
               set.category_supercategories[c]);
    printf("\n");
    int rc = 0;
    if (check) {
        int64_t errors = 0;
        id_list ids = {0};
        for (int s = 0; s < set.num_shards; s++) errors += check_shard(&set, s, &ids);
        /* The same rule as evaluation's (mrcnn/ids.h), which refuses the set otherwise. */
        int64_t id = 0, first = 0, again = 0, dups = mrcnn_ids_duplicates(ids.v, ids.n, NULL, &id, &first, &again);
        if (dups)
            printf("  %lld duplicate annotation ids (id %lld: annotations %lld and %lld of the set): evaluation refuses "
                   "them; convert again with mrcnn-prep coco, which keeps the first\n",
                   (long long)dups, (long long)id, (long long)first, (long long)again);
        errors += dups;
        free(ids.v);
        printf("check: %s (%lld problems)\n", errors ? "FAILED" : "ok", (long long)errors);
        rc = errors ? 1 : 0;
    }
    if (render_index >= 0) render(&set, render_index, png);
    mrcnn_shard_set_free(&set);
    return rc;
}
