/* The PNG writer (png_write.h): the bytes libpng's simplified API writes for RGB8 (what
 * the overlays and renders wrote before it), a title as one tEXt chunk beside them,
 * pixels that decode back unchanged, and failures that name the file and leave none. */
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrcnn/data.h"
#include "mrcnn/png_write.h"
#include "test_util.h"

static uint8_t *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(*len ? *len : 1);
    assert_int_equal(fread(buf, 1, *len, f), *len);
    fclose(f);
    return buf;
}

static uint8_t *pixels(int h, int w, uint32_t seed) {
    uint8_t *px = malloc((size_t)h * w * 3);
    for (size_t i = 0; i < (size_t)h * w * 3; i++) {
        seed = seed * 1664525u + 1013904223u;
        px[i] = (uint8_t)(i % 7 == 0 ? seed >> 24 : (i / 3) & 0xff); // smooth runs and noise
    }
    return px;
}

/* The file libpng's png_image_write_to_file makes of px. */
static uint8_t *reference(const uint8_t *px, int h, int w, size_t *len) {
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)w;
    img.height = (png_uint_32)h;
    img.format = PNG_FORMAT_RGB;
    const char *path = test_tmp_path("reference.png");
    assert_true(png_image_write_to_file(&img, path, 0, px, 0, NULL));
    return read_all(path, len);
}

static void expect_decodes_to(const uint8_t *file, size_t len, const uint8_t *px, int h, int w) {
    uint8_t *rgb = NULL;
    size_t cap = 0;
    int dh = 0, dw = 0;
    char err[256];
    assert_true(mrcnn_image_decode(file, len, &rgb, &cap, &dh, &dw, err, sizeof err));
    assert_int_equal(dh, h);
    assert_int_equal(dw, w);
    assert_memory_equal(rgb, px, (size_t)h * w * 3);
    free(rgb);
}

static void test_same_bytes_as_simplified_api(void **state) {
    (void)state;
    static const int sizes[][2] = {{1, 1}, {23, 37}, {100, 150}, {360, 640}};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int h = sizes[k][0], w = sizes[k][1];
        uint8_t *px = pixels(h, w, (uint32_t)k + 1);
        char err[512];
        const char *path = test_tmp_path("ours.png");
        assert_true(mrcnn_png_write_rgb(path, px, h, w, NULL, err, sizeof err));
        size_t n = 0, n_ref = 0;
        uint8_t *ours = read_all(path, &n), *ref = reference(px, h, w, &n_ref);
        assert_int_equal(n, n_ref);
        assert_memory_equal(ours, ref, n);
        expect_decodes_to(ours, n, px, h, w);
        free(ours);
        free(ref);
        free(px);
    }
}

static void test_title(void **state) {
    (void)state;
    const int h = 48, w = 64;
    uint8_t *px = pixels(h, w, 7);
    char err[512];
    const char *path = test_tmp_path("titled.png");
    assert_true(mrcnn_png_write_rgb(path, px, h, w, "total loss", err, sizeof err));
    size_t n = 0, n_ref = 0;
    uint8_t *ours = read_all(path, &n), *ref = reference(px, h, w, &n_ref);
    expect_decodes_to(ours, n, px, h, w);
    /* signature, IHDR (25 bytes), sRGB (13), then the title chunk; without it, the
     * reference file. */
    static const char text[] = "tEXtTitle\0total loss";
    const size_t chunk = 4 + (sizeof text - 1) + 4, at = 8 + 25 + 13;
    assert_int_equal(n, n_ref + chunk);
    assert_memory_equal(ours + at + 4, text, sizeof text - 1);
    assert_memory_equal(ours, ref, at);
    assert_memory_equal(ours + at + chunk, ref + at, n_ref - at);
    free(ours);
    free(ref);
    free(px);
}

static void test_failures(void **state) {
    (void)state;
    uint8_t px[3] = {1, 2, 3};
    char err[512];
    const char *path = test_tmp_path("no/such/dir/x.png");
    assert_false(mrcnn_png_write_rgb(path, px, 1, 1, NULL, err, sizeof err));
    assert_non_null(strstr(err, "cannot write PNG"));
    assert_non_null(strstr(err, "no/such/dir/x.png"));
    /* libpng rejects a zero-sized image after the file was created: it is removed. */
    path = test_tmp_path("empty.png");
    assert_false(mrcnn_png_write_rgb(path, px, 0, 1, NULL, err, sizeof err));
    assert_non_null(strstr(err, "empty.png"));
    assert_int_equal(access(path, F_OK), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_bytes_as_simplified_api),
        cmocka_unit_test(test_title),
        cmocka_unit_test(test_failures),
    };
    return cmocka_run_group_tests_name("png_write", tests, test_tmp_setup, test_tmp_teardown);
}
