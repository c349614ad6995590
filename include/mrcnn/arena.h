/* Arenas: parameters, gradients and optimizer state each live in one contiguous
 * block, so that gradients are all-reduced in a few large buckets and one fused
 * kernel updates every weight. Views are registered first (plan), then one
 * allocation backs them all (commit). */
#ifndef MRCNN_ARENA_H
#define MRCNN_ARENA_H

#include "mrcnn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MRCNN_ARENA_ALIGN 256 /* bytes; what cuDNN/cuBLAS vector loads want */
#define MRCNN_ARENA_NAME_LEN 96

typedef struct mrcnn_arena_entry {
    char name[MRCNN_ARENA_NAME_LEN];
    size_t offset; // bytes from the arena base
    mrcnn_tensor tensor; // data is NULL until commit
} mrcnn_arena_entry;

typedef void (*mrcnn_free_fn)(void *p);

typedef struct mrcnn_arena {
    char name[32];
    mrcnn_device device;
    unsigned char *base; // one allocation, MRCNN_ARENA_ALIGN-aligned
    size_t size;         // bytes in use by the entries (padded)
    mrcnn_arena_entry *entries;
    int n_entries;
    int cap_entries;
    mrcnn_free_fn free_fn;
} mrcnn_arena;

void mrcnn_arena_init(mrcnn_arena *a, const char *name, mrcnn_device device);
/* Registers a named view and returns its index. Names must be unique. */
int mrcnn_arena_add(mrcnn_arena *a, const char *name, mrcnn_dtype dtype, int ndim,
                    const int64_t *shape);
/* Points every view into one block on a->device: base (a->size bytes, MRCNN_ARENA_ALIGN-
 * aligned, from the caller's allocator: a backend's), released by free_fn at
 * mrcnn_arena_free (NULL: the caller releases it); base NULL: a zeroed host block
 * (aligned_alloc, released with free). */
void mrcnn_arena_commit(mrcnn_arena *a, void *base, mrcnn_free_fn free_fn);
/* dst gets the same names, shapes and offsets as src, in dtype (e.g. gradients or
 * momentum beside the parameters). Not yet committed. */
void mrcnn_arena_init_like(mrcnn_arena *dst, const char *name, const mrcnn_arena *src,
                           mrcnn_dtype dtype);
mrcnn_tensor *mrcnn_arena_get(mrcnn_arena *a, int index);
/* -1 when absent. */
int mrcnn_arena_index(const mrcnn_arena *a, const char *name);
void mrcnn_arena_free(mrcnn_arena *a);

#ifdef __cplusplus
}
#endif
#endif
