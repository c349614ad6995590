#include "mrcnn/arena.h"
#include "mrcnn/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t align_up(size_t x) { return (x + MRCNN_ARENA_ALIGN - 1) / MRCNN_ARENA_ALIGN * MRCNN_ARENA_ALIGN; }

void mrcnn_arena_init(mrcnn_arena *a, const char *name, mrcnn_device device) {
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    a->device = device;
}

int mrcnn_arena_add(mrcnn_arena *a, const char *name, mrcnn_dtype dtype, int ndim, const int64_t *shape) {
    MRCNN_CHECK(a->base == NULL, "arena %s: cannot add '%s' after commit", a->name, name);
    MRCNN_CHECK(strlen(name) < MRCNN_ARENA_NAME_LEN, "arena %s: name '%s' longer than %d", a->name, name,
                MRCNN_ARENA_NAME_LEN - 1);
    MRCNN_CHECK(mrcnn_arena_index(a, name) < 0, "arena %s: duplicate name '%s'", a->name, name);
    if (a->n_entries == a->cap_entries) {
        a->cap_entries = a->cap_entries ? 2 * a->cap_entries : 64;
        a->entries = MRCNN_REALLOC(a->entries, (size_t)a->cap_entries * sizeof *a->entries, "arena entries");
    }
    mrcnn_arena_entry *e = &a->entries[a->n_entries];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->tensor = mrcnn_tensor_view(NULL, dtype, a->device, ndim, shape);
    e->offset = a->size;
    a->size += align_up(mrcnn_tensor_nbytes(&e->tensor));
    return a->n_entries++;
}

static void *host_alloc(size_t bytes, const char *what) {
    void *p = aligned_alloc(MRCNN_ARENA_ALIGN, align_up(bytes ? bytes : 1));
    MRCNN_CHECK(p != NULL, "out of host memory: %zu bytes for arena %s", bytes, what);
    memset(p, 0, bytes);
    return p;
}

void mrcnn_arena_commit(mrcnn_arena *a, void *base, mrcnn_free_fn free_fn) {
    MRCNN_CHECK(a->base == NULL, "arena %s committed twice", a->name);
    a->base = base ? base : host_alloc(a->size, a->name);
    a->free_fn = base ? free_fn : free;
    for (int i = 0; i < a->n_entries; i++) {
        a->entries[i].tensor.data = a->base + a->entries[i].offset;
        a->entries[i].tensor.device = a->device;
    }
}

void mrcnn_arena_init_like(mrcnn_arena *dst, const char *name, const mrcnn_arena *src, mrcnn_dtype dtype) {
    mrcnn_arena_init(dst, name, src->device);
    for (int i = 0; i < src->n_entries; i++) {
        const mrcnn_tensor *t = &src->entries[i].tensor;
        mrcnn_arena_add(dst, src->entries[i].name, dtype, t->ndim, t->shape);
    }
}

mrcnn_tensor *mrcnn_arena_get(mrcnn_arena *a, int index) {
    MRCNN_CHECK(index >= 0 && index < a->n_entries, "arena %s: index %d outside [0, %d)", a->name, index,
                a->n_entries);
    return &a->entries[index].tensor;
}

int mrcnn_arena_index(const mrcnn_arena *a, const char *name) {
    for (int i = 0; i < a->n_entries; i++)
        if (strcmp(a->entries[i].name, name) == 0) return i;
    return -1;
}

void mrcnn_arena_free(mrcnn_arena *a) {
    if (a->base && a->free_fn) a->free_fn(a->base);
    free(a->entries);
    memset(a, 0, sizeof *a);
}
