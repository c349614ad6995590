/* Image codecs: RGB, grayscale and CMYK (Adobe) JPEG, RGB and grayscale PNG decode to
 * RGB8; truncated and corrupt files are refused. Plus the resize shape rule. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

#include "../../src/data/data_internal.h"
#include "mrcnn/data.h"
#include "test_util.h"

enum { H = 37, W = 53 };

/* Smooth, so that 4:2:0 chroma subsampling stays close. */
static uint8_t ref_value(int y, int x, int c) { return (uint8_t)(60 + 2 * y + x + 30 * c); }

static unsigned char *encode_jpeg(int comps, J_COLOR_SPACE cs, unsigned long *len) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    unsigned char *out = NULL;
    jpeg_mem_dest(&c, &out, len);
    c.image_width = W;
    c.image_height = H;
    c.input_components = comps;
    c.in_color_space = cs;
    jpeg_set_defaults(&c);
    if (cs == JCS_CMYK) jpeg_set_colorspace(&c, JCS_CMYK);
    jpeg_set_quality(&c, 100, TRUE);
    jpeg_start_compress(&c, TRUE);
    uint8_t row[W * 4];
    while (c.next_scanline < H) {
        int y = (int)c.next_scanline;
        for (int x = 0; x < W; x++) {
            if (comps == 1) row[x] = ref_value(y, x, 0);
            else if (comps == 3) for (int k = 0; k < 3; k++) row[3 * x + k] = ref_value(y, x, k);
            else { /* Adobe CMYK stores inverted ink: c = R, m = G, y = B with k = 255 (no black) */
                for (int k = 0; k < 3; k++) row[4 * x + k] = ref_value(y, x, k);
                row[4 * x + 3] = 255;
            }
        }
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return out;
}

static void expect_close(const uint8_t *rgb, int gray, int tol) {
    int worst = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++) {
                int d = abs((int)rgb[(y * W + x) * 3 + c] - (int)ref_value(y, x, gray ? 0 : c));
                if (d > worst) worst = d;
            }
    if (worst > tol) fail_msg("decoded pixels differ by up to %d (> %d)", worst, tol);
}

static void test_jpeg_color_spaces(void **state) {
    (void)state;
    const struct { int comps; J_COLOR_SPACE cs; } cases[] = {{3, JCS_RGB}, {1, JCS_GRAYSCALE}, {4, JCS_CMYK}};
    for (size_t k = 0; k < 3; k++) {
        unsigned long len = 0;
        unsigned char *jpg = encode_jpeg(cases[k].comps, cases[k].cs, &len);
        uint8_t *rgb = NULL;
        size_t cap = 0;
        int h = 0, w = 0;
        char err[256];
        assert_true(mrcnn_image_decode(jpg, len, &rgb, &cap, &h, &w, err, sizeof err));
        assert_int_equal(h, H);
        assert_int_equal(w, W);
        expect_close(rgb, cases[k].comps == 1, cases[k].comps == 1 ? 2 : 12);
        if (cases[k].comps == 1)
            for (int p = 0; p < H * W; p++) assert_true(rgb[3 * p] == rgb[3 * p + 1] && rgb[3 * p] == rgb[3 * p + 2]);
        assert_true(mrcnn_image_check(jpg, len, &h, &w, err, sizeof err));
        /* Truncated: every cut short of the end is refused. */
        assert_false(mrcnn_image_decode(jpg, len * 2 / 3, &rgb, &cap, &h, &w, err, sizeof err));
        assert_non_null(strstr(err, "JPEG"));
        assert_false(mrcnn_image_check(jpg, len - 40, &h, &w, err, sizeof err));
        free(rgb);
        free(jpg);
    }
    uint8_t junk[600] = {0xFF, 0xD8, 0xFF};
    for (int i = 3; i < 600; i++) junk[i] = (uint8_t)(i * 7);
    int h, w;
    char err[256];
    assert_false(mrcnn_image_check(junk, sizeof junk, &h, &w, err, sizeof err));
    assert_false(mrcnn_image_check((const uint8_t *)"GIF89a....", 10, &h, &w, err, sizeof err));
    assert_non_null(strstr(err, "not a JPEG or PNG"));
}

static void test_png(void **state) {
    (void)state;
    for (int gray = 0; gray < 2; gray++) {
        uint8_t px[H * W * 3];
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int c = 0; c < (gray ? 1 : 3); c++) px[(y * W + x) * (gray ? 1 : 3) + c] = ref_value(y, x, c);
        png_image img;
        memset(&img, 0, sizeof img);
        img.version = PNG_IMAGE_VERSION;
        img.width = W;
        img.height = H;
        img.format = gray ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
        png_alloc_size_t len = 0;
        assert_true(png_image_write_to_memory(&img, NULL, &len, 0, px, 0, NULL));
        uint8_t *mem = malloc(len);
        assert_true(png_image_write_to_memory(&img, mem, &len, 0, px, 0, NULL));
        uint8_t *rgb = NULL;
        size_t cap = 0;
        int h = 0, w = 0;
        char err[256];
        assert_true(mrcnn_image_decode(mem, len, &rgb, &cap, &h, &w, err, sizeof err));
        assert_int_equal(h, H);
        assert_int_equal(w, W);
        expect_close(rgb, gray, 0);
        assert_false(mrcnn_image_check(mem, len / 2, &h, &w, err, sizeof err));
        free(rgb);
        free(mem);
    }
}

/* Sets the frame size in a baseline JPEG's SOF0 marker. */
static void jpeg_set_size(unsigned char *jpg, unsigned long len, unsigned h, unsigned w) {
    for (unsigned long i = 2; i + 9 < len; i++)
        if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) {
            jpg[i + 5] = (unsigned char)(h >> 8), jpg[i + 6] = (unsigned char)h;
            jpg[i + 7] = (unsigned char)(w >> 8), jpg[i + 8] = (unsigned char)w;
            return;
        }
    fail_msg("no SOF0 marker");
}

static uint32_t crc32_of(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return ~c;
}

/* An 8-byte signature, the IHDR chunk of an RGB8 PNG and an empty IDAT, with valid CRCs. */
static size_t png_header(uint8_t *out, uint32_t h, uint32_t w) {
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    uint8_t ihdr[17] = {'I', 'H', 'D', 'R', (uint8_t)(w >> 24), (uint8_t)(w >> 16), (uint8_t)(w >> 8), (uint8_t)w,
                        (uint8_t)(h >> 24), (uint8_t)(h >> 16), (uint8_t)(h >> 8), (uint8_t)h, 8, 2, 0, 0, 0};
    uint32_t crc = crc32_of(ihdr, sizeof ihdr);
    memcpy(out, sig, 8);
    const uint8_t len[4] = {0, 0, 0, 13};
    memcpy(out + 8, len, 4);
    memcpy(out + 12, ihdr, sizeof ihdr);
    const uint8_t c[4] = {(uint8_t)(crc >> 24), (uint8_t)(crc >> 16), (uint8_t)(crc >> 8), (uint8_t)crc};
    memcpy(out + 29, c, 4);
    /* an empty IDAT, so that png_read_info gets to the end of the header */
    const uint8_t idat[4] = {'I', 'D', 'A', 'T'};
    crc = crc32_of(idat, 4);
    const uint8_t chunk[12] = {0, 0, 0, 0, 'I', 'D', 'A', 'T', (uint8_t)(crc >> 24), (uint8_t)(crc >> 16),
                               (uint8_t)(crc >> 8), (uint8_t)crc};
    memcpy(out + 33, chunk, 12);
    return 45;
}

/* A header may not size the pixel buffer beyond MRCNN_MAX_IMAGE_PIXELS (a 200-byte JPEG
 * asked for 10.8 GB); just under the limit, the same short file fails as truncated. */
static void test_pixel_limit(void **state) {
    (void)state;
    unsigned long len = 0;
    unsigned char *jpg = encode_jpeg(3, JCS_RGB, &len);
    uint8_t *rgb = NULL;
    size_t cap = 0;
    int h = 0, w = 0;
    char err[256];
    jpeg_set_size(jpg, len, 65495, 54873);
    assert_false(mrcnn_image_decode(jpg, len, &rgb, &cap, &h, &w, err, sizeof err));
    if (!strstr(err, "JPEG of 54873x65495 = 3593907135 pixels: over the limit of 178956970")) fail_msg("%s", err);
    assert_true(cap == 0);
    assert_false(mrcnn_image_check(jpg, len, &h, &w, err, sizeof err));
    if (!strstr(err, "over the limit")) fail_msg("%s", err);
    jpeg_set_size(jpg, len, 13377, 13378); // 178,957,506 pixels: one row too many
    assert_false(mrcnn_image_check(jpg, len, &h, &w, err, sizeof err));
    if (!strstr(err, "over the limit")) fail_msg("%s", err);
    jpeg_set_size(jpg, len, 13377, 13377); // 178,944,129: allowed, then the data runs out
    assert_false(mrcnn_image_check(jpg, len, &h, &w, err, sizeof err));
    if (strstr(err, "over the limit")) fail_msg("%s", err);
    free(jpg);
    uint8_t png[64];
    size_t n = png_header(png, 65535, 65535);
    assert_false(mrcnn_image_decode(png, n, &rgb, &cap, &h, &w, err, sizeof err));
    if (!strstr(err, "PNG of 65535x65535 = 4294836225 pixels: over the limit") || strstr(err, "corrupt")) fail_msg("%s", err);
    assert_true(cap == 0);
    n = png_header(png, 13377, 13377);
    assert_false(mrcnn_image_check(png, n, &h, &w, err, sizeof err));
    if (strstr(err, "over the limit") || !strstr(err, "corrupt PNG")) fail_msg("%s", err);
    free(rgb);
}

static void test_resize_shape(void **state) {
    (void)state;
    int nh, nw;
    data_resize_shape(480, 640, 800, 1333, &nh, &nw);
    assert_int_equal(nh, 800);
    assert_int_equal(nw, 1067);
    data_resize_shape(400, 1200, 800, 1333, &nh, &nw); /* the long side caps: 1333 / 1200 */
    assert_int_equal(nw, 1333);
    assert_int_equal(nh, 444);
    data_resize_shape(640, 480, 800, 1333, &nh, &nw);
    assert_int_equal(nh, 1067);
    assert_int_equal(nw, 800);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jpeg_color_spaces),
        cmocka_unit_test(test_png),
        cmocka_unit_test(test_pixel_limit),
        cmocka_unit_test(test_resize_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
