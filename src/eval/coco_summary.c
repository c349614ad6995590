/* COCOeval.summarize(): the 12 stats from precision and recall, printed in
 * pycocotools' format; per-category AP; the stats as JSON. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/cocoeval.h"
#include "mrcnn/json.h"

#define T_ MRCNN_COCO_T
#define R_ MRCNN_COCO_R
#define A_ MRCNN_COCO_A
#define M_ MRCNN_COCO_M

static const char *k_area_label[A_] = {"all", "small", "medium", "large"};
static const int k_max_dets[M_] = {1, 10, 100};

/* numpy's pairwise summation (np.add.reduce on contiguous float64), so that the
 * means agree with np.mean to the last bit. */
static double pairwise_sum(const double *a, int64_t n) {
    if (n < 8) {
        double s = 0.;
        for (int64_t i = 0; i < n; i++) s += a[i];
        return s;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        int64_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) s += a[i];
        return s;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

/* Mean of the entries > -1 in C order, or -1 when there are none. t < 0: all thresholds. */
static double summarize(const mrcnn_coco_eval *e, int ap, int t_sel, int a, int m) {
    int64_t K = e->K;
    int64_t cap = ap ? (int64_t)T_ * R_ * K : (int64_t)T_ * K;
    double *v = malloc(sizeof(double) * (size_t)(cap + 1));
    int64_t n = 0;
    for (int t = 0; t < T_; t++) {
        if (t_sel >= 0 && t != t_sel) continue;
        if (ap) {
            for (int r = 0; r < R_; r++)
                for (int64_t k = 0; k < K; k++) {
                    double p = e->precision[(((int64_t)t * R_ + r) * K + k) * A_ * M_ + a * M_ + m];
                    if (p > -1) v[n++] = p;
                }
        } else {
            for (int64_t k = 0; k < K; k++) {
                double p = e->recall[((t * K + k) * A_ + a) * M_ + m];
                if (p > -1) v[n++] = p;
            }
        }
    }
    double mean = n ? (0.0 + pairwise_sum(v, n)) / (double)n : -1;
    free(v);
    return mean;
}

/* np.where(iouThr == p.iouThrs): exact comparison; -2 when no threshold equals it. */
static int thr_index(const mrcnn_coco_eval *e, double thr) {
    for (int t = 0; t < T_; t++)
        if (e->iou_thrs[t] == thr) return t;
    return -2;
}

typedef struct {
    int ap;
    double iou; // < 0: all
    int area, maxdet_index;
} stat_def;

static const stat_def k_stats[12] = {
    {1, -1, 0, 2}, {1, .5, 0, 2}, {1, .75, 0, 2}, {1, -1, 1, 2}, {1, -1, 2, 2}, {1, -1, 3, 2},
    {0, -1, 0, 0}, {0, -1, 0, 1}, {0, -1, 0, 2}, {0, -1, 1, 2}, {0, -1, 2, 2}, {0, -1, 3, 2},
};
static const char *k_stat_names[12] = {"AP", "AP50", "AP75", "APs", "APm", "APl",
                                       "AR1", "AR10", "AR100", "ARs", "ARm", "ARl"};

void mrcnn_coco_eval_compute_stats(mrcnn_coco_eval *e) {
    for (int s = 0; s < 12; s++) {
        const stat_def *d = &k_stats[s];
        int t = d->iou < 0 ? -1 : thr_index(e, d->iou);
        e->stats[s] = t == -2 ? -1 : summarize(e, d->ap, t, d->area, d->maxdet_index);
    }
}

void mrcnn_coco_eval_print(const mrcnn_coco_eval *e, FILE *out) {
    for (int s = 0; s < 12; s++) {
        const stat_def *d = &k_stats[s];
        char iou[32];
        if (d->iou < 0) snprintf(iou, sizeof iou, "%0.2f:%0.2f", e->iou_thrs[0], e->iou_thrs[T_ - 1]);
        else snprintf(iou, sizeof iou, "%0.2f", d->iou);
        fprintf(out, " %-18s %s @[ IoU=%-9s | area=%6s | maxDets=%3d ] = %0.3f\n",
                d->ap ? "Average Precision" : "Average Recall", d->ap ? "(AP)" : "(AR)", iou,
                k_area_label[d->area], k_max_dets[d->maxdet_index], e->stats[s]);
    }
}

double mrcnn_coco_eval_category_ap(const mrcnn_coco_eval *e, int64_t k, double iou) {
    int t_sel = iou < 0 ? -1 : thr_index(e, iou);
    double sum = 0;
    int64_t n = 0;
    double *v = malloc(sizeof(double) * T_ * R_);
    for (int t = 0; t < T_; t++) {
        if (t_sel >= 0 ? t != t_sel : t_sel == -2) continue;
        for (int r = 0; r < R_; r++) {
            double p = e->precision[(((int64_t)t * R_ + r) * e->K + k) * A_ * M_ + 0 * M_ + (M_ - 1)];
            if (p > -1) v[n++] = p;
        }
    }
    sum = pairwise_sum(v, n);
    free(v);
    return n ? sum / (double)n : NAN;
}

static const char *cat_name(const mrcnn_coco_gt *gt, int64_t id) {
    int64_t i = gt ? mrcnn_coco_gt_find_category(gt, id) : -1;
    return i >= 0 && gt->cats[i].name ? gt->cats[i].name : "";
}

void mrcnn_coco_eval_print_per_category(const mrcnn_coco_eval *e, const mrcnn_coco_gt *gt, FILE *out) {
    fprintf(out, "Per-category %s AP (area all, maxDets 100; nan: no ground truth):\n",
            e->iou_type == MRCNN_IOU_SEGM ? "segm" : "bbox");
    fprintf(out, "  %12s  %-24s %7s %7s %7s\n", "category_id", "name", "AP", "AP50", "AP75");
    for (int64_t k = 0; k < e->K; k++)
        fprintf(out, "  %12lld  %-24.24s %7.3f %7.3f %7.3f\n", (long long)e->cat_ids[k], cat_name(gt, e->cat_ids[k]),
                mrcnn_coco_eval_category_ap(e, k, -1), mrcnn_coco_eval_category_ap(e, k, .5),
                mrcnn_coco_eval_category_ap(e, k, .75));
}

static void put_num(FILE *out, double v) {
    if (isnan(v)) fputs("null", out);
    else fprintf(out, "%.17g", v);
}

void mrcnn_coco_eval_write_json(const mrcnn_coco_eval *e, const mrcnn_coco_gt *gt, FILE *out) {
    fputs("{\"stats\": [", out);
    for (int s = 0; s < 12; s++) {
        if (s) fputs(", ", out);
        put_num(out, e->stats[s]);
    }
    fputs("]", out);
    for (int s = 0; s < 12; s++) {
        fprintf(out, ", \"%s\": ", k_stat_names[s]);
        put_num(out, e->stats[s]);
    }
    fputs(", \"per_category\": [", out);
    for (int64_t k = 0; k < e->K; k++) {
        fprintf(out, "%s{\"id\": %lld, \"name\": ", k ? ", " : "", (long long)e->cat_ids[k]);
        mrcnn_json_write_string(out, cat_name(gt, e->cat_ids[k]));
        fputs(", \"AP\": ", out);
        put_num(out, mrcnn_coco_eval_category_ap(e, k, -1));
        fputs(", \"AP50\": ", out);
        put_num(out, mrcnn_coco_eval_category_ap(e, k, .5));
        fputs(", \"AP75\": ", out);
        put_num(out, mrcnn_coco_eval_category_ap(e, k, .75));
        fputs("}", out);
    }
    fputs("]}", out);
}
