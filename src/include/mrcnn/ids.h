/* Duplicate ids, one rule for every reader and writer of COCO data: pycocotools keys
 * annotations by id, so two annotations with one id would silently alias in an
 * evaluation. The converter (mrcnn-prep coco: skipped and counted, fatal under
 * --strict), `mrcnn-prep inspect --check` and evaluation all find them with this.
 * Implementation: src/core/ids.c. */
#ifndef MRCNN_IDS_H
#define MRCNN_IDS_H

#include <stdint.h>

/* Sets dup[i] = 1 for every ids[i] that appeared at a lower index (dup may be NULL) and
 * returns how many there are. For the first duplicate found (the smallest id), *id, and
 * *first and *again (the indices of its first and of a later occurrence) when non-NULL. */
int64_t mrcnn_ids_duplicates(const int64_t *ids, int64_t n, uint8_t *dup, int64_t *id, int64_t *first, int64_t *again);

#endif
