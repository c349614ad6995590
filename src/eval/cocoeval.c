/* COCOeval's evaluate() and accumulate() (pycocotools/cocoeval.py), reproduced
 * operation for operation so that the numbers agree bit for bit:
 *  - ground truth and detections are grouped per (category, image) in file order;
 *  - detections are ordered by score with a stable sort (numpy's mergesort) and cut
 *    at maxDets[-1] = 100 before IoUs are computed;
 *  - per area range, gts are stably ordered non-ignored first and matched greedily
 *    at each IoU threshold (crowd gts match many detections, and an ignored gt only
 *    when no regular one is left);
 *  - accumulation concatenates the images' detections in image-id order, sorts them
 *    stably by score, and builds the 101-point interpolated precision.
 * The (category, image) cells are independent, so evaluate runs them in parallel
 * (OpenMP); the mask IoUs there are what makes pycocotools slow. */
#include "mrcnn/cocoeval.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/log.h"

#define T_ MRCNN_COCO_T
#define R_ MRCNN_COCO_R
#define A_ MRCNN_COCO_A
#define M_ MRCNN_COCO_M

static const double k_area_lo[A_] = {0.0, 0.0, 32.0 * 32.0, 96.0 * 96.0};
static const double k_area_hi[A_] = {1e5 * 1e5, 32.0 * 32.0, 96.0 * 96.0, 1e5 * 1e5};
static const int k_max_dets[M_] = {1, 10, 100};

enum { DT_FP = 0, DT_TP = 1, DT_IGNORED = 2 };

/* np.linspace(start, stop, num): i * step + start, the last one exactly stop. */
static void linspace(double start, double stop, int num, double *out) {
    double step = (stop - start) / (num - 1);
    for (int i = 0; i < num; i++) out[i] = i * step + start;
    out[num - 1] = stop;
}

/* Stable sort of idx[0..n) by key descending (numpy argsort(-key, kind='mergesort')). */
static void sort_desc_stable(int64_t *idx, int64_t n, const double *key, int64_t *tmp) {
    if (n < 2) return;
    for (int64_t width = 1; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t a = lo, b = mid, o = lo;
            while (a < mid && b < hi) tmp[o++] = key[idx[b]] > key[idx[a]] ? idx[b++] : idx[a++];
            while (a < mid) tmp[o++] = idx[a++];
            while (b < hi) tmp[o++] = idx[b++];
        }
        memcpy(idx, tmp, sizeof(int64_t) * (size_t)n);
    }
}

typedef struct {
    int64_t key, index;
} cell_pair;

static int cmp_cell_pair(const void *a, const void *b) {
    const cell_pair *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Everything evaluate needs, grouped per cell: one (category, image) pair that has a
 * gt or a detection (pycocotools' evalImgs that are not None). Cells are ordered by
 * category, then image id, so each category's cells are one run in image order. */
typedef struct {
    const mrcnn_coco_gt *gt;
    const mrcnn_coco_dets *dets;
    mrcnn_iou_type type;
    int64_t I, K, NC;     // images, categories, cells
    int64_t *cat_start;   // (K + 1) first cell of each category
    int64_t *gt_start;    // (NC + 1) cell offsets into gt_list
    int64_t *gt_list;     // gt annotation indices, grouped by cell, file order within
    int64_t *dt_start;    // (NC + 1)
    int64_t *dt_list;     // detection indices, grouped by cell, results order within
    int64_t *kept_start;  // (NC + 1) offsets of the kept (top-100) detections
    double *kept_score;   // (total kept) scores, sorted within a cell
    uint8_t *kept_state;  // (total kept, A, T) DT_FP / DT_TP / DT_IGNORED
    int64_t *npig;        // (NC, A) non-ignored gts
    double iou_thrs[T_];
    char error[512];      // first failure inside the parallel region
} eval_ctx;

static void set_error(eval_ctx *x, const char *msg) {
#pragma omp critical(coco_eval_error)
    if (!x->error[0]) snprintf(x->error, sizeof x->error, "%s", msg);
}

/* annToRLE: polygons (merged), uncompressed or compressed RLE; a detection without a
 * mask in box-branch results becomes its box polygon, as loadRes makes it. */
static int segm_to_rle(eval_ctx *x, const mrcnn_coco_ann *a, int is_dt, mrcnn_rle *out) {
    char msg[512];
    const mrcnn_coco_segm *s = &a->segm;
    const mrcnn_coco_image *im = &x->gt->images[mrcnn_coco_gt_find_image(x->gt, a->image_id)];
    char who[64];
    if (is_dt) snprintf(who, sizeof who, "results[%lld]", (long long)(a->id - 1));
    else snprintf(who, sizeof who, "annotation id %lld", (long long)a->id);
    if (s->kind == MRCNN_SEGM_NONE && !(is_dt && a->has_bbox)) {
        snprintf(msg, sizeof msg, "%s has no 'segmentation' for segm evaluation", who);
        set_error(x, msg);
        return 0;
    }
    if (s->kind == MRCNN_SEGM_POLYGONS || s->kind == MRCNN_SEGM_NONE) {
        if (im->height < 0 || im->width < 0) {
            snprintf(msg, sizeof msg, "image %lld has no 'height'/'width', which polygons need", (long long)im->id);
            set_error(x, msg);
            return 0;
        }
        /* The JSON loader refuses coordinates the rasterizer cannot take; this guards
         * annotations built in memory (the rasterizer's precondition would abort). */
        if (s->kind == MRCNN_SEGM_NONE) {
            if (!mrcnn_bbox_in_range(a->bbox, im->height, im->width)) {
                snprintf(msg, sizeof msg, "%s: 'bbox' is not finite or far outside image %lld", who, (long long)im->id);
                set_error(x, msg);
                return 0;
            }
            mrcnn_rle_from_bbox(out, a->bbox, im->height, im->width);
            return 1;
        }
        const double *pc = s->poly;
        for (int p = 0; p < s->n_poly; pc += s->poly_len[p], p++)
            if (!mrcnn_polygon_in_range(pc, s->poly_len[p], im->height, im->width)) {
                snprintf(msg, sizeof msg, "%s: polygon %d has a coordinate not finite or far outside image %lld", who, p,
                         (long long)im->id);
                set_error(x, msg);
                return 0;
            }
        if (s->n_poly == 0 || s->poly_len[0] <= 4) {
            snprintf(msg, sizeof msg, "%s: the first polygon needs at least 3 points (pycocotools rejects it too)", who);
            set_error(x, msg);
            return 0;
        }
        mrcnn_rle *parts = MRCNN_MALLOC(sizeof(mrcnn_rle) * (size_t)s->n_poly, "polygon rles");
        const double *xy = s->poly;
        for (int p = 0; p < s->n_poly; p++) {
            mrcnn_rle_from_polygon(&parts[p], xy, s->poly_len[p] / 2, im->height, im->width);
            xy += s->poly_len[p];
        }
        mrcnn_rle_merge(parts, s->n_poly, out, 0);
        for (int p = 0; p < s->n_poly; p++) mrcnn_rle_free(&parts[p]);
        free(parts);
        return 1;
    }
    if (s->kind == MRCNN_SEGM_COUNTS) {
        /* The JSON loader refuses such counts; this guards segmentations built in memory. */
        if (!mrcnn_rle_counts_valid(s->h, s->w, s->m, s->counts)) {
            snprintf(msg, sizeof msg, "%s: RLE counts do not add up to its size %lldx%lld", who, (long long)s->h,
                     (long long)s->w);
            set_error(x, msg);
            return 0;
        }
        mrcnn_rle_init(out, s->h, s->w, s->m, s->counts);
        return 1;
    }
    if (!mrcnn_rle_from_string(out, s->str, s->h, s->w)) {
        snprintf(msg, sizeof msg, "%s: malformed RLE counts string for size %lldx%lld", who, (long long)s->h,
                 (long long)s->w);
        set_error(x, msg);
        return 0;
    }
    return 1;
}

/* The cell's detections by score, stable, cut at the kept count D (their scores go to
 * kept_score): indices into the results. */
static int64_t *kept_detections(eval_ctx *x, int64_t c, int64_t Dall, int64_t D) {
    const mrcnn_coco_ann *dts = x->dets->anns;
    int64_t *order = MRCNN_MALLOC(sizeof(int64_t) * 2 * (size_t)(Dall + 1), "detection order");
    double *score = MRCNN_MALLOC(sizeof(double) * (size_t)(Dall + 1), "detection scores");
    for (int64_t d = 0; d < Dall; d++) {
        order[d] = d;
        score[d] = dts[x->dt_list[x->dt_start[c] + d]].score;
    }
    sort_desc_stable(order, Dall, score, order + Dall);
    int64_t *dl = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(D + 1), "kept detections");
    for (int64_t d = 0; d < D; d++) {
        dl[d] = x->dt_list[x->dt_start[c] + order[d]];
        x->kept_score[x->kept_start[c] + d] = dts[dl[d]].score;
    }
    free(order);
    free(score);
    return dl;
}

/* computeIoU: the (D, G) IoUs of the cell's kept detections (their RLEs drle for segm,
 * boxes dt_box for bbox) with its G gts gl; 0 after set_error when a gt cannot be read. */
static int gt_ious(eval_ctx *x, const int64_t *gl, int64_t G, const mrcnn_rle *drle, const double *dt_box, int64_t D,
                   const uint8_t *crowd, double *iou) {
    const mrcnn_coco_gt *gt = x->gt;
    int ok = 1;
    if (x->type == MRCNN_IOU_SEGM) {
        mrcnn_rle *grle = MRCNN_CALLOC((size_t)G, sizeof(mrcnn_rle), "gt rles");
        for (int64_t g = 0; g < G && ok; g++) ok = segm_to_rle(x, &gt->anns[gl[g]], 0, &grle[g]);
        if (ok) mrcnn_rle_iou(drle, (int)D, grle, (int)G, crowd, iou);
        for (int64_t g = 0; g < G; g++) mrcnn_rle_free(&grle[g]);
        free(grle);
        return ok;
    }
    double *gbox = MRCNN_MALLOC(sizeof(double) * 4 * (size_t)G, "gt boxes");
    for (int64_t g = 0; g < G; g++) {
        const mrcnn_coco_ann *a = &gt->anns[gl[g]];
        if (!a->has_bbox) {
            char msg[256];
            snprintf(msg, sizeof msg, "annotation id %lld has no 'bbox' for bbox evaluation", (long long)a->id);
            set_error(x, msg);
            ok = 0;
        }
        memcpy(gbox + 4 * g, a->bbox, sizeof a->bbox);
    }
    if (ok) mrcnn_bbox_iou(dt_box, (int)D, gbox, (int)G, crowd, iou);
    free(gbox);
    return ok;
}

/* computeIoU + evaluateImg for the four area ranges of one (category, image) cell. */
static void eval_cell(eval_ctx *x, int64_t c) {
    const mrcnn_coco_gt *gt = x->gt;
    const mrcnn_coco_ann *dts = x->dets->anns;
    int64_t G = x->gt_start[c + 1] - x->gt_start[c], Dall = x->dt_start[c + 1] - x->dt_start[c];
    const int64_t *gl = x->gt_list + x->gt_start[c];
    int64_t D = x->kept_start[c + 1] - x->kept_start[c];
    for (int a = 0; a < A_; a++) x->npig[c * A_ + a] = 0;

    int64_t *dl = kept_detections(x, c, Dall, D);

    /* Detection areas and boxes as loadRes sets them; IoUs (D, G). */
    int box_branch = x->dets->n > 0 && dts[0].has_bbox;
    double *dt_area = MRCNN_MALLOC(sizeof(double) * (size_t)(D + 1), "detection areas");
    double *dt_box = MRCNN_MALLOC(sizeof(double) * 4 * (size_t)(D + 1), "detection boxes");
    double *iou = MRCNN_MALLOC(sizeof(double) * (size_t)(D * G + 1), "ious");
    uint8_t *crowd = MRCNN_MALLOC((size_t)G + 1, "crowd flags");
    for (int64_t g = 0; g < G; g++) crowd[g] = gt->anns[gl[g]].iscrowd != 0;
    int need_rle = x->type == MRCNN_IOU_SEGM || !box_branch;
    mrcnn_rle *drle = need_rle ? MRCNN_CALLOC((size_t)D + 1, sizeof(mrcnn_rle), "detection rles") : NULL;
    int ok = 1;
    for (int64_t d = 0; d < D && ok; d++) {
        const mrcnn_coco_ann *a = &dts[dl[d]];
        memcpy(dt_box + 4 * d, a->bbox, sizeof a->bbox);
        if (need_rle) ok = segm_to_rle(x, a, 1, &drle[d]);
        if (!ok) break;
        if (box_branch) {
            dt_area[d] = a->bbox[2] * a->bbox[3];
        } else {
            dt_area[d] = (double)(uint32_t)mrcnn_rle_area(&drle[d]); // maskApi's uint area
            if (!a->has_bbox) mrcnn_rle_to_bbox(&drle[d], dt_box + 4 * d);
        }
    }
    if (ok && D > 0 && G > 0) ok = gt_ious(x, gl, G, drle, dt_box, D, crowd, iou);
    if (drle) {
        for (int64_t d = 0; d < D; d++) mrcnn_rle_free(&drle[d]);
        free(drle);
    }

    /* evaluateImg per area range. */
    int64_t *gorder = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(G + 1), "gt order");
    uint8_t *gign = MRCNN_MALLOC((size_t)G + 1, "gt ignore");
    uint8_t *gcrowd = MRCNN_MALLOC((size_t)G + 1, "gt crowd");
    uint8_t *gnonzero = MRCNN_MALLOC((size_t)G + 1, "gt id nonzero");
    uint8_t *gtm = MRCNN_MALLOC((size_t)G + 1, "gt matched");
    for (int a = 0; a < A_ && ok; a++) {
        int64_t n = 0;
        for (int pass = 0; pass < 2; pass++) { // stable: non-ignored first
            for (int64_t g = 0; g < G; g++) {
                const mrcnn_coco_ann *ga = &gt->anns[gl[g]];
                int ig = ga->iscrowd || ga->area < k_area_lo[a] || ga->area > k_area_hi[a];
                if (ig != pass) continue;
                gorder[n] = g;
                gign[n] = (uint8_t)ig;
                gcrowd[n] = crowd[g];
                gnonzero[n] = ga->id != 0;
                n++;
            }
        }
        int64_t npig = 0;
        for (int64_t g = 0; g < G; g++) npig += !gign[g];
        x->npig[c * A_ + a] = npig;
        for (int t = 0; t < T_; t++) {
            memset(gtm, 0, (size_t)G + 1);
            double thr = fmin(x->iou_thrs[t], 1 - 1e-10);
            for (int64_t d = 0; d < D; d++) {
                double best = thr;
                int64_t m = -1;
                if (G > 0) {
                    const double *row = iou + d * G;
                    for (int64_t j = 0; j < G; j++) {
                        if (gtm[j] && !gcrowd[j]) continue;
                        if (m > -1 && gign[m] == 0 && gign[j] == 1) break;
                        double v = row[gorder[j]];
                        if (v < best) continue;
                        best = v;
                        m = j;
                    }
                }
                int matched = 0, ignored = 0;
                if (m >= 0) {
                    ignored = gign[m];
                    matched = gnonzero[m]; // dtMatches holds the gt id; id 0 reads as unmatched
                    gtm[m] = 1;
                }
                if (!matched && (dt_area[d] < k_area_lo[a] || dt_area[d] > k_area_hi[a])) ignored = 1;
                x->kept_state[((x->kept_start[c] + d) * A_ + a) * T_ + t] =
                    ignored ? DT_IGNORED : matched ? DT_TP : DT_FP;
            }
        }
    }
    free(gorder), free(gign), free(gcrowd), free(gnonzero), free(gtm);
    free(dl), free(dt_area), free(dt_box), free(iou), free(crowd);
}

/* accumulate() for category k: precision (T, R, K, A, M) and recall (T, K, A, M). */
static void accumulate_category(eval_ctx *x, int64_t k, mrcnn_coco_eval *e, const double *rec_thrs) {
    int64_t K = x->K, c0 = x->cat_start[k], c1 = x->cat_start[k + 1];
    int64_t cap = x->kept_start[c1] - x->kept_start[c0];
    double *sc = MRCNN_MALLOC(sizeof(double) * (size_t)(cap + 1), "accumulate scores");
    int64_t *src = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(cap + 1), "accumulate sources");
    int64_t *idx = MRCNN_MALLOC(sizeof(int64_t) * 2 * (size_t)(cap + 1), "accumulate order");
    double *rc = MRCNN_MALLOC(sizeof(double) * (size_t)(cap + 1), "recall curve");
    double *pr = MRCNN_MALLOC(sizeof(double) * (size_t)(cap + 1), "precision curve");
    uint8_t *st = MRCNN_MALLOC((size_t)(cap + 1) * A_ * T_, "sorted detection states");
    /* No cell: every evalImg of this category is None and its entries stay -1. The
     * concatenation and its score order depend on maxDets only, not on the area range. */
    for (int mi = 0; mi < M_ && c1 > c0; mi++) {
        int64_t maxdet = k_max_dets[mi], nd = 0;
        for (int64_t c = c0; c < c1; c++) {
            int64_t n = x->kept_start[c + 1] - x->kept_start[c];
            if (n > maxdet) n = maxdet;
            for (int64_t d = 0; d < n; d++) {
                sc[nd] = x->kept_score[x->kept_start[c] + d];
                src[nd] = x->kept_start[c] + d;
                nd++;
            }
        }
        for (int64_t d = 0; d < nd; d++) idx[d] = d;
        sort_desc_stable(idx, nd, sc, idx + nd);
        for (int64_t d = 0; d < nd; d++) // states in score order, read sequentially below
            memcpy(st + d * A_ * T_, x->kept_state + src[idx[d]] * A_ * T_, A_ * T_);
        for (int a = 0; a < A_; a++) {
            int64_t npig = 0;
            for (int64_t c = c0; c < c1; c++) npig += x->npig[c * A_ + a];
            if (npig == 0) continue;
            for (int t = 0; t < T_; t++) {
                double tp = 0, fp = 0;
                for (int64_t d = 0; d < nd; d++) {
                    int s = st[(d * A_ + a) * T_ + t];
                    if (s == DT_TP) tp += 1;
                    else if (s == DT_FP) fp += 1;
                    rc[d] = tp / (double)npig;
                    pr[d] = tp / (fp + tp + 2.220446049250313e-16); // np.spacing(1)
                }
                e->recall[((t * K + k) * A_ + a) * M_ + mi] = nd ? rc[nd - 1] : 0;
                for (int64_t d = nd - 1; d > 0; d--)
                    if (pr[d] > pr[d - 1]) pr[d - 1] = pr[d];
                /* np.searchsorted(rc, recThrs, side='left'); points past the end stay 0. */
                int64_t p = 0;
                for (int r = 0; r < R_; r++) {
                    while (p < nd && rc[p] < rec_thrs[r]) p++;
                    e->precision[(((int64_t)t * R_ + r) * K + k) * A_ * M_ + a * M_ + mi] = p < nd ? pr[p] : 0;
                }
            }
        }
    }
    free(sc), free(src), free(idx), free(rc), free(pr), free(st);
}

/* The cells (category, image) of the sorted gt and detection lists, merged: each cell's
 * range in both lists and in the kept (top max-dets) detections, and each category's
 * first cell. */
static void build_cells(eval_ctx *x, const cell_pair *gp, int64_t ng, const cell_pair *dp, int64_t nd) {
    const int64_t I = x->I, K = x->K;
    int64_t cap = ng + nd + 1;
    x->gt_start = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(cap + 1), "gt cell starts");
    x->dt_start = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(cap + 1), "detection cell starts");
    x->kept_start = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(cap + 1), "kept detection starts");
    x->cat_start = MRCNN_CALLOC((size_t)K + 1, sizeof(int64_t), "category cell starts");
    x->gt_list = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(ng + 1), "gt lists");
    x->dt_list = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(nd + 1), "detection lists");
    for (int64_t n = 0; n < ng; n++) x->gt_list[n] = gp[n].index;
    for (int64_t n = 0; n < nd; n++) x->dt_list[n] = dp[n].index;
    int64_t gi = 0, di = 0, nc = 0;
    x->kept_start[0] = 0;
    while (gi < ng || di < nd) {
        int64_t key = gi < ng ? gp[gi].key : INT64_MAX;
        if (di < nd && dp[di].key < key) key = dp[di].key;
        x->gt_start[nc] = gi;
        x->dt_start[nc] = di;
        while (gi < ng && gp[gi].key == key) gi++;
        while (di < nd && dp[di].key == key) di++;
        int64_t n = di - x->dt_start[nc];
        x->kept_start[nc + 1] = x->kept_start[nc] + (n < k_max_dets[M_ - 1] ? n : k_max_dets[M_ - 1]);
        x->cat_start[key / I + 1]++;
        nc++;
    }
    x->gt_start[nc] = gi;
    x->dt_start[nc] = di;
    x->NC = nc;
    for (int64_t k = 0; k < K; k++) x->cat_start[k + 1] += x->cat_start[k];
}

void mrcnn_coco_evaluate(const mrcnn_coco_gt *gt, const mrcnn_coco_dets *dets, mrcnn_iou_type type,
                         int threads, mrcnn_coco_eval *out) {
    double t0 = mrcnn_time_now();
    mrcnn_coco_dets_check(dets, gt);
    memset(out, 0, sizeof *out);
    out->iou_type = type;
    linspace(.5, 0.95, T_, out->iou_thrs);
    linspace(.0, 1.00, R_, out->rec_thrs);
    if (threads <= 0) threads = omp_get_max_threads();

    eval_ctx x;
    memset(&x, 0, sizeof x);
    x.gt = gt;
    x.dets = dets;
    x.type = type;
    x.I = gt->n_images;
    x.K = gt->n_cats;
    memcpy(x.iou_thrs, out->iou_thrs, sizeof x.iou_thrs);
    int64_t I = x.I, K = x.K;
    out->K = K;
    out->cat_ids = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(K + 1), "category ids");
    for (int64_t k = 0; k < K; k++) out->cat_ids[k] = gt->cats[gt->cat_by_id[k]].id;
    size_t np = (size_t)T_ * R_ * (size_t)K * A_ * M_, nr = (size_t)T_ * (size_t)K * A_ * M_;
    out->precision = MRCNN_MALLOC(sizeof(double) * (np + 1), "precision");
    out->recall = MRCNN_MALLOC(sizeof(double) * (nr + 1), "recall");
    for (size_t i = 0; i < np; i++) out->precision[i] = -1;
    for (size_t i = 0; i < nr; i++) out->recall[i] = -1;

    /* Ranks of images and categories in id order. */
    int64_t *img_rank = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(I + 1), "image ranks");
    int64_t *cat_rank = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(K + 1), "category ranks");
    for (int64_t r = 0; r < I; r++) img_rank[gt->image_by_id[r]] = r;
    for (int64_t r = 0; r < K; r++) cat_rank[gt->cat_by_id[r]] = r;

    /* (cell key k * I + i, index) pairs: gts of known images and categories only, as
     * getAnnIds selects them; sorted by key with file order kept within a key. */
    cell_pair *gp = MRCNN_MALLOC(sizeof(cell_pair) * (size_t)(gt->n_anns + 1), "gt cells");
    cell_pair *dp = MRCNN_MALLOC(sizeof(cell_pair) * (size_t)(dets->n + 1), "detection cells");
    int64_t ng = 0, nd = dets->n;
    for (int64_t n = 0; n < gt->n_anns; n++) {
        int64_t i = mrcnn_coco_gt_find_image(gt, gt->anns[n].image_id);
        int64_t k = mrcnn_coco_gt_find_category(gt, gt->anns[n].category_id);
        if (i >= 0 && k >= 0) gp[ng++] = (cell_pair){cat_rank[k] * I + img_rank[i], n};
    }
    for (int64_t n = 0; n < nd; n++) {
        int64_t i = mrcnn_coco_gt_find_image(gt, dets->anns[n].image_id);
        int64_t k = mrcnn_coco_gt_find_category(gt, dets->anns[n].category_id);
        dp[n] = (cell_pair){cat_rank[k] * I + img_rank[i], n};
    }
    free(img_rank), free(cat_rank);
    qsort(gp, (size_t)ng, sizeof(cell_pair), cmp_cell_pair);
    qsort(dp, (size_t)nd, sizeof(cell_pair), cmp_cell_pair);

    build_cells(&x, gp, ng, dp, nd);
    int64_t nc = x.NC;
    free(gp), free(dp);

    int64_t kept = x.kept_start[nc];
    x.kept_score = MRCNN_MALLOC(sizeof(double) * (size_t)(kept + 1), "kept scores");
    x.kept_state = MRCNN_MALLOC((size_t)(kept + 1) * A_ * T_, "kept states");
    x.npig = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(nc + 1) * A_, "non-ignored gt counts");

#pragma omp parallel for schedule(dynamic, 8) num_threads(threads)
    for (int64_t c = 0; c < nc; c++) {
        if (!x.error[0]) eval_cell(&x, c);
    }
    MRCNN_CHECK(!x.error[0], "coco eval (%s): %s", type == MRCNN_IOU_SEGM ? "segm" : "bbox", x.error);

#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t k = 0; k < K; k++) accumulate_category(&x, k, out, out->rec_thrs);

    free(x.gt_start), free(x.gt_list), free(x.dt_start), free(x.dt_list), free(x.kept_start);
    free(x.cat_start), free(x.kept_score), free(x.kept_state), free(x.npig);
    mrcnn_coco_eval_compute_stats(out);
    out->seconds = mrcnn_time_now() - t0;
}

void mrcnn_coco_eval_free(mrcnn_coco_eval *e) {
    free(e->cat_ids);
    free(e->precision);
    free(e->recall);
    memset(e, 0, sizeof *e);
}
