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

#include "mrcnn/png_catch.h"

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

/* Checked from the header, before any pixel buffer is sized by it. */
static int pixels_ok(long long h, long long w, const char *kind, char *err, size_t err_len) {
    if (h * w <= MRCNN_MAX_IMAGE_PIXELS) return 1;
    snprintf(err, err_len, "%s of %lldx%lld = %lld pixels: over the limit of %lld (PIL's decompression-bomb limit)",
             kind, w, h, h * w, MRCNN_MAX_IMAGE_PIXELS);
    return 0;
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
    if (!pixels_ok(*h, *w, "JPEG", err, err_len)) {
        jpeg_destroy_decompress(&cinfo);
        return 0;
    }
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

/* PNG through libpng's low-level API, to PIL's `Image.open(p).convert('RGB')` pixel for
 * pixel (the reference the models are trained and compared with). libpng's simplified
 * API converts 16-bit files to linear light and composites alpha onto black, which PIL
 * does not do. PIL's rules, per colour type:
 *   - alpha channels and tRNS transparency are dropped, never blended;
 *   - 16-bit RGB, RGBA and grey + alpha keep the high byte of each sample;
 *   - 16-bit grey opens as 32-bit integers ("I") and convert('RGB') clips them to 255;
 *   - 1/2/4-bit grey is scaled to 0..255 (x 255, 85, 17);
 *   - palette indices map through PLTE; an index past its end takes PIL's default
 *     entry, the grey ramp (i, i, i);
 *   - gAMA, sRGB, iCCP are ignored. */
typedef struct {
    png_catch errors; // png_catch.h
    const uint8_t *data;
    size_t len, pos;
} png_src;

static void png_on_read(png_structp png, png_bytep out, png_size_t n) {
    png_src *s = png_get_io_ptr(png);
    if (n > s->len - s->pos) png_error(png, "truncated file (read past the end of the data)");
    memcpy(out, s->data + s->pos, n);
    s->pos += n;
}

/* One row of unpacked samples (png_set_packing: 1 byte per sample below 8 bits; 16-bit
 * samples big-endian) to RGB8. */
static void png_row_to_rgb(const uint8_t *in, uint8_t *out, int w, int color, int depth, const png_color *pal,
                           int npal) {
    const int b = depth == 16 ? 2 : 1; // bytes per sample
    switch (color) {
    case PNG_COLOR_TYPE_GRAY:
    case PNG_COLOR_TYPE_GRAY_ALPHA: {
        const int step = (color == PNG_COLOR_TYPE_GRAY ? 1 : 2) * b;
        const int scale = depth == 1 ? 255 : depth == 2 ? 85 : depth == 4 ? 17 : 1;
        for (int x = 0; x < w; x++) {
            const uint8_t *p = in + (size_t)x * step;
            int v = p[0] * scale;                     // 1..8 bits, or 16-bit grey + alpha: the high byte
            if (depth == 16 && color == PNG_COLOR_TYPE_GRAY) { // PIL's "I" -> "RGB": clipped
                const int v16 = (p[0] << 8) | p[1];
                v = v16 > 255 ? 255 : v16;
            }
            out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = (uint8_t)v;
        }
        break;
    }
    case PNG_COLOR_TYPE_RGB:
    case PNG_COLOR_TYPE_RGB_ALPHA: {
        const int step = (color == PNG_COLOR_TYPE_RGB ? 3 : 4) * b;
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) out[3 * x + c] = in[(size_t)x * step + c * b]; // high byte first
        break;
    }
    default: // palette
        for (int x = 0; x < w; x++) {
            const int i = in[x];
            if (i < npal) out[3 * x] = pal[i].red, out[3 * x + 1] = pal[i].green, out[3 * x + 2] = pal[i].blue;
            else out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = (uint8_t)i;
        }
    }
}

static int decode_png(const uint8_t *data, size_t len, int want_pixels, uint8_t **rgb, size_t *cap,
                      int *h, int *w, char *err, size_t err_len) {
    png_src src;
    memset(&src, 0, sizeof src);
    src.data = data;
    src.len = len;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src.errors, png_catch_error, png_catch_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        if (png) png_destroy_read_struct(&png, NULL, NULL);
        snprintf(err, err_len, "out of memory starting a PNG decode");
        return 0;
    }
    uint8_t *volatile native = NULL; // the image (interlaced) or one row, as the file stores it
    uint8_t *volatile scratch = NULL; // RGB of one row when only validating
    png_bytep *volatile rows = NULL;  // (interlaced) row pointers into native
    volatile int too_big = 0;         // a valid header, over MRCNN_MAX_IMAGE_PIXELS: not corrupt
    if (setjmp(src.errors.jump)) {
        snprintf(err, err_len, "%s%s", too_big ? "" : "corrupt PNG: ", src.errors.msg);
        png_destroy_read_struct(&png, &info, NULL);
        free(native);
        free(scratch);
        free(rows);
        return 0;
    }
    png_set_read_fn(png, &src, png_on_read);
    png_read_info(png, info);
    png_uint_32 pw = 0, ph = 0;
    int depth = 0, color = 0, interlace = 0;
    png_get_IHDR(png, info, &pw, &ph, &depth, &color, &interlace, NULL, NULL);
    if (pw > 65535 || ph > 65535) png_error(png, "image larger than 65535 pixels on a side");
    if ((long long)pw * ph > MRCNN_MAX_IMAGE_PIXELS) {
        char msg[160];
        pixels_ok(ph, pw, "PNG", msg, sizeof msg);
        too_big = 1;
        png_error(png, msg);
    }
    *h = (int)ph;
    *w = (int)pw;
    png_colorp pal = NULL;
    int npal = 0;
    if (color == PNG_COLOR_TYPE_PALETTE && !png_get_PLTE(png, info, &pal, &npal)) png_error(png, "palette image without PLTE");
    if (depth < 8) png_set_packing(png); // one byte per sample, values unscaled
    const int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const size_t rowbytes = png_get_rowbytes(png, info);
    const size_t w3 = (size_t)pw * 3;
    if (want_pixels && !grow(rgb, cap, w3 * ph + 1)) png_error(png, "out of memory for the pixels");
    native = malloc(rowbytes * (passes > 1 ? (size_t)ph : 1) + 1);
    scratch = want_pixels ? NULL : malloc(w3 + 1);
    if (!native || (!want_pixels && !scratch)) png_error(png, "out of memory for the rows");
    if (passes > 1) {
        /* Adam7: every pass refines the whole image, which must be kept as stored. */
        rows = malloc(sizeof(png_bytep) * ((size_t)ph + 1));
        if (!rows) png_error(png, "out of memory for the rows");
        for (png_uint_32 y = 0; y < ph; y++) rows[y] = native + y * rowbytes;
        png_read_image(png, rows);
        for (png_uint_32 y = 0; y < ph; y++)
            png_row_to_rgb(native + y * rowbytes, want_pixels ? *rgb + y * w3 : scratch, (int)pw, color, depth, pal,
                           npal);
    } else {
        for (png_uint_32 y = 0; y < ph; y++) {
            png_read_row(png, native, NULL);
            png_row_to_rgb(native, want_pixels ? *rgb + y * w3 : scratch, (int)pw, color, depth, pal, npal);
        }
    }
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    free(native);
    free(scratch);
    free(rows);
    return 1;
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
