/* Decodes image files with the decoder that training, eval and `mrcnn predict` share
 * (mrcnn_image_decode) and with the converter's validation (mrcnn_image_check), for
 * tests/data/test_png_pil.sh:
 *   prog_png_decode IN OUT.rgb   writes the RGB8 pixels (h * w * 3 bytes) and prints "h w"
 * Exit 0, or 1 with the decoder's reason. */
#include <stdio.h>
#include <stdlib.h>

#include "mrcnn/data.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: prog_png_decode IN OUT.rgb\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", argv[1]);
        return 1;
    }
    size_t cap = 1 << 16, n = 0, got;
    uint8_t *data = malloc(cap);
    while ((got = fread(data + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) data = realloc(data, cap *= 2);
    }
    fclose(f);
    char err[512];
    int h = 0, w = 0, ch = 0, cw = 0;
    if (!mrcnn_image_check(data, n, &ch, &cw, err, sizeof err)) {
        fprintf(stderr, "%s: check: %s\n", argv[1], err);
        return 1;
    }
    uint8_t *rgb = NULL;
    size_t rgb_cap = 0;
    if (!mrcnn_image_decode(data, n, &rgb, &rgb_cap, &h, &w, err, sizeof err)) {
        fprintf(stderr, "%s: decode: %s\n", argv[1], err);
        return 1;
    }
    if (h != ch || w != cw) {
        fprintf(stderr, "%s: check says %dx%d, decode %dx%d\n", argv[1], ch, cw, h, w);
        return 1;
    }
    FILE *o = fopen(argv[2], "wb");
    if (!o || fwrite(rgb, 1, (size_t)h * w * 3, o) != (size_t)h * w * 3 || fclose(o) != 0) {
        fprintf(stderr, "cannot write %s\n", argv[2]);
        return 1;
    }
    printf("%d %d\n", h, w);
    free(data);
    free(rgb);
    return 0;
}
