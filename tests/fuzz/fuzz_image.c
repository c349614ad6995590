/* Image codecs (src/data/image.c): mrcnn_image_decode (the loader's full decode) and
 * mrcnn_image_check (the converter's validation, JPEG at 1/8 scale) on the same bytes.
 * Oracle: both accept or both reject, with the same size, and a decode fills exactly
 * h * w * 3 bytes (ASan checks the buffer). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "mrcnn/data.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = malloc(size ? size : 1);
    memcpy(copy, data, size);
    uint8_t *rgb = NULL;
    size_t cap = 0;
    int h = -1, w = -1, h2 = -1, w2 = -1;
    char err[512] = "", err2[512] = "";
    static int ok, ok2;
    ok = ok2 = 0;
    FUZZ_RUN(ok = mrcnn_image_decode(copy, size, &rgb, &cap, &h, &w, err, sizeof err));
    FUZZ_RUN(ok2 = mrcnn_image_check(copy, size, &h2, &w2, err2, sizeof err2));
    if (ok) {
        if (h < 1 || w < 1 || h > 65535 || w > 65535) fuzz_die("image: decoded a %dx%d image", h, w);
        if (cap < (size_t)h * (size_t)w * 3) fuzz_die("image: %dx%d decoded into %zu bytes", h, w, cap);
        uint8_t sum = 0;
        for (size_t i = 0; i < (size_t)h * (size_t)w * 3; i++) sum += rgb[i]; // every pixel readable
        __asm__ volatile("" : : "r"(sum));
    }
    if (ok != ok2 || (ok && (h != h2 || w != w2)))
        fuzz_die("image: decode says %d (%dx%d, '%s'), check says %d (%dx%d, '%s')", ok, h, w, err, ok2, h2, w2, err2);
    free(rgb);
    free(copy);
    return 0;
}
