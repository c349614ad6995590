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
        cmocka_unit_test(test_resize_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
