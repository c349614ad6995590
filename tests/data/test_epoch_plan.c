/* The loader's step plan (every rank computes it alone and they must agree) and the
 * config -> loader options mapping. */
#include <stdlib.h>
#include <string.h>

#include "../../src/data/data_internal.h"
#include "mrcnn/config.h"
#include "mrcnn/data.h"
#include "test_util.h"

static void check_epoch(int64_t n, int64_t gb, int grouping, const uint8_t *land, int64_t epoch, int64_t *out,
                        uint8_t *valid) {
    const int64_t steps = data_plan_epoch(n, gb, 99, epoch, 1, grouping, land, out, valid);
    int64_t l = 0;
    for (int64_t i = 0; i < n; i++) l += land[i];
    assert_int_equal(steps, grouping ? l / gb + (n - l) / gb : n / gb);
    uint8_t *seen = calloc((size_t)n, 1);
    for (int64_t s = 0; s < steps; s++)
        for (int64_t k = 0; k < gb; k++) {
            const int64_t g = out[s * gb + k];
            assert_true(g >= 0 && g < n);
            assert_false(seen[g]); /* at most once per epoch */
            seen[g] = 1;
            assert_true(valid[s * gb + k]);
            if (grouping) assert_int_equal(land[g], land[out[s * gb]]); /* one orientation per global batch */
        }
    free(seen);
}

static void test_plan(void **state) {
    (void)state;
    const int64_t n = 103;
    uint8_t land[103];
    for (int64_t i = 0; i < n; i++) land[i] = (uint8_t)((i * 7) % 3 != 0);
    int64_t *a = malloc(sizeof(int64_t) * n), *b = malloc(sizeof(int64_t) * n);
    uint8_t valid[103];
    for (int grouping = 0; grouping < 2; grouping++)
        for (int64_t gb = 1; gb <= 12; gb++)
            for (int64_t e = 0; e < 3; e++) check_epoch(n, gb, grouping, land, e, a, valid);
    /* Different epochs, different orders; the same epoch, the same order. */
    data_plan_epoch(n, 6, 99, 0, 1, 0, land, a, valid);
    data_plan_epoch(n, 6, 99, 1, 1, 0, land, b, valid);
    assert_true(memcmp(a, b, sizeof(int64_t) * 96) != 0);
    data_plan_epoch(n, 6, 99, 1, 1, 0, land, a, valid);
    assert_memory_equal(a, b, sizeof(int64_t) * 96);
    /* Evaluation: every image exactly once, the padding marked invalid. */
    int64_t *c = malloc(sizeof(int64_t) * 120);
    uint8_t v[120];
    const int64_t steps = data_plan_epoch(n, 12, 99, 5, 0, 0, land, c, v);
    assert_int_equal(steps, 9);
    int64_t valid_count = 0;
    for (int64_t k = 0; k < steps * 12; k++) {
        if (v[k]) assert_int_equal(c[k], valid_count++);
        assert_true(c[k] >= 0 && c[k] < n);
    }
    assert_int_equal(valid_count, n);
    EXPECT_FAIL(data_plan_steps(0, 4, 1, 0, land), "a plan needs images");
    free(a);
    free(b);
    free(c);
}

static void test_opts_from_config(void **state) {
    (void)state;
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    mrcnn_config_set(&cfg, "INPUT.MIN_SIZE_TRAIN=[640, 672, 704]", "test");
    mrcnn_config_set(&cfg, "SEED=77", "test");
    mrcnn_config_set(&cfg, "DATALOADER.NUM_WORKERS=3", "test");
    mrcnn_loader_opts o;
    mrcnn_loader_opts_from_config(&o, &cfg, 1);
    assert_int_equal(o.num_min_sizes, 3);
    assert_int_equal(o.min_sizes[2], 704);
    assert_int_equal(o.max_size, 1333);
    assert_int_equal(o.seed, 77);
    assert_int_equal(o.num_workers, 3);
    assert_int_equal(o.size_divisibility, 32);
    assert_true(o.flip && o.aspect_grouping && o.train);
    assert_true(o.pixel_mean[0] > 123.6f && o.pixel_mean[0] < 123.7f);
    assert_true(o.pixel_std[2] > 57.3f && o.pixel_std[2] < 57.4f);
    mrcnn_loader_opts_from_config(&o, &cfg, 0);
    assert_int_equal(o.num_min_sizes, 1);
    assert_int_equal(o.min_sizes[0], 800);
    assert_false(o.flip);
    mrcnn_config_set(&cfg, "INPUT.FIXED_SIZE=[800, 1344]", "test");
    mrcnn_config_set(&cfg, "INPUT.RANDOM_FLIP=none", "test");
    mrcnn_loader_opts_from_config(&o, &cfg, 1);
    assert_int_equal(o.fixed_h, 800);
    assert_int_equal(o.fixed_w, 1344);
    assert_false(o.flip);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_opts_from_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
