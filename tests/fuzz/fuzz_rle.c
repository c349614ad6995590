/* RLE (src/core/rle.c): decode/encode, polygon and box rasterization, merge, IoU, with
 * brute-force oracles on small masks.
 *
 * Input: [mode][h lo][h hi][w lo][w hi][rest]. Sizes are small (<= 64) unless mode bit 7
 * asks for a large side (up to 65535, rasterization only: the polygon grid arithmetic).
 *  mode & 3 == 0: rest is a compressed RLE string; decoded, checked, re-encoded.
 *  mode & 3 == 1: rest are polygon points (int16 pairs / 4) within reach of the image.
 *  mode & 3 == 2: rest is a mask bitmap; encoded, decoded, compared.
 *  mode & 3 == 3: a box from the rest.
 * Every resulting RLE must cover h * w exactly; on small sizes it is also merged and
 * IoU'd against the others made from the same input and compared with pixel counts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "mrcnn/rle.h"

#define SMALL 64

static void mask_of(const mrcnn_rle *r, uint8_t *m) { mrcnn_rle_to_mask(r, m); }

static void check_valid(const mrcnn_rle *r, const char *what) {
    if (!mrcnn_rle_counts_valid(r->h, r->w, r->m, r->cnts))
        fuzz_die("rle: %s gives runs that do not add up to %lld x %lld", what, (long long)r->h, (long long)r->w);
}

static void check_string_roundtrip(const mrcnn_rle *r, const char *what) {
    char *s = mrcnn_rle_to_string(r);
    mrcnn_rle b;
    if (!mrcnn_rle_from_string(&b, s, r->h, r->w)) fuzz_die("rle: to_string of %s does not parse back: '%s'", what, s);
    if (b.m != r->m || (r->m && memcmp(b.cnts, r->cnts, sizeof(uint32_t) * (size_t)r->m)))
        fuzz_die("rle: to_string/from_string of %s changes the runs", what);
    mrcnn_rle_free(&b);
    free(s);
}

/* Pixel-count oracles for merge and IoU (sizes <= SMALL). */
static void check_pair(const mrcnn_rle *a, const mrcnn_rle *b, int crowd) {
    const int64_t n = a->h * a->w;
    uint8_t ma[SMALL * SMALL], mb[SMALL * SMALL], mm[SMALL * SMALL];
    mask_of(a, ma);
    mask_of(b, mb);
    uint64_t ca = 0, ci = 0, cu = 0;
    for (int64_t i = 0; i < n; i++) ca += ma[i], ci += ma[i] && mb[i], cu += ma[i] || mb[i];
    if (mrcnn_rle_area(a) != ca) fuzz_die("rle: area %llu, the mask has %llu pixels", (unsigned long long)mrcnn_rle_area(a), (unsigned long long)ca);
    for (int inter = 0; inter < 2; inter++) {
        mrcnn_rle pair[2] = {*a, *b}, out;
        mrcnn_rle_merge(pair, 2, &out, inter);
        check_valid(&out, inter ? "intersection" : "union");
        mask_of(&out, mm);
        for (int64_t i = 0; i < n; i++)
            if (mm[i] != (inter ? (ma[i] && mb[i]) : (ma[i] || mb[i])))
                fuzz_die("rle: merge (%s) differs from the pixelwise result at pixel %lld", inter ? "and" : "or", (long long)i);
        mrcnn_rle_free(&out);
    }
    double iou = -2;
    uint8_t isc = (uint8_t)crowd;
    mrcnn_rle_iou(a, 1, b, 1, &isc, &iou);
    double want = ci == 0 ? 0 : (double)ci / (double)(crowd ? ca : cu);
    if (iou != want) fuzz_die("rle: iou %.17g, pixel counts give %.17g (inter %llu, union %llu, crowd %d)", iou, want,
                              (unsigned long long)ci, (unsigned long long)cu, crowd);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 5) return 0;
    fuzz_bytes b = {data, size};
    uint8_t mode = fuzz_u8(&b);
    int64_t h = fuzz_u16(&b), w = fuzz_u16(&b);
    const int large = (mode & 0x80) && (mode & 3) == 1;
    if (!large) h %= SMALL + 1, w %= SMALL + 1;
    mrcnn_rle r[3];
    int nr = 0;
    switch (mode & 3) {
    case 0: {
        char *s = malloc(b.n + 1);
        memcpy(s, b.p, b.n);
        s[b.n] = 0;
        if (mrcnn_rle_from_string(&r[nr], s, h, w)) {
            check_valid(&r[nr], "from_string");
            check_string_roundtrip(&r[nr], "a parsed string");
            nr++;
        } else if (r[nr].cnts) {
            fuzz_die("rle: from_string failed but left runs allocated");
        }
        free(s);
        break;
    }
    case 1: {
        int k = (int)(b.n / 4);
        if (k > (large ? 8 : 512)) k = large ? 8 : 512; // a large edge traces up to 15 x 65535 points
        double *xy = malloc(sizeof(double) * 2 * (size_t)(k + 1));
        for (int i = 0; i < k; i++) {
            /* int16 / 4 spans about +-8192; on large sides scale up to reach the far edge. */
            double sx = large ? (double)(w + 64) / 8192.0 * 3 : 0.25, sy = large ? (double)(h + 64) / 8192.0 * 3 : 0.25;
            xy[2 * i] = (int16_t)fuzz_u16(&b) * sx;
            xy[2 * i + 1] = (int16_t)fuzz_u16(&b) * sy;
            if (!mrcnn_coord_in_range(xy[2 * i], w)) xy[2 * i] = fmod(xy[2 * i], (double)w + 1);
            if (!mrcnn_coord_in_range(xy[2 * i + 1], h)) xy[2 * i + 1] = fmod(xy[2 * i + 1], (double)h + 1);
        }
        if (!mrcnn_polygon_in_range(xy, 2 * (int64_t)k, h, w)) fuzz_die("rle: harness made an out-of-range polygon");
        mrcnn_rle_from_polygon(&r[nr], xy, k, h, w);
        check_valid(&r[nr], "from_polygon");
        if (!large) check_string_roundtrip(&r[nr], "a polygon");
        nr++;
        /* Its first three points as a second polygon, for the pair checks. */
        if (k >= 3 && !large) {
            mrcnn_rle_from_polygon(&r[nr], xy, 3, h, w);
            check_valid(&r[nr], "from_polygon (3 points)");
            nr++;
        }
        free(xy);
        break;
    }
    case 2: {
        uint8_t *m = calloc((size_t)(h * w) + 1, 1), *m2 = calloc((size_t)(h * w) + 1, 1);
        for (int64_t i = 0; i < h * w; i++) m[i] = (uint8_t)(b.n ? (b.p[(i / 8) % b.n] >> (i % 8)) & 1 : 0);
        mrcnn_rle_from_mask(&r[nr], m, h, w);
        check_valid(&r[nr], "from_mask");
        mrcnn_rle_to_mask(&r[nr], m2);
        if (memcmp(m, m2, (size_t)(h * w))) fuzz_die("rle: from_mask/to_mask changes the mask");
        check_string_roundtrip(&r[nr], "a mask");
        nr++;
        free(m);
        free(m2);
        break;
    }
    case 3: {
        double bb[4];
        for (int i = 0; i < 4; i++) bb[i] = (int16_t)fuzz_u16(&b) / 64.0;
        if (!mrcnn_bbox_in_range(bb, h, w)) return 0;
        mrcnn_rle_from_bbox(&r[nr], bb, h, w);
        check_valid(&r[nr], "from_bbox");
        nr++;
        break;
    }
    }
    if (!large && nr > 0) {
        double bbox[4];
        for (int i = 0; i < nr; i++) mrcnn_rle_to_bbox(&r[i], bbox);
        /* A second mask of the same size from the tail of the input, then the pair checks. */
        uint8_t m[SMALL * SMALL];
        for (int64_t i = 0; i < h * w; i++) m[i] = (uint8_t)(size ? (data[size - 1 - (size_t)(i / 8) % size] >> (i % 8)) & 1 : 0);
        mrcnn_rle_from_mask(&r[nr], m, h, w);
        nr++;
        for (int i = 0; i < nr; i++)
            for (int j = 0; j < nr; j++) check_pair(&r[i], &r[j], (mode >> 2) & 1);
        /* Merge of all (the polygon path of annotations with several polygons). */
        mrcnn_rle out;
        mrcnn_rle_merge(r, nr, &out, (mode >> 3) & 1);
        check_valid(&out, "merge of all");
        mrcnn_rle_free(&out);
    }
    for (int i = 0; i < nr; i++) mrcnn_rle_free(&r[i]);
    return 0;
}
