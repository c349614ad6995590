/* Pairwise IoU, in float in torchvision's order of operations (_box_inter_union). */
#include "mrcnn/boxes.h"
#include "mrcnn/check.h"

void mrcnn_box_iou(const float *a, int64_t n, const float *b, int64_t m, float *iou) {
    MRCNN_CHECK(n >= 0 && m >= 0, "box_iou: negative box count (%lld, %lld)", (long long)n, (long long)m);
    MRCNN_CHECK((n == 0 || a) && (m == 0 || b) && (n * m == 0 || iou), "box_iou: NULL argument");
#pragma omp parallel for schedule(static) if (n * m >= 65536)
    for (int64_t i = 0; i < n; i++) {
        const float *p = a + 4 * i;
        float area1 = (p[2] - p[0]) * (p[3] - p[1]);
        for (int64_t j = 0; j < m; j++) {
            const float *q = b + 4 * j;
            float area2 = (q[2] - q[0]) * (q[3] - q[1]);
            float w = (p[2] < q[2] ? p[2] : q[2]) - (p[0] > q[0] ? p[0] : q[0]);
            float h = (p[3] < q[3] ? p[3] : q[3]) - (p[1] > q[1] ? p[1] : q[1]);
            w = w > 0.0f ? w : 0.0f;
            h = h > 0.0f ? h : 0.0f;
            float inter = w * h;
            iou[i * m + j] = inter / (area1 + area2 - inter);
        }
    }
}
