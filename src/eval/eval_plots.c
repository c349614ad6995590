/* Evaluation pictures (plot.h): precision-recall curves as pycocotools' analyze draws
 * them, and AP per category, from the accumulated precision array of one IoU type. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mrcnn/check.h"
#include "mrcnn/log.h"
#include "mrcnn/cocoeval.h"
#include "mrcnn/plot.h"

enum { T_ = MRCNN_COCO_T, R_ = MRCNN_COCO_R, A_ = MRCNN_COCO_A, M_ = MRCNN_COCO_M };

/* Mean precision at recall point r over the valid categories (and IoU thresholds t0..t1),
 * area a, maxDets 100: the curve whose mean over r is the matching COCO stat. NaN when
 * no category has ground truth in that area. */
static double curve_at(const mrcnn_coco_eval *e, int t0, int t1, int r, int a) {
    double sum = 0;
    int64_t n = 0;
    for (int t = t0; t <= t1; t++)
        for (int64_t k = 0; k < e->K; k++) {
            double p = e->precision[(((int64_t)t * R_ + r) * e->K + k) * A_ * M_ + a * M_ + (M_ - 1)];
            if (p > -1) {
                sum += p;
                n++;
            }
        }
    return n ? sum / (double)n : NAN;
}

typedef struct {
    double ap;
    int64_t k;
} cat_ap;

static int by_ap_desc(const void *pa, const void *pb) {
    const cat_ap *a = pa, *b = pb;
    if (a->ap != b->ap) return a->ap < b->ap ? 1 : -1;
    return a->k < b->k ? -1 : a->k > b->k;
}

static void plot_pr(const mrcnn_coco_eval *e, const char *iou, const char *dir) {
    /* columns: IoU .50, .75, .50:.95 (all areas), then .50:.95 small, medium, large */
    static const char *const names[6] = {"IoU=.50", "IoU=.75", "IoU=.50:.95", "small", "medium", "large"};
    const int t0[6] = {0, 5, 0, 0, 0, 0}, t1[6] = {0, 5, T_ - 1, T_ - 1, T_ - 1, T_ - 1}, area[6] = {0, 0, 0, 1, 2, 3};
    double curve[6][R_], mean[6];
    for (int c = 0; c < 6; c++) {
        mean[c] = 0;
        for (int r = 0; r < R_; r++) {
            curve[c][r] = curve_at(e, t0[c], t1[c], r, area[c]);
            mean[c] += curve[c][r] / R_;
        }
    }
    char base[1200], csv[1300], q[2700];
    snprintf(base, sizeof base, "%s/eval_%s_pr", dir, iou);
    snprintf(csv, sizeof csv, "%s.csv", base);
    FILE *f = fopen(csv, "w");
    if (!f) {
        mrcnn_warn("plot: cannot write %s", csv);
        return;
    }
    fprintf(f, "recall,p_iou50,p_iou75,p_iou50_95,p_small,p_medium,p_large\n");
    for (int r = 0; r < R_; r++) {
        fprintf(f, "%.17g", e->rec_thrs[r]);
        for (int c = 0; c < 6; c++) {
            if (isfinite(curve[c][r])) fprintf(f, ",%.17g", curve[c][r]);
            else fputc(',', f);
        }
        fputc('\n', f);
    }
    if (fclose(f) != 0) {
        mrcnn_warn("plot: writing %s failed", csv);
        return;
    }
    mrcnn_plot_quote(q, sizeof q, csv);
    mrcnn_plot_buf b = {0};
    mrcnn_plot_buf_printf(&b,
                          "set datafile separator ','\nset grid\nset xrange [0:1]\nset yrange [0:1.05]\n"
                          "set xlabel 'recall'\nset ylabel 'precision'\nset key top right font ',9'\n"
                          "set multiplot layout 1,2 title '%s precision-recall (%lld categories, maxDets 100; "
                          "[AP] in the legend)' font ',12'\n",
                          iou, (long long)e->K);
    for (int panel = 0; panel < 2; panel++) {
        mrcnn_plot_buf_printf(&b, "set title '%s'\n", panel == 0 ? "all areas, by IoU threshold"
                                                                  : "IoU=.50:.95, by object area");
        int first = 1;
        for (int c = panel * 3; c < panel * 3 + 3; c++) {
            if (!isfinite(mean[c])) continue;
            mrcnn_plot_buf_printf(&b, "%s %s using 1:%d with lines lw 2 lc rgb '%s' title '[%.3f] %s'",
                                  first ? "plot" : ", \\\n    ", q, c + 2, mrcnn_plot_color(c), mean[c], names[c]);
            first = 0;
        }
        mrcnn_plot_buf_printf(&b, "%s\n", first ? "set label 1 'no ground truth' at graph 0.5,0.5 center\nplot [0:1][0:1] -1 notitle\nunset label 1" : "");
    }
    mrcnn_plot_buf_printf(&b, "unset multiplot\n");
    if (mrcnn_plot_render(base, 1200, 520, b.s)) mrcnn_info("%s precision-recall curves: %s.png", iou, base);
    mrcnn_plot_buf_free(&b);
}

static void plot_categories(const mrcnn_coco_eval *e, const mrcnn_coco_gt *gt, const char *iou, const char *dir) {
    cat_ap *v = MRCNN_CALLOC((size_t)(e->K > 0 ? e->K : 1), sizeof *v, "category AP");
    int64_t n = 0;
    for (int64_t k = 0; k < e->K; k++) {
        double ap = mrcnn_coco_eval_category_ap(e, k, -1);
        if (isfinite(ap)) v[n++] = (cat_ap){ap, k};
    }
    qsort(v, (size_t)n, sizeof *v, by_ap_desc);
    char base[1200], csv[1300], q[2700];
    snprintf(base, sizeof base, "%s/eval_%s_categories", dir, iou);
    snprintf(csv, sizeof csv, "%s.csv", base);
    FILE *f = fopen(csv, "w");
    if (!f) {
        mrcnn_warn("plot: cannot write %s", csv);
        free(v);
        return;
    }
    fprintf(f, "rank,category_id,name,AP\n");
    for (int64_t i = 0; i < n; i++) {
        int64_t c = mrcnn_coco_gt_find_category(gt, e->cat_ids[v[i].k]);
        char name[128];
        snprintf(name, sizeof name, "%s", c >= 0 && gt->cats[c].name ? gt->cats[c].name : "?");
        for (char *p = name; *p; p++)
            if (*p == ',' || *p == '"' || *p == '\'' || *p == '\n') *p = ' '; // one CSV field, one tic label
        fprintf(f, "%lld,%lld,%s,%.17g\n", (long long)i + 1, (long long)e->cat_ids[v[i].k], name, v[i].ap);
    }
    free(v);
    if (fclose(f) != 0) {
        mrcnn_warn("plot: writing %s failed", csv);
        return;
    }
    mrcnn_plot_quote(q, sizeof q, csv);
    mrcnn_plot_buf b = {0};
    mrcnn_plot_buf_printf(&b,
                          "set datafile separator ','\nset grid ytics\nset style fill solid 0.8 border -1\n"
                          "set boxwidth 0.8\nset yrange [0:1]\nset xrange [-0.6:%.1f]\nset ylabel 'AP (IoU=.50:.95)'\n"
                          "set xlabel 'category (sorted by AP)'\nset xtics rotate by 45 right font ',%d' nomirror\n"
                          "set title '%s AP per category (%lld with ground truth; overall AP %.3f)' font ',12'\n",
                          (double)(n > 0 ? n : 1) - 0.4, n > 40 ? 7 : 9, iou, (long long)n,
                          e->stats[0]);
    if (n > 0)
        mrcnn_plot_buf_printf(&b, "plot %s using ($1-1):4:xtic(3) with boxes lc rgb '%s' notitle, \\\n"
                                  "    '' using ($1-1):4:(sprintf('%%.2f', $4)) with labels offset 0,0.6 font ',7' "
                                  "notitle\n",
                              q, mrcnn_plot_color(0));
    else mrcnn_plot_buf_printf(&b, "set label 1 'no category has ground truth' at graph 0.5,0.5 center\nplot [0:1][0:1] -1 notitle\nunset label 1\n");
    int w = n > 20 ? (int)(300 + 18 * n) : 800;
    if (mrcnn_plot_render(base, w, 520, b.s)) mrcnn_info("%s AP per category: %s.png", iou, base);
    mrcnn_plot_buf_free(&b);
}

void mrcnn_plot_eval(const mrcnn_coco_eval *e, const mrcnn_coco_gt *gt, const char *iou, const char *dir) {
    if (!mrcnn_plot_enabled()) return;
    /* One level, as the user named it: creating parents is the trainer's business. */
    if (mkdir(dir, 0775) != 0 && errno != EEXIST) {
        mrcnn_warn("plot: cannot create %s: %s", dir, strerror(errno));
        return;
    }
    plot_pr(e, iou, dir);
    plot_categories(e, gt, iou, dir);
}
