/* A structure-aware HDF5 model for the shard and checkpoint targets: a file is read
 * once into a spec (every dataset's path, type, shape, layout and values, every scalar
 * attribute), the fuzz input is decoded as a list of edits to that spec (set or nudge a
 * value, resize, retype, change the rank, drop a dataset or its checksum, declare a huge
 * extent, edit attributes and byte strings), and the edited spec is written as a new,
 * well-formed HDF5 file: the readers' own validation is what gets exercised, not
 * libhdf5's parser (fuzz_shard_raw / fuzz_ckpt_raw do that). */
#ifndef MRCNN_FUZZ_H5SPEC_H
#define MRCNN_FUZZ_H5SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"

enum { H5S_I8, H5S_U8, H5S_I16, H5S_I32, H5S_I64, H5S_U64, H5S_F32, H5S_F64, H5S_STR, H5S_NTYPES };
enum { H5S_KIND_INT, H5S_KIND_FLOAT, H5S_KIND_STR };

#define H5S_MAX_RANK 32
#define H5S_MAX_DS 256
#define H5S_MAX_ATTR 64
#define H5S_MAX_ELEMS (1 << 22)

typedef struct {
    char path[160];
    int kind, type;
    int rank;
    uint64_t dims[H5S_MAX_RANK];
    size_t strsize;  // H5S_STR: bytes per string
    size_t n;        // elements held (kind INT/FLOAT) or bytes (STR)
    int64_t *iv;     // INT values, or STR bytes (one byte each)
    double *dv;      // FLOAT values
    int chunked, fletcher;
    int present, as_group;
    uint64_t big_rows; // > 0: dims[0] declared this large; only the held rows are written
} h5s_ds;

typedef struct {
    char obj[160]; // "/" or a dataset/group path
    char name[64];
    int type;      // H5S_I32, H5S_I64, H5S_F64, H5S_STR (others written as such too)
    int64_t iv;
    double dv;
    char sv[256];
    int present;
} h5s_attr;

typedef struct {
    h5s_ds ds[H5S_MAX_DS];
    int nds;
    h5s_attr at[H5S_MAX_ATTR];
    int nat;
    int v18; // write with libver bounds 1.8 (shards); else the library default (checkpoints)
} h5s_file;

/* Reads path into f (fails with fuzz_die: only used on the seeds at start-up). */
void h5s_read(h5s_file *f, const char *path);
void h5s_copy(h5s_file *dst, const h5s_file *src);
void h5s_free(h5s_file *f);
/* Writes f to path (no check-family calls: plain HDF5, errors ignored where the edit
 * made something HDF5 refuses; returns 0 when the file could not be created). */
int h5s_write(const h5s_file *f, const char *path);
/* Applies edits decoded from b to the files (one input may edit several files, e.g. the
 * index and its shard: datasets and attributes are numbered across them). */
void h5s_mutate(h5s_file **files, int nfiles, fuzz_bytes *b, int max_ops);

#endif
