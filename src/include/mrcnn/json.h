/* A streaming (pull) JSON reader with bounded memory: COCO's 450 MB annotation
 * files are read token by token, never as a whole tree. Errors say the line,
 * column and byte offset. Implementation: src/core/json.c. */
#ifndef MRCNN_JSON_H
#define MRCNN_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MRCNN_JSON_ERROR = -1,
    MRCNN_JSON_EOF = 0,      // end of input after the top-level value
    MRCNN_JSON_OBJECT_BEGIN,
    MRCNN_JSON_OBJECT_END,
    MRCNN_JSON_ARRAY_BEGIN,
    MRCNN_JSON_ARRAY_END,
    MRCNN_JSON_KEY,          // an object member's name (text via mrcnn_json_text)
    MRCNN_JSON_STRING,
    MRCNN_JSON_NUMBER,
    MRCNN_JSON_TRUE,
    MRCNN_JSON_FALSE,
    MRCNN_JSON_NULL
} mrcnn_json_token;

typedef struct mrcnn_json mrcnn_json; // opaque

/* NULL (with errno) when the file cannot be opened. */
mrcnn_json *mrcnn_json_open_file(const char *path);
/* Reads from memory the caller keeps alive. */
mrcnn_json *mrcnn_json_open_mem(const char *data, size_t len);
void mrcnn_json_close(mrcnn_json *j);

mrcnn_json_token mrcnn_json_next(mrcnn_json *j);
/* The current KEY or STRING, unescaped to UTF-8, NUL-terminated; *len may be NULL.
 * Valid until the next call. For NUMBER, the number's source text. */
const char *mrcnn_json_text(mrcnn_json *j, size_t *len);
double mrcnn_json_double(mrcnn_json *j);
/* Exact for integers up to 2^63 (COCO ids exceed 2^32); *ok = 0 when the current
 * number is not an integer in range. */
int64_t mrcnn_json_int64(mrcnn_json *j, int *ok);
/* After OBJECT_BEGIN or ARRAY_BEGIN: skips to the matching end. After any other
 * value token: nothing to do. Returns 0 on a syntax error. */
int mrcnn_json_skip(mrcnn_json *j);
/* "line 12, column 5 (byte 345): expected ',' or '}'"; after ERROR. */
const char *mrcnn_json_error(const mrcnn_json *j);
/* Position of the current token: 1-based line, byte offset. */
int64_t mrcnn_json_line(const mrcnn_json *j);
int64_t mrcnn_json_offset(const mrcnn_json *j);
/* Call to raise a semantic error ("bbox must have 4 numbers") at the current token;
 * mrcnn_json_error then reports it with the position. Returns MRCNN_JSON_ERROR. */
mrcnn_json_token mrcnn_json_fail(mrcnn_json *j, const char *fmt, ...);

/* Appends s to out as a JSON string literal with escapes (for writers). */
void mrcnn_json_write_string(FILE *out, const char *s);

#ifdef __cplusplus
}
#endif
#endif
