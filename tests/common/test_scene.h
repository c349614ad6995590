/* Synthetic scenes shared by the whole-model tests (tests/model, tests/cuda): one
 * colour per class so that the tiny network can learn the task. */
#ifndef MRCNN_TEST_SCENE_H
#define MRCNN_TEST_SCENE_H

#include <stdbool.h>
#include <stdint.h>

#include "mrcnn/config.h"

/* Draws one instance filling box b (x1, y1, x2, y2, integral) as a rectangle or the
 * ellipse inscribed in it: mask (H, W) gets 1 inside, image (H, W, 3) the class's
 * colour (channel cls-1 at 1.0, the others at -0.5). */
void test_scene_draw(float *image, uint8_t *mask, int h, int w, const float b[4], int cls, bool ellipse);
/* Defaults with configs/tiny.yaml loaded (from $ROOT, else the working directory). */
void test_tiny_config(mrcnn_config *cfg);

#endif
