/* Synthetic scenes shared by the whole-model tests (tests/model, tests/cuda): one
 * colour per class so that the tiny network can learn the task. */
#ifndef MRCNN_TEST_SCENE_H
#define MRCNN_TEST_SCENE_H

#include <stdbool.h>
#include <stdint.h>

#include "mrcnn/config.h"
#include "mrcnn/model.h"

/* Draws one instance filling box b (x1, y1, x2, y2, integral) as a rectangle or the
 * ellipse inscribed in it: mask (H, W) gets 1 inside, image (H, W, 3) the class's
 * colour (channel cls-1 at 1.0, the others at -0.5). */
void test_scene_draw(float *image, uint8_t *mask, int h, int w, const float b[4], int cls, bool ellipse);
/* The whole-model tests' synthetic batch: TEST_BATCH_N images of TEST_BATCH_H x
 * TEST_BATCH_W, TEST_BATCH_G instances each (rectangles and ellipses in turn, classes
 * 1, 2, 3 in turn, boxes drawn from seed), gt[i] viewing image i's boxes, labels, masks. */
#define TEST_BATCH_N 2
#define TEST_BATCH_H 128
#define TEST_BATCH_W 128
#define TEST_BATCH_G 3
typedef struct {
    float images[TEST_BATCH_N * TEST_BATCH_H * TEST_BATCH_W * 3]; // (N, H, W, 3)
    int hw[TEST_BATCH_N * 2];                                     // (N, 2)
    float boxes[TEST_BATCH_N][TEST_BATCH_G * 4];                  // (N, G, 4)
    int32_t labels[TEST_BATCH_N][TEST_BATCH_G];                   // (N, G)
    uint8_t masks[TEST_BATCH_N][TEST_BATCH_G * TEST_BATCH_H * TEST_BATCH_W]; // (N, G, H, W)
    mrcnn_image_gt gt[TEST_BATCH_N];                              // (N)
} test_batch;
void test_batch_make(test_batch *s, uint64_t seed);
/* Defaults with configs/tiny.yaml loaded (from $ROOT, else the working directory). */
void test_tiny_config(mrcnn_config *cfg);

#endif
