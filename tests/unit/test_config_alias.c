/* YAML anchors and aliases in configs: an alias stands for the node its
 * anchor names, scalar, list or mapping, as in any YAML loader (PyYAML, what
 * detectron2 reads configs with), including the merge key `<<`. Before the fix the
 * alias event was dropped, so the next key became the value of the aliased one
 * (`WEIGHTS: *o` gave MODEL.WEIGHTS = "DEVICE") and every later key shifted. What
 * cannot be honoured (an unknown anchor, an alias of a mapping used as a key, ...)
 * fails naming file:line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrcnn/config.h"
#include "test_util.h"

static void load_ok(mrcnn_config *c, const char *name, const char *text) {
    const char *p = test_tmp_write(name, text);
    mrcnn_config_defaults(c);
    char err[1024] = "";
    if (!mrcnn_config_try_load(c, p, err, sizeof err)) fail_msg("%s: %s", name, err);
}

static void load_error(const char *name, const char *text, const char *needle1, const char *needle2) {
    const char *p = test_tmp_write(name, text);
    mrcnn_config c;
    mrcnn_config_defaults(&c);
    char err[1024] = "";
    if (mrcnn_config_try_load(&c, p, err, sizeof err)) fail_msg("%s loaded, expected an error", name);
    if (!strstr(err, needle1)) fail_msg("'%s' lacks '%s'", err, needle1);
    if (needle2 && !strstr(err, needle2)) fail_msg("'%s' lacks '%s'", err, needle2);
}

/* The case from the issue: the alias must not swallow the next key. */
static void test_scalar_alias_keeps_later_keys(void **state) {
    mrcnn_config c;
    load_ok(&c, "scalar.yaml",
            "OUTPUT_DIR: &o runs/x\n"
            "MODEL:\n"
            "  WEIGHTS: *o\n"
            "  DEVICE: cpu\n"
            "  ROI_HEADS:\n"
            "    NUM_CLASSES: &n 7\n"
            "SOLVER:\n"
            "  MAX_ITER: *n\n"
            "  CHECKPOINT_PERIOD: *n\n"
            "SEED: 5\n");
    assert_string_equal(c.output_dir, "runs/x");
    assert_string_equal(c.model_weights, "runs/x");
    assert_string_equal(c.model_device, "cpu");
    assert_int_equal(c.roi_num_classes, 7);
    assert_int_equal(c.solver_max_iter, 7);
    assert_int_equal(c.solver_checkpoint_period, 7);
    assert_true(c.seed == 5);
}

static void test_list_aliases(void **state) {
    mrcnn_config c;
    load_ok(&c, "list.yaml",
            "SOLVER:\n"
            "  STEPS: &s [10, &last 20]\n"
            "  MAX_ITER: *last\n"
            "INPUT:\n"
            "  MIN_SIZE_TRAIN: *s\n"
            "  FIXED_SIZE: [*last, 30]\n"
            "LOG_PERIOD: 3\n");
    assert_int_equal(c.solver_lr_milestones.n, 2);
    assert_int_equal(c.solver_lr_milestones.v[1], 20);
    assert_int_equal(c.solver_max_iter, 20);
    assert_int_equal(c.input_min_size_train.n, 2);
    assert_int_equal(c.input_min_size_train.v[0], 10);
    assert_int_equal(c.input_min_size_train.v[1], 20);
    assert_int_equal(c.input_fixed_size.n, 2);
    assert_int_equal(c.input_fixed_size.v[0], 20);
    assert_int_equal(c.input_fixed_size.v[1], 30);
    assert_int_equal(c.log_period, 3);
}

/* A mapping alias and the merge key: the two ROI heads share their pooler settings. */
static void test_mapping_alias_and_merge(void **state) {
    mrcnn_config c;
    load_ok(&c, "map.yaml",
            "MODEL:\n"
            "  ROI_BOX_HEAD: &pool\n"
            "    POOLER_RESOLUTION: 9\n"
            "    POOLER_SAMPLING_RATIO: 3\n"
            "  ROI_MASK_HEAD:\n"
            "    <<: *pool\n"
            "    NUM_CONV: 2\n"
            "    POOLER_SAMPLING_RATIO: 1\n"
            "  ROI_HEADS: {NUM_CLASSES: 4}\n");
    assert_int_equal(c.box_head_pooler_resolution, 9);
    assert_int_equal(c.box_head_sampling_ratio, 3);
    assert_int_equal(c.mask_head_pooler_resolution, 9);
    assert_int_equal(c.mask_head_sampling_ratio, 1); // the mapping's own key wins over the merge
    assert_int_equal(c.mask_head_num_conv, 2);
    assert_int_equal(c.roi_num_classes, 4);
    /* The explicit key first, the merge after it: the explicit one still wins (YAML's rule). */
    load_ok(&c, "map2.yaml",
            "MODEL:\n"
            "  ROI_BOX_HEAD: &pool {POOLER_RESOLUTION: 9, POOLER_SAMPLING_RATIO: 3}\n"
            "  ROI_MASK_HEAD:\n"
            "    POOLER_RESOLUTION: 28\n"
            "    <<: [*pool]\n"
            "    NUM_CONV: 3\n");
    assert_int_equal(c.mask_head_pooler_resolution, 28);
    assert_int_equal(c.mask_head_sampling_ratio, 3);
    assert_int_equal(c.mask_head_num_conv, 3);
    /* A whole mapping as a value. */
    load_ok(&c, "map3.yaml",
            "MODEL:\n"
            "  ROI_BOX_HEAD: &pool\n"
            "    POOLER_RESOLUTION: 5\n"
            "  ROI_MASK_HEAD: *pool\n"
            "SEED: 9\n");
    assert_int_equal(c.mask_head_pooler_resolution, 5);
    assert_true(c.seed == 9);
}

static void test_alias_errors_name_file_line(void **state) {
    load_error("undefined.yaml", "SOLVER:\n  MAX_ITER: 5\n  STEPS: *nope\n", "undefined.yaml:3", "anchor 'nope'");
    /* the anchored mapping's keys do not exist under the other parent */
    load_error("wrong_parent.yaml",
               "MODEL:\n  ROI_BOX_HEAD: &b\n    FC_DIM: 64\n  ROI_MASK_HEAD: *b\n",
               "wrong_parent.yaml:4", "unknown key 'MODEL.ROI_MASK_HEAD.FC_DIM'");
    load_error("scalar_for_list.yaml", "SEED: &s 3\nSOLVER:\n  STEPS: *s\n", "scalar_for_list.yaml:3",
               "SOLVER.STEPS expects a list");
    load_error("merge_scalar.yaml", "SEED: &s 3\nSOLVER:\n  <<: *s\n", "merge_scalar.yaml:3", "<<");
    load_error("map_key.yaml", "MODEL:\n  RPN: &r {NMS_THRESH: 0.5}\n  *r : 1\n", "map_key.yaml:3", NULL);
    load_error("recursive.yaml", "MODEL:\n  RPN: &r\n    NMS_THRESH: *r\n", "recursive.yaml:3", NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_alias_keeps_later_keys),
        cmocka_unit_test(test_list_aliases),
        cmocka_unit_test(test_mapping_alias_and_merge),
        cmocka_unit_test(test_alias_errors_name_file_line),
    };
    return cmocka_run_group_tests_name("config_alias", tests, test_tmp_setup, test_tmp_teardown);
}
