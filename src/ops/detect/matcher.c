/* torchvision's Matcher (models/detection/_utils.py), including the low-quality rule
 * that gives every prediction tying for some gt's best IoU its best gt back. */
#include <stdlib.h>

#include "mrcnn/boxes.h"
#include "mrcnn/check.h"

void mrcnn_matcher_match(const float *iou, int g, int64_t n, float high, float low, int allow_low_quality,
                         int32_t *matches) {
    MRCNN_CHECK(g >= 0 && n >= 0, "matcher: negative size (%d gt, %lld predictions)", g, (long long)n);
    MRCNN_CHECK(low <= high, "matcher: low threshold %g above high threshold %g", (double)low, (double)high);
    MRCNN_CHECK(n == 0 || matches, "matcher: NULL matches");
    if (g == 0) {
        for (int64_t j = 0; j < n; j++) matches[j] = MRCNN_MATCH_BELOW_LOW;
        return;
    }
    MRCNN_CHECK(iou, "matcher: NULL iou");
    int32_t *best = allow_low_quality ? MRCNN_MALLOC((size_t)(n ? n : 1) * sizeof(int32_t), "matcher best gt") : NULL;
#pragma omp parallel for schedule(static) if (n * g >= 65536)
    for (int64_t j = 0; j < n; j++) {
        /* torch.max over dim 0: the first maximum. */
        float v = iou[j];
        int32_t arg = 0;
        for (int i = 1; i < g; i++) {
            float q = iou[(int64_t)i * n + j];
            if (q > v) {
                v = q;
                arg = i;
            }
        }
        if (best) best[j] = arg;
        matches[j] = v < low ? MRCNN_MATCH_BELOW_LOW : (v < high ? MRCNN_MATCH_BETWEEN : arg);
    }
    if (allow_low_quality) {
        for (int i = 0; i < g; i++) {
            const float *row = iou + (int64_t)i * n;
            float hi = row[0];
            for (int64_t j = 1; j < n; j++)
                if (row[j] > hi) hi = row[j];
            for (int64_t j = 0; j < n; j++)
                if (row[j] == hi) matches[j] = best[j];
        }
        free(best);
    }
}
