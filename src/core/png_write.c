/* RGB8 PNG files through libpng's row API (png_write.h). The chunks and the zlib stream
 * are those of png_image_write_to_file for PNG_FORMAT_RGB (IHDR, sRGB perceptual, IDAT
 * with libpng's default filters and compression), plus tEXt when a title is given. */
#include "mrcnn/png_write.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include "mrcnn/png_catch.h"

int mrcnn_png_write_rgb(const char *path, const uint8_t *rgb, int h, int w, const char *title, char *err,
                        size_t err_len) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, err_len, "cannot write PNG '%s': %s", path, strerror(errno));
        return 0;
    }
    png_catch caught;
    memset(&caught, 0, sizeof caught);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &caught, png_catch_error, png_catch_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        snprintf(caught.msg, sizeof caught.msg, "out of memory starting a PNG encode");
        goto fail;
    }
    if (setjmp(caught.jump)) {
        png_destroy_write_struct(&png, &info);
        goto fail;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_sRGB(png, info, PNG_sRGB_INTENT_PERCEPTUAL);
    if (title) {
        png_text t = {.compression = PNG_TEXT_COMPRESSION_NONE, .key = "Title", .text = (char *)title};
        png_set_text(png, info, &t, 1);
    }
    png_write_info(png, info);
    for (int r = 0; r < h; r++) png_write_row(png, rgb + (size_t)r * w * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    if (fflush(f) != 0 || ferror(f)) {
        snprintf(caught.msg, sizeof caught.msg, "%s", strerror(errno));
        goto fail;
    }
    if (fclose(f) != 0) {
        f = NULL;
        snprintf(caught.msg, sizeof caught.msg, "%s", strerror(errno));
        goto fail;
    }
    return 1;
fail:
    if (f) fclose(f);
    remove(path);
    snprintf(err, err_len, "cannot write PNG '%s': %s", path, caught.msg);
    return 0;
}
