/* The JPEG (libjpeg-turbo) writer of the synthetic dataset; PNG renders go through
 * mrcnn_png_write_rgb (png_write.h). */
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>

#include "prep.h"

int prep_jpeg_write(const char *path, const uint8_t *rgb, int h, int w, int quality) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr); // errors here are programming errors: libjpeg exits
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(rgb + (size_t)c.next_scanline * (size_t)w * 3);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return fclose(f) == 0;
}
