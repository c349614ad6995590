/* Pairwise IoU (torchvision's box_iou); the arithmetic is box_math.h's, shared with
 * the CUDA kernel and NMS. */
#include "mrcnn/boxes.h"
#include "mrcnn/check.h"

void mrcnn_box_iou(const float *a, int64_t n, const float *b, int64_t m, float *iou) {
    MRCNN_CHECK(n >= 0 && m >= 0, "box_iou: negative box count (%lld, %lld)", (long long)n, (long long)m);
    MRCNN_CHECK((n == 0 || a) && (m == 0 || b) && (n * m == 0 || iou), "box_iou: NULL argument");
#pragma omp parallel for schedule(static) if (n * m >= 65536)
    for (int64_t i = 0; i < n; i++) {
        const float *p = a + 4 * i;
        const float area1 = mrcnn_box_area(p);
        for (int64_t j = 0; j < m; j++) {
            const float *q = b + 4 * j;
            iou[i * m + j] = mrcnn_box_iou_areas(p, area1, q, mrcnn_box_area(q));
        }
    }
}
