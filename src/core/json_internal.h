/* Knobs of the JSON reader that only tests touch. */
#ifndef MRCNN_JSON_INTERNAL_H
#define MRCNN_JSON_INTERNAL_H

#include <stddef.h>

/* Size of the read buffer for files opened after this call (0: the default, 64 KiB).
 * Tests shrink it to a few bytes so that every token straddles a refill. */
void mrcnn_json_set_buffer_size(size_t bytes);

#endif
