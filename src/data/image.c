/* JPEG (libjpeg-turbo) and PNG (libpng) decoding to RGB8. A corrupt or truncated file
 * must never pass as an image: libjpeg's recoverable warnings (a premature end of
 * data fills the rest with grey) count as failures here. */
#include "mrcnn/data.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    int warned;
    char warning[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_on_error(j_common_ptr c) {
    jpeg_err *e = (jpeg_err *)c->err;
    longjmp(e->jump, 1);
}

static void jpeg_on_message(j_common_ptr c, int level) {
    jpeg_err *e = (jpeg_err *)c->err;
    /* Level -1 is a warning about the data (corrupt or truncated); trace levels are >= 0. */
    if (level < 0 && !e->warned) {
        e->warned = 1;
        c->err->format_message(c, e->warning);
    }
}

static int is_jpeg(const uint8_t *d, size_t n) { return n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF; }
static int is_png(const uint8_t *d, size_t n) {
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    return n >= 8 && !memcmp(d, sig, 8);
}

static int grow(uint8_t **buf, size_t *cap, size_t need) {
    if (*cap >= need) return 1;
    uint8_t *p = realloc(*buf, need);
    if (!p) return 0;
    *buf = p;
    *cap = need;
    return 1;
}

/* scale_denom 1: full decode into *rgb; 8: validation at 1/8 scale into a scratch row. */
static int decode_jpeg(const uint8_t *data, size_t len, int scale_denom, uint8_t **rgb, size_t *cap,
                       int *h, int *w, char *err, size_t err_len) {
    struct jpeg_decompress_struct cinfo;
    jpeg_err jerr;
    memset(&jerr, 0, sizeof jerr);
    cinfo.err = jpeg_std_error(&jerr.pub);
    jerr.pub.error_exit = jpeg_on_error;
    jerr.pub.emit_message = jpeg_on_message;
    uint8_t *volatile row = NULL;
    if (setjmp(jerr.jump)) {
        char msg[JMSG_LENGTH_MAX];
        jerr.pub.format_message((j_common_ptr)&cinfo, msg);
        snprintf(err, err_len, "corrupt JPEG: %s", msg);
        jpeg_destroy_decompress(&cinfo);
        free(row);
        return 0;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, (const unsigned char *)data, (unsigned long)len);
    jpeg_read_header(&cinfo, TRUE);
    *h = (int)cinfo.image_height;
    *w = (int)cinfo.image_width;
    const int cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    const int gray = cinfo.jpeg_color_space == JCS_GRAYSCALE;
    cinfo.out_color_space = cmyk ? JCS_CMYK : gray ? JCS_GRAYSCALE : JCS_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned)scale_denom;
    jpeg_start_decompress(&cinfo);
    const int ow = (int)cinfo.output_width, oc = cinfo.output_components;
    row = malloc((size_t)ow * (size_t)oc);
    if (!row || (scale_denom == 1 && !grow(rgb, cap, (size_t)ow * cinfo.output_height * 3))) {
        snprintf(err, err_len, "out of memory decoding a %dx%d JPEG", *w, *h);
        jpeg_destroy_decompress(&cinfo);
        free(row);
        return 0;
    }
    /* Adobe CMYK JPEGs store inverted ink values (as PIL assumes when the Adobe marker is present). */
    const int inverted = cinfo.saw_Adobe_marker;
    while (cinfo.output_scanline < cinfo.output_height) {
        const size_t y = cinfo.output_scanline;
        uint8_t *dst = scale_denom == 1 ? *rgb + y * (size_t)ow * 3 : NULL;
        JSAMPROW rows[1] = {(dst && oc == 3) ? dst : row};
        jpeg_read_scanlines(&cinfo, rows, 1);
        if (!dst || oc == 3) continue;
        if (oc == 1) {
            for (int x = 0; x < ow; x++) dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = row[x];
        } else {
            for (int x = 0; x < ow; x++) {
                int c = row[4 * x], m = row[4 * x + 1], yy = row[4 * x + 2], k = row[4 * x + 3];
                if (!inverted) c = 255 - c, m = 255 - m, yy = 255 - yy, k = 255 - k;
                dst[3 * x] = (uint8_t)((c * k + 127) / 255);
                dst[3 * x + 1] = (uint8_t)((m * k + 127) / 255);
                dst[3 * x + 2] = (uint8_t)((yy * k + 127) / 255);
            }
        }
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    free(row);
    if (jerr.warned) {
        snprintf(err, err_len, "%s JPEG: %s",
                 strstr(jerr.warning, "Premature end") ? "truncated" : "corrupt", jerr.warning);
        return 0;
    }
    return 1;
}

static int decode_png(const uint8_t *data, size_t len, int want_pixels, uint8_t **rgb, size_t *cap,
                      int *h, int *w, char *err, size_t err_len) {
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&img, data, len)) {
        snprintf(err, err_len, "corrupt PNG: %s", img.message);
        return 0;
    }
    img.format = PNG_FORMAT_RGB;
    *h = (int)img.height;
    *w = (int)img.width;
    uint8_t *scratch = NULL;
    size_t scratch_cap = 0;
    uint8_t **dst = want_pixels ? rgb : &scratch;
    size_t *dcap = want_pixels ? cap : &scratch_cap;
    if (!grow(dst, dcap, PNG_IMAGE_SIZE(img))) {
        png_image_free(&img);
        snprintf(err, err_len, "out of memory decoding a %dx%d PNG", *w, *h);
        return 0;
    }
    int ok = png_image_finish_read(&img, NULL, *dst, 0, NULL);
    if (!ok) snprintf(err, err_len, "corrupt PNG: %s", img.message);
    png_image_free(&img);
    free(scratch);
    return ok;
}

int mrcnn_image_decode(const uint8_t *data, size_t len, uint8_t **rgb, size_t *cap, int *h, int *w,
                       char *err, size_t err_len) {
    if (is_jpeg(data, len)) return decode_jpeg(data, len, 1, rgb, cap, h, w, err, err_len);
    if (is_png(data, len)) return decode_png(data, len, 1, rgb, cap, h, w, err, err_len);
    snprintf(err, err_len, "not a JPEG or PNG file (%zu bytes)", len);
    return 0;
}

int mrcnn_image_check(const uint8_t *data, size_t len, int *h, int *w, char *err, size_t err_len) {
    if (is_jpeg(data, len)) return decode_jpeg(data, len, 8, NULL, NULL, h, w, err, err_len);
    if (is_png(data, len)) return decode_png(data, len, 0, NULL, NULL, h, w, err, err_len);
    snprintf(err, err_len, "not a JPEG or PNG file (%zu bytes)", len);
    return 0;
}
