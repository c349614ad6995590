/* COCO run-length encoding (contract in include/mrcnn/rle.h). Every function follows
 * pycocotools' maskApi arithmetic step for step, including its 32-bit unsigned
 * wrap-arounds and the 5x upsampled polygon rasterizer, because evaluation numbers
 * must match pycocotools bit for bit. */
#include "mrcnn/rle.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"

int mrcnn_coord_in_range(double v, int64_t size) {
    const double s = (size < 0 ? MRCNN_MAX_IMAGE_SIDE : (double)size) + MRCNN_COORD_SLACK;
    return isfinite(v) && v >= -s && v <= 2 * s - MRCNN_COORD_SLACK; // NaN fails every comparison
}

int mrcnn_bbox_in_range(const double b[4], int64_t h, int64_t w) {
    return mrcnn_coord_in_range(b[0], w) && mrcnn_coord_in_range(b[1], h) && isfinite(b[2]) && isfinite(b[3]) &&
           mrcnn_coord_in_range(b[0] + b[2], w) && mrcnn_coord_in_range(b[1] + b[3], h);
}

int mrcnn_polygon_in_range(const double *xy, int64_t n, int64_t h, int64_t w) {
    for (int64_t i = 0; i < n; i++)
        if (!mrcnn_coord_in_range(xy[i], i % 2 ? h : w)) return 0;
    return 1;
}

static int side_ok(int64_t v) { return v >= 0 && v <= MRCNN_MAX_IMAGE_SIDE; }

int mrcnn_rle_counts_valid(int64_t h, int64_t w, int64_t m, const uint32_t *cnts) {
    if (!side_ok(h) || !side_ok(w) || m < 0) return 0;
    uint64_t total = 0;
    for (int64_t i = 0; i < m; i++) total += cnts[i];
    return total == (uint64_t)(h * w);
}

void mrcnn_rle_init(mrcnn_rle *r, int64_t h, int64_t w, int64_t m, const uint32_t *cnts) {
    r->h = h;
    r->w = w;
    r->m = m;
    r->cnts = m > 0 ? MRCNN_MALLOC(sizeof(uint32_t) * (size_t)m, "rle counts") : NULL;
    if (cnts && m > 0) memcpy(r->cnts, cnts, sizeof(uint32_t) * (size_t)m);
}

void mrcnn_rle_free(mrcnn_rle *r) {
    free(r->cnts);
    r->cnts = NULL;
    r->m = 0;
}

void mrcnn_rle_from_mask(mrcnn_rle *r, const uint8_t *mask, int64_t h, int64_t w) {
    /* At most one run per pixel plus the leading zero run. */
    uint32_t *cnts = MRCNN_MALLOC(sizeof(uint32_t) * (size_t)(h * w + 1), "rle encode runs");
    int64_t k = 0;
    uint32_t c = 0;
    int v = 0;
    for (int64_t x = 0; x < w; x++) {
        for (int64_t y = 0; y < h; y++) { // column-major walk of a row-major mask
            int p = mask[y * w + x] != 0;
            if (p != v) {
                cnts[k++] = c;
                c = 0;
                v = p;
            }
            c++;
        }
    }
    cnts[k++] = c;
    mrcnn_rle_init(r, h, w, k, cnts);
    free(cnts);
}

void mrcnn_rle_to_mask(const mrcnn_rle *r, uint8_t *mask) {
    int64_t h = r->h, w = r->w, n = h * w, i = 0;
    uint8_t v = 0;
    for (int64_t j = 0; j < r->m; j++, v = !v) {
        for (uint32_t k = 0; k < r->cnts[j] && i < n; k++, i++) mask[(i % h) * w + i / h] = v;
    }
    for (; i < n; i++) mask[(i % h) * w + i / h] = 0;
}

uint64_t mrcnn_rle_area(const mrcnn_rle *r) {
    uint64_t a = 0;
    for (int64_t j = 1; j < r->m; j += 2) a += r->cnts[j];
    return a;
}

/* pycocotools computes in 32-bit unsigned ints; an all-background RLE with >= 2 runs
 * thereby gets a huge width, and we keep that. */
void mrcnn_rle_to_bbox(const mrcnn_rle *r, double bbox[4]) {
    uint32_t h = (uint32_t)r->h, w = (uint32_t)r->w;
    int64_t m = (r->m / 2) * 2;
    if (m == 0 || h == 0) { // h == 0 would divide by zero in maskApi
        bbox[0] = bbox[1] = bbox[2] = bbox[3] = 0;
        return;
    }
    uint32_t xs = w, ys = h, xe = 0, ye = 0, cc = 0, xp = 0;
    for (int64_t j = 0; j < m; j++) {
        cc += r->cnts[j];
        uint32_t t = cc - (uint32_t)(j % 2); // first pixel of a foreground run, or its last
        uint32_t y = t % h, x = (t - y) / h;
        if (j % 2 == 0) xp = x;
        else if (xp < x) { // the run wraps into the next column: it covers full height
            ys = 0;
            ye = h - 1;
        }
        if (x < xs) xs = x;
        if (x > xe) xe = x;
        if (y < ys) ys = y;
        if (y > ye) ye = y;
    }
    bbox[0] = xs;
    bbox[2] = (uint32_t)(xe - xs + 1);
    bbox[1] = ys;
    bbox[3] = (uint32_t)(ye - ys + 1);
}

void mrcnn_rle_from_bbox(mrcnn_rle *r, const double bbox[4], int64_t h, int64_t w) {
    double xs = bbox[0], xe = xs + bbox[2];
    double ys = bbox[1], ye = ys + bbox[3];
    double xy[8] = {xs, ys, xs, ye, xe, ye, xe, ys};
    mrcnn_rle_from_polygon(r, xy, 4, h, w);
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x > y ? 1 : x < y ? -1 : 0;
}

/* The polygon's edges traced on the fine grid into (u, v), one point per step along the
 * longer axis of each edge; returns the number of points. */
static int64_t trace_outline(const int *x, const int *y, int k, int *u, int *v) {
    int64_t m = 0;
    for (int j = 0; j < k; j++) {
        int xs = x[j], xe = x[j + 1], ys = y[j], ye = y[j + 1];
        int dx = abs(xe - xs), dy = abs(ys - ye);
        int flip = (dx >= dy && xs > xe) || (dx < dy && ys > ye);
        if (flip) {
            int t = xs;
            xs = xe, xe = t;
            t = ys;
            ys = ye, ye = t;
        }
        if (dx >= dy) {
            double s = (double)(ye - ys) / dx;
            for (int d = 0; d <= dx; d++) {
                int t = flip ? dx - d : d;
                u[m] = t + xs;
                /* a zero-length edge makes s 0/0 = NaN; maskApi converts that to int, which
                 * x86 makes INT_MIN: the same value, without the undefined conversion */
                v[m] = dx ? (int)(ys + s * t + .5) : INT_MIN;
                m++;
            }
        } else {
            double s = (double)(xe - xs) / dy;
            for (int d = 0; d <= dy; d++) {
                int t = flip ? dy - d : d;
                v[m] = t + ys;
                u[m] = (int)(xs + s * t + .5);
                m++;
            }
        }
    }
    return m;
}

/* Rasterizes like maskApi's rleFrPoly: the outline is traced on a 5x finer grid, the
 * points where it crosses pixel-column centres become run boundaries. */
void mrcnn_rle_from_polygon(mrcnn_rle *r, const double *xy, int k, int64_t h, int64_t w) {
    /* In range, 5 * x + .5 fits an int and the traced outline stays short (at most
     * 15 * max(h, w) + 1 points an edge); outside it, the int casts below overflow. */
    MRCNN_CHECK(side_ok(h) && side_ok(w) && k >= 0 && mrcnn_polygon_in_range(xy, 2 * (int64_t)k, h, w),
                "polygon of %d points on a %lldx%lld mask: a coordinate is not finite or more than an image size "
                "outside the image (the caller must check its input)", k, (long long)h, (long long)w);
    if (h == 0 || w == 0) {
        /* maskApi's unsigned w - 1 wraps here and its runs miss h x w; an empty canvas has one
         * zero-length run, as mrcnn_rle_from_mask gives it. */
        const uint32_t zero = 0;
        mrcnn_rle_init(r, h, w, 1, &zero);
        return;
    }
    const double scale = 5;
    int *x = MRCNN_MALLOC(sizeof(int) * (size_t)(k + 1), "polygon x");
    int *y = MRCNN_MALLOC(sizeof(int) * (size_t)(k + 1), "polygon y");
    for (int j = 0; j < k; j++) {
        x[j] = (int)(scale * xy[2 * j] + .5); // truncation toward zero, as the C cast does
        y[j] = (int)(scale * xy[2 * j + 1] + .5);
    }
    if (k > 0) {
        x[k] = x[0];
        y[k] = y[0];
    }
    int64_t npts = 0;
    for (int j = 0; j < k; j++) {
        int dx = abs(x[j] - x[j + 1]), dy = abs(y[j] - y[j + 1]);
        npts += (dx > dy ? dx : dy) + 1;
    }
    int *u = MRCNN_MALLOC(sizeof(int) * (size_t)(npts + 1), "polygon trace u");
    int *v = MRCNN_MALLOC(sizeof(int) * (size_t)(npts + 1), "polygon trace v");
    int64_t m = trace_outline(x, y, k, u, v);
    /* Keep the crossings of column centres, moved back to the pixel grid. */
    int64_t nb = 0;
    uint32_t *a = MRCNN_MALLOC(sizeof(uint32_t) * (size_t)(m + 1), "polygon boundaries");
    for (int64_t j = 1; j < m; j++) {
        if (u[j] == u[j - 1]) continue;
        double xd = (double)(u[j] < u[j - 1] ? u[j] : u[j] - 1);
        xd = (xd + .5) / scale - .5;
        if (floor(xd) != xd || xd < 0 || xd > (double)(uint64_t)(w - 1)) continue; // maskApi's unsigned w-1
        double yd = (double)(v[j] < v[j - 1] ? v[j] : v[j - 1]);
        yd = (yd + .5) / scale - .5;
        if (yd < 0) yd = 0;
        else if (yd > (double)h) yd = (double)h;
        yd = ceil(yd);
        a[nb++] = (uint32_t)xd * (uint32_t)h + (uint32_t)yd; // < 2^32 for sides <= 65535; no int overflow
    }
    a[nb++] = (uint32_t)(h * w);
    free(x), free(y), free(u), free(v);
    qsort(a, (size_t)nb, sizeof(uint32_t), cmp_u32);
    uint32_t prev = 0;
    for (int64_t j = 0; j < nb; j++) {
        uint32_t t = a[j];
        a[j] -= prev;
        prev = t;
    }
    /* Zero-length runs fuse their neighbours. */
    uint32_t *b = MRCNN_MALLOC(sizeof(uint32_t) * (size_t)nb, "polygon runs");
    int64_t mb = 0, j = 0;
    b[mb++] = a[j++];
    while (j < nb) {
        if (a[j] > 0) {
            b[mb++] = a[j++];
        } else {
            j++;
            if (j < nb) b[mb - 1] += a[j++];
        }
    }
    mrcnn_rle_init(r, h, w, mb, b);
    free(a);
    free(b);
}

/* Folds the masks in one by one, walking two run lists in step. */
void mrcnn_rle_merge(const mrcnn_rle *rs, int n, mrcnn_rle *out, int intersect) {
    if (n == 0) {
        mrcnn_rle_init(out, 0, 0, 0, NULL);
        return;
    }
    int64_t h = rs[0].h, w = rs[0].w, m = rs[0].m;
    if (n == 1) {
        mrcnn_rle_init(out, h, w, m, rs[0].cnts);
        return;
    }
    for (int i = 1; i < n; i++)
        MRCNN_CHECK(rs[i].h == h && rs[i].w == w, "rle merge: mask %d is %lldx%lld but mask 0 is %lldx%lld", i,
                    (long long)rs[i].h, (long long)rs[i].w, (long long)h, (long long)w);
    for (int i = 0; i < n; i++)
        MRCNN_CHECK(rs[i].m > 0 || h * w == 0, "rle merge: mask %d of %lldx%lld has no runs", i, (long long)h,
                    (long long)w);
    if (h * w == 0) {
        const uint32_t zero = 0; // the walk below starts from each mask's first run, which may not exist
        mrcnn_rle_init(out, h, w, 1, &zero);
        return;
    }
    /* Zero-length runs are legal, so a mask may hold more runs than pixels, and a fold
     * emits at most as many runs as its two inputs hold: size for that, not for h * w. */
    int64_t cap = h * w + 1;
    for (int i = 0; i < n; i++) cap += rs[i].m;
    uint32_t *acc = MRCNN_MALLOC(sizeof(uint32_t) * (size_t)cap, "rle merge runs");
    uint32_t *tmp = MRCNN_MALLOC(sizeof(uint32_t) * (size_t)cap, "rle merge runs");
    if (m > 0) memcpy(acc, rs[0].cnts, sizeof(uint32_t) * (size_t)m);
    for (int i = 1; i < n; i++) {
        const mrcnn_rle *B = &rs[i];
        int64_t am = m, a = 1, b = 1;
        uint32_t ca = acc[0], cb = B->cnts[0], cc = 0, ct = 1;
        int va = 0, vb = 0, v = 0;
        m = 0;
        while (ct > 0) {
            uint32_t c = ca < cb ? ca : cb;
            cc += c;
            ct = 0;
            /* Skip every zero-length run, not just one: two masks both between runs would
             * otherwise read ct == 0 and end the walk early. */
            ca -= c;
            while (!ca && a < am) ca = acc[a++], va = !va;
            ct += ca;
            cb -= c;
            while (!cb && b < B->m) cb = B->cnts[b++], vb = !vb;
            ct += cb;
            if ((!ca && a >= am && cb) || (!cb && b >= B->m && ca)) break; // sums differ: no progress possible
            int vp = v;
            v = intersect ? (va && vb) : (va || vb);
            if (v != vp || ct == 0) {
                tmp[m++] = cc;
                cc = 0;
            }
        }
        uint32_t *t = acc;
        acc = tmp, tmp = t;
    }
    mrcnn_rle_init(out, h, w, m, acc);
    free(acc);
    free(tmp);
}

void mrcnn_bbox_iou(const double *dt, int m, const double *gt, int n, const uint8_t *iscrowd,
                    double *iou) {
    for (int g = 0; g < n; g++) {
        const double *G = gt + 4 * g;
        double ga = G[2] * G[3];
        int crowd = iscrowd && iscrowd[g];
        for (int d = 0; d < m; d++) {
            const double *D = dt + 4 * d;
            double da = D[2] * D[3];
            double *o = &iou[(int64_t)d * n + g];
            *o = 0;
            double iw = fmin(D[2] + D[0], G[2] + G[0]) - fmax(D[0], G[0]);
            if (iw <= 0) continue;
            double ih = fmin(D[3] + D[1], G[3] + G[1]) - fmax(D[1], G[1]);
            if (ih <= 0) continue;
            double inter = iw * ih;
            double uni = crowd ? da : da + ga - inter;
            *o = inter / uni;
        }
    }
}

/* Intersection and union pixel counts of two RLEs of one size, in maskApi's uint32. */
static void rle_inter_union(const mrcnn_rle *A, const mrcnn_rle *B, uint32_t *inter, uint32_t *uni) {
    uint32_t ca = A->cnts[0], cb = B->cnts[0], i = 0, u = 0, ct = 1;
    int64_t a = 1, b = 1;
    int va = 0, vb = 0;
    while (ct > 0) {
        uint32_t c = ca < cb ? ca : cb;
        if (va || vb) {
            u += c;
            if (va && vb) i += c;
        }
        ct = 0;
        ca -= c;
        if (!ca && a < A->m) ca = A->cnts[a++], va = !va;
        ct += ca;
        cb -= c;
        if (!cb && b < B->m) cb = B->cnts[b++], vb = !vb;
        ct += cb;
        /* Runs that do not add up to h * w (rejected where RLE is read) would leave one
         * side exhausted and the other stuck: stop rather than loop forever. */
        if ((!ca && a >= A->m && cb) || (!cb && b >= B->m && ca)) break;
    }
    *inter = i;
    *uni = u;
}

void mrcnn_rle_iou(const mrcnn_rle *dt, int m, const mrcnn_rle *gt, int n, const uint8_t *iscrowd,
                   double *iou) {
    /* maskApi only walks the runs where the boxes overlap; an empty box pair gives 0. */
    double *db = MRCNN_MALLOC(sizeof(double) * 4 * (size_t)(m > 0 ? m : 1), "rle iou dt boxes");
    double *gb = MRCNN_MALLOC(sizeof(double) * 4 * (size_t)(n > 0 ? n : 1), "rle iou gt boxes");
    for (int d = 0; d < m; d++) mrcnn_rle_to_bbox(&dt[d], db + 4 * d);
    for (int g = 0; g < n; g++) mrcnn_rle_to_bbox(&gt[g], gb + 4 * g);
    mrcnn_bbox_iou(db, m, gb, n, iscrowd, iou);
    for (int g = 0; g < n; g++) {
        int crowd = iscrowd && iscrowd[g];
        for (int d = 0; d < m; d++) {
            double *o = &iou[(int64_t)d * n + g];
            if (!(*o > 0)) continue;
            if (dt[d].h != gt[g].h || dt[d].w != gt[g].w) {
                *o = -1;
                continue;
            }
            uint32_t i, u;
            rle_inter_union(&dt[d], &gt[g], &i, &u);
            if (i == 0) u = 1;
            else if (crowd) u = (uint32_t)mrcnn_rle_area(&dt[d]);
            *o = (double)i / (double)u;
        }
    }
    free(db);
    free(gb);
}

/* LEB128-like with 6 bits a char (5 data bits + continuation) offset into '0'..'o';
 * from the third run on, the difference to the run two before is stored. */
char *mrcnn_rle_to_string(const mrcnn_rle *r) {
    char *s = MRCNN_MALLOC((size_t)r->m * 7 + 1, "rle string");
    size_t p = 0;
    for (int64_t i = 0; i < r->m; i++) {
        long long x = (long long)r->cnts[i];
        if (i > 2) x -= (long long)r->cnts[i - 2];
        int more = 1;
        while (more) {
            char c = (char)(x & 0x1f);
            x >>= 5; // arithmetic shift: negative differences keep their sign
            more = (c & 0x10) ? x != -1 : x != 0;
            if (more) c |= 0x20;
            s[p++] = (char)(c + 48);
        }
    }
    s[p] = 0;
    return s;
}

int mrcnn_rle_from_string(mrcnn_rle *r, const char *s, int64_t h, int64_t w) {
    r->h = r->w = r->m = 0;
    r->cnts = NULL;
    if (!side_ok(h) || !side_ok(w)) return 0;
    size_t len = strlen(s);
    uint32_t *cnts = MRCNN_MALLOC(sizeof(uint32_t) * (len > 0 ? len : 1), "rle string runs");
    int64_t m = 0;
    uint64_t total = 0;
    size_t p = 0;
    while (p < len) {
        long long x = 0;
        int k = 0, more = 1;
        while (more) {
            if (p >= len || k >= 12) goto bad; // cut short, or more than 60 bits
            int c = (unsigned char)s[p] - 48;
            if (c < 0 || c > 63) goto bad;
            x |= (long long)(c & 0x1f) << (5 * k);
            more = c & 0x20;
            p++;
            k++;
            if (!more && (c & 0x10)) x |= (long long)(~0ULL << (5 * k)); // sign-extend
        }
        if (m > 2) x += (long long)cnts[m - 2];
        if (x < 0 || x > (long long)UINT32_MAX) goto bad;
        cnts[m++] = (uint32_t)x;
        total += (uint64_t)x;
    }
    if (total != (uint64_t)(h * w)) goto bad;
    mrcnn_rle_init(r, h, w, m, cnts);
    free(cnts);
    return 1;
bad:
    free(cnts);
    return 0;
}
