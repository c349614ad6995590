/* ROIAlign descriptor helpers and torchvision's LevelMapper (FPN paper eq. 1). */
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

void mrcnn_roi_align_desc_check(const mrcnn_roi_align_desc *d) {
    MRCNN_CHECK(d, "roi_align: NULL descriptor");
    MRCNN_CHECK(d->n_images > 0 && d->channels > 0, "roi_align: images %d and channels %d must be positive",
                d->n_images, d->channels);
    MRCNN_CHECK(d->n_levels > 0 && d->n_levels <= MRCNN_ROI_MAX_LEVELS, "roi_align: %d levels, must be in [1, %d]",
                d->n_levels, MRCNN_ROI_MAX_LEVELS);
    for (int l = 0; l < d->n_levels; l++) {
        MRCNN_CHECK(d->level_h[l] > 0 && d->level_w[l] > 0, "roi_align: level %d is %dx%d, must be positive", l,
                    d->level_h[l], d->level_w[l]);
        MRCNN_CHECK(d->spatial_scale[l] > 0, "roi_align: level %d scale %g must be positive", l,
                    (double)d->spatial_scale[l]);
    }
    MRCNN_CHECK(d->out_h > 0 && d->out_w > 0, "roi_align: output %dx%d must be positive", d->out_h, d->out_w);
    MRCNN_CHECK(d->canonical_scale > 0, "roi_align: canonical scale %g must be positive", (double)d->canonical_scale);
}

int mrcnn_roi_align_level(const mrcnn_roi_align_desc *d, const float *box) {
    if (d->n_levels == 1) return 0;
    /* In float and in torchvision's order: floor(lvl0 + log2(sqrt(area) / s0) + eps). */
    float area = (box[2] - box[0]) * (box[3] - box[1]);
    float s = sqrtf(area);
    float lvl = floorf(((float)d->canonical_level + log2f(s / d->canonical_scale)) + 1e-6f);
    int kmin = d->first_level, kmax = d->first_level + d->n_levels - 1;
    /* An empty box gives -inf, clamped to the lowest level as torch.clamp does. */
    if (!(lvl >= (float)kmin)) return 0;
    if (lvl > (float)kmax) return kmax - kmin;
    return (int)lvl - kmin;
}
