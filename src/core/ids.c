/* Duplicate ids (ids.h). */
#include "mrcnn/ids.h"
#include "mrcnn/check.h"

#include <stdlib.h>

typedef struct {
    int64_t id, index;
} id_index;

static int cmp_id_index(const void *a, const void *b) {
    const id_index *x = a, *y = b;
    if (x->id != y->id) return (x->id > y->id) - (x->id < y->id);
    return (x->index > y->index) - (x->index < y->index);
}

int64_t mrcnn_ids_duplicates(const int64_t *ids, int64_t n, uint8_t *dup, int64_t *id, int64_t *first, int64_t *again) {
    if (n <= 1) return 0;
    id_index *v = MRCNN_MALLOC(sizeof *v * (size_t)n, "id list");
    for (int64_t i = 0; i < n; i++) v[i] = (id_index){ids[i], i};
    qsort(v, (size_t)n, sizeof *v, cmp_id_index);
    int64_t count = 0, run_start = 0;
    for (int64_t i = 1; i < n; i++) {
        if (v[i].id != v[i - 1].id) {
            run_start = i;
            continue;
        }
        if (dup) dup[v[i].index] = 1;
        if (count++ == 0) {
            if (id) *id = v[i].id;
            if (first) *first = v[run_start].index;
            if (again) *again = v[i].index;
        }
    }
    free(v);
    return count;
}
