/* Private: libpng's errors as the PNG decoder (src/data/image.c) and the writer
 * (src/core/png_write.c) catch them. Pass a png_catch as the error pointer with
 * png_catch_error and png_catch_warning; png_error copies its message to msg and
 * returns to setjmp(jump). Warnings never fail a decode or an encode (a decode's are
 * ancillary-chunk trouble that PIL reads through too). */
#ifndef MRCNN_PNG_CATCH_H
#define MRCNN_PNG_CATCH_H

#include <png.h>
#include <setjmp.h>
#include <stdio.h>

typedef struct {
    jmp_buf jump;
    char msg[256];
} png_catch;

static inline void png_catch_error(png_structp png, png_const_charp msg) {
    png_catch *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    longjmp(c->jump, 1);
}

static inline void png_catch_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

#endif
