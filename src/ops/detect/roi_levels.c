/* The ROIAlign descriptor with torchvision's MultiScaleRoIAlign defaults. Its check and
 * the LevelMapper live with the op (src/ops/roi_align.c, box_math.h), which must not
 * depend on the model. */
#include <math.h>

#include "mrcnn/check.h"
#include "mrcnn/roi_align.h"

mrcnn_roi_align_desc mrcnn_roi_align_desc_make(int n_images, int channels, int n_levels, int first_level,
                                               const int *level_h, const int *level_w, int out_hw,
                                               int sampling_ratio, int aligned) {
    MRCNN_CHECK(n_levels > 0 && n_levels <= MRCNN_ROI_MAX_LEVELS, "roi_align: %d levels, must be in [1, %d]", n_levels,
                MRCNN_ROI_MAX_LEVELS);
    mrcnn_roi_align_desc d = {0};
    d.n_images = n_images;
    d.channels = channels;
    d.n_levels = n_levels;
    d.first_level = first_level;
    for (int l = 0; l < n_levels; l++) {
        d.level_h[l] = level_h[l];
        d.level_w[l] = level_w[l];
        d.spatial_scale[l] = ldexpf(1.0f, -(first_level + l));
    }
    d.canonical_level = 4;
    d.canonical_scale = 224.0f;
    d.out_h = d.out_w = out_hw;
    d.sampling_ratio = sampling_ratio;
    d.aligned = aligned;
    mrcnn_roi_align_desc_check(&d);
    return d;
}
