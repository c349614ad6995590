/* Losses: sum_i weight_i * l_i / norm, accumulated in double so that the float
 * result does not depend on the summation order more than the last bit. */
#include <math.h>

#include "ops_real.h"

static void check_common(const char *op, int64_t n, const void *x, real norm) {
    MRCNN_CHECK(n >= 0, "%s: count %lld is negative", op, (long long)n);
    MRCNN_CHECK(n == 0 || x != NULL, "%s: NULL logits", op);
    MRCNN_CHECK(norm > 0, "%s: normalizer %g must be positive", op, (double)norm);
}

/* log(1 + exp(-|x|)) + max(x, 0) - x t, stable for any x. */
real MRCNN_OP(bce_logits_forward)(int64_t n, const real *x, const real *t, const real *weight, real norm) {
    check_common("bce_logits_forward", n, x, norm);
    MRCNN_CHECK(n == 0 || t != NULL, "bce_logits_forward: NULL targets");
    double acc = 0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (n >= OPS_OMP_MIN)
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        double l = (v > 0 ? v : 0) - v * t[i] + log1p(exp(-fabs(v)));
        acc += weight ? weight[i] * l : l;
    }
    return (real)(acc / norm);
}

void MRCNN_OP(bce_logits_backward)(int64_t n, const real *x, const real *t, const real *weight, real norm, real dloss, real *dx) {
    check_common("bce_logits_backward", n, x, norm);
    MRCNN_CHECK(n == 0 || (t != NULL && dx != NULL), "bce_logits_backward: NULL targets or gradient");
    const real g = dloss / norm;
#pragma omp parallel for schedule(static) if (n >= OPS_OMP_MIN)
    for (int64_t i = 0; i < n; i++) {
        real v = x[i], sig;
        if (v >= 0) {
            sig = 1 / (1 + exp(-v));
        } else {
            real e = exp(v);
            sig = e / (1 + e);
        }
        real d = (sig - t[i]) * g;
        dx[i] += weight ? weight[i] * d : d;
    }
}

static void check_labels(const char *op, int n, int c, const int32_t *labels) {
    MRCNN_CHECK(n >= 0 && c > 0, "%s: rows %d must not be negative and classes %d must be positive", op, n, c);
    MRCNN_CHECK(n == 0 || labels != NULL, "%s: NULL labels", op);
    for (int i = 0; i < n; i++)
        MRCNN_CHECK(labels[i] >= -1 && labels[i] < c, "%s: label %d of row %d outside [-1, %d)", op, labels[i], i, c);
}

real MRCNN_OP(softmax_ce_forward)(int n, int c, const real *x, const int32_t *labels, real norm) {
    check_common("softmax_ce_forward", n, x, norm);
    check_labels("softmax_ce_forward", n, c, labels);
    double acc = 0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if ((int64_t)n * c >= OPS_OMP_MIN)
    for (int i = 0; i < n; i++) {
        if (labels[i] < 0) continue;
        const real *row = x + (int64_t)i * c;
        double mx = row[0], s = 0;
        for (int j = 1; j < c; j++) mx = row[j] > mx ? row[j] : mx;
        for (int j = 0; j < c; j++) s += exp(row[j] - mx);
        acc += mx + log(s) - row[labels[i]];
    }
    return (real)(acc / norm);
}

void MRCNN_OP(softmax_ce_backward)(int n, int c, const real *x, const int32_t *labels, real norm, real dloss, real *dx) {
    check_common("softmax_ce_backward", n, x, norm);
    check_labels("softmax_ce_backward", n, c, labels);
    MRCNN_CHECK(n == 0 || dx != NULL, "softmax_ce_backward: NULL gradient");
    const double g = (double)dloss / norm;
#pragma omp parallel for schedule(static) if ((int64_t)n * c >= OPS_OMP_MIN)
    for (int i = 0; i < n; i++) {
        if (labels[i] < 0) continue;
        const real *row = x + (int64_t)i * c;
        real *drow = dx + (int64_t)i * c;
        double mx = row[0], s = 0;
        for (int j = 1; j < c; j++) mx = row[j] > mx ? row[j] : mx;
        for (int j = 0; j < c; j++) s += exp(row[j] - mx);
        for (int j = 0; j < c; j++) drow[j] += (real)(g * (exp(row[j] - mx) / s - (j == labels[i])));
    }
}

static void check_smooth_l1(const char *op, int64_t n, const void *x, const void *t, real beta, real norm) {
    check_common(op, n, x, norm);
    MRCNN_CHECK(n == 0 || t != NULL, "%s: NULL targets", op);
    MRCNN_CHECK(beta >= 0, "%s: beta %g must not be negative", op, (double)beta);
}

real MRCNN_OP(smooth_l1_forward)(int64_t n, const real *x, const real *t, const real *weight, real beta, real norm) {
    check_smooth_l1("smooth_l1_forward", n, x, t, beta, norm);
    double acc = 0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (n >= OPS_OMP_MIN)
    for (int64_t i = 0; i < n; i++) {
        double a = fabs((double)x[i] - t[i]);
        double l = a < beta ? 0.5 * a * a / beta : a - 0.5 * beta;
        acc += weight ? weight[i] * l : l;
    }
    return (real)(acc / norm);
}

void MRCNN_OP(smooth_l1_backward)(int64_t n, const real *x, const real *t, const real *weight, real beta, real norm, real dloss,
                              real *dx) {
    check_smooth_l1("smooth_l1_backward", n, x, t, beta, norm);
    MRCNN_CHECK(n == 0 || dx != NULL, "smooth_l1_backward: NULL gradient");
    const real g = dloss / norm;
#pragma omp parallel for schedule(static) if (n >= OPS_OMP_MIN)
    for (int64_t i = 0; i < n; i++) {
        real d = x[i] - t[i];
        real gd = fabs(d) < beta ? d / beta : (d > 0) - (d < 0);
        dx[i] += weight ? weight[i] * gd * g : gd * g;
    }
}
