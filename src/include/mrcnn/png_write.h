/* The one PNG encoder (libpng): the prediction overlays (src/eval), the loss plots
 * (src/train/plot.c) and mrcnn-prep's renders write their pictures through it.
 * Implementation: src/core/png_write.c. */
#ifndef MRCNN_PNG_WRITE_H
#define MRCNN_PNG_WRITE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* rgb (h, w, 3), 8 bits a sample, rows packed, as an RGB8 PNG file tagged sRGB (the
 * bytes libpng's png_image_write_to_file writes for PNG_FORMAT_RGB); title, when not
 * NULL, is stored in a tEXt "Title" chunk. Returns 1, or 0 with the reason in err and
 * the partial file removed. */
int mrcnn_png_write_rgb(const char *path, const uint8_t *rgb, int h, int w, const char *title, char *err,
                        size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
