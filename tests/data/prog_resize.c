/* prog_resize H W NH NW FLIP OUTDIR: a fixed pseudo-random image and mask through the
 * loader's transforms (mean 0, std 1), written as raw files for test_resize.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/data/data_internal.h"
#include "mrcnn/rng.h"

int main(int argc, char **argv) {
    if (argc != 7) return 2;
    const int h = atoi(argv[1]), w = atoi(argv[2]), nh = atoi(argv[3]), nw = atoi(argv[4]), flip = atoi(argv[5]);
    const int ch = nh + 5, cw = nw + 3; /* padding must come out zero */
    uint8_t *rgb = malloc((size_t)h * w * 3), *cm = malloc((size_t)h * w), *mask = malloc((size_t)ch * cw);
    float *out = malloc(sizeof(float) * (size_t)ch * cw * 3);
    mrcnn_rng r = mrcnn_rng_make(7, 0, 0, MRCNN_RNG_TEST);
    for (size_t i = 0; i < (size_t)h * w * 3; i++) rgb[i] = (uint8_t)mrcnn_rng_below(&r, i, 256);
    for (size_t i = 0; i < (size_t)h * w; i++) cm[i] = (uint8_t)(mrcnn_rng_below(&r, 1000000 + i, 3) == 0);
    const float mean[3] = {0, 0, 0}, std_[3] = {1, 1, 1};
    data_scratch sc;
    memset(&sc, 0, sizeof sc);
    data_resize_normalize(rgb, h, w, nh, nw, flip, mean, std_, out, ch, cw, &sc);
    data_mask_resize(cm, h, w, nh, nw, flip, mask, ch, cw, NULL, &sc);
    char p[4096];
    FILE *f;
    snprintf(p, sizeof p, "%s/in.u8", argv[6]);
    f = fopen(p, "wb"); fwrite(rgb, 1, (size_t)h * w * 3, f); fclose(f);
    snprintf(p, sizeof p, "%s/mask_cm.u8", argv[6]);
    f = fopen(p, "wb"); fwrite(cm, 1, (size_t)h * w, f); fclose(f);
    snprintf(p, sizeof p, "%s/out.f32", argv[6]);
    f = fopen(p, "wb"); fwrite(out, sizeof(float), (size_t)ch * cw * 3, f); fclose(f);
    snprintf(p, sizeof p, "%s/mask.u8", argv[6]);
    f = fopen(p, "wb"); fwrite(mask, 1, (size_t)ch * cw, f); fclose(f);
    data_scratch_free(&sc);
    free(rgb); free(cm); free(mask); free(out);
    return 0;
}
