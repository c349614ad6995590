/* Prediction pictures: detections drawn over the input image (masks blended in a
 * colour per instance, box outlines, "name 0.93" labels in a built-in 5x7 bitmap
 * font), written as PNG by mrcnn_png_write_rgb (png_write.h).
 * Implementation: src/eval/overlay.c, src/eval/font5x7.c. */
#ifndef MRCNN_OVERLAY_H
#define MRCNN_OVERLAY_H

#include <stddef.h>
#include <stdint.h>

#include "mrcnn/infer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MRCNN_FONT_W 5 /* glyph cell without spacing */
#define MRCNN_FONT_H 7

/* Column bitmaps of ASCII 32..126, 5 bytes per glyph, bit 0 the top row. */
extern const uint8_t mrcnn_font5x7[95][MRCNN_FONT_W];

/* Pixel width of text at scale (1 px gap between glyphs). */
int mrcnn_text_width(const char *text, int scale);
/* Draws text with its top-left corner at (x, y) into rgb (h, w, 3), clipped; characters
 * outside ASCII 32..126 draw as '?'. */
void mrcnn_draw_text(uint8_t *rgb, int h, int w, int x, int y, const char *text, int scale, const uint8_t color[3]);

/* Draws the instances with score >= score_thresh onto rgb (inst->h, inst->w, 3) in
 * place; names (n_names) label class c as names[c], else "class c+1". Returns how many
 * were drawn. */
int mrcnn_overlay_draw(uint8_t *rgb, const mrcnn_instances *inst, const char *const *names, int n_names,
                       float score_thresh);

#ifdef __cplusplus
}
#endif
#endif
