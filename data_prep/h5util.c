/* HDF5 writing helpers for the shard and index writers: every call checked, with the
 * dataset name in the message. Every dataset is chunked with HDF5's Fletcher32
 * checksum filter (the reader, src/data/shard.c, requires it): each file is written
 * by one process with the POSIX driver, so filters need no parallel HDF5 support;
 * ranks only read them back, and parallel HDF5 reads filtered datasets (1.10.8 too). */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/h5_errors.h"
#include "prep.h"

int64_t prep_h5_check(int64_t r, const char *file, const char *what, const char *call, const char *src, int line) {
    if (r >= 0) return r;
    char reason[512];
    mrcnn_h5_reason(reason, sizeof reason);
    mrcnn_failf("HDF5", call, src, line, "writing %s (%s): %s", file, what, reason);
}

void prep_h5_file_name(int64_t loc, char *buf, size_t len) {
    if (H5Fget_name((hid_t)loc, buf, len) < 0) snprintf(buf, len, "(an HDF5 file)");
}

int64_t prep_h5_create(const char *path) {
    /* The 1.8 file format: its superblock and object headers (attributes included)
     * carry checksums, which the library verifies on every read. */
    hid_t fapl = PREP_H5(H5Pcreate(H5P_FILE_ACCESS), path, "file access list");
    PREP_H5(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18), path, "file access list");
    hid_t f = PREP_H5(H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl), path, "creating it");
    PREP_H5(H5Pclose(fapl), path, "file access list");
    return f;
}

int64_t prep_h5_dcpl_checksummed(int rank, const uint64_t *dims, size_t elem_bytes, size_t chunk_bytes,
                                 const char *name) {
    hsize_t row = elem_bytes;
    for (int i = 1; i < rank; i++) row *= dims[i];
    hsize_t chunk[4] = {1, 1, 1, 1};
    chunk[0] = chunk_bytes / (row ? row : 1);
    if (chunk[0] < 1) chunk[0] = 1;
    if (dims[0] > 0 && chunk[0] > dims[0]) chunk[0] = dims[0];
    for (int i = 1; i < rank; i++) chunk[i] = dims[i] ? dims[i] : 1;
    hid_t dcpl = MRCNN_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE), name);
    MRCNN_CHECK_HDF5(H5Pset_chunk(dcpl, rank, chunk), name);
    MRCNN_CHECK_HDF5(H5Pset_fletcher32(dcpl), name);
    return dcpl;
}

void prep_h5_write_chunked(int64_t loc, const char *name, int64_t type, int rank, const uint64_t *dims,
                           const void *data, size_t chunk_bytes) {
    char file[4096];
    prep_h5_file_name(loc, file, sizeof file);
    hsize_t d[4] = {0, 0, 0, 0}, maxd[4] = {0, 0, 0, 0};
    hsize_t total = 1;
    for (int i = 0; i < rank; i++) d[i] = maxd[i] = dims[i], total *= dims[i];
    if (d[0] == 0) maxd[0] = H5S_UNLIMITED; // a chunk of one row must fit the maximum size
    hid_t space = PREP_H5(H5Screate_simple(rank, d, maxd), file, name);
    hid_t lcpl = PREP_H5(H5Pcreate(H5P_LINK_CREATE), file, name);
    PREP_H5(H5Pset_create_intermediate_group(lcpl, 1), file, name);
    hid_t dcpl = (hid_t)prep_h5_dcpl_checksummed(rank, dims, H5Tget_size((hid_t)type), chunk_bytes, name);
    hid_t ds = PREP_H5(H5Dcreate2((hid_t)loc, name, (hid_t)type, space, lcpl, dcpl, H5P_DEFAULT), file, name);
    if (total > 0) PREP_H5(H5Dwrite(ds, (hid_t)type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), file, name);
    PREP_H5(H5Dclose(ds), file, name);
    PREP_H5(H5Pclose(dcpl), file, name);
    PREP_H5(H5Pclose(lcpl), file, name);
    PREP_H5(H5Sclose(space), file, name);
}

void prep_h5_write(int64_t loc, const char *name, int64_t type, int rank, const uint64_t *dims,
                   const void *data) {
    prep_h5_write_chunked(loc, name, type, rank, dims, data, PREP_H5_TABLE_CHUNK);
}

void prep_h5_attr_i64(int64_t loc, const char *name, int64_t v) {
    char file[4096];
    prep_h5_file_name(loc, file, sizeof file);
    hid_t space = PREP_H5(H5Screate(H5S_SCALAR), file, name);
    hid_t a = PREP_H5(H5Acreate2((hid_t)loc, name, H5T_NATIVE_INT64, space, H5P_DEFAULT, H5P_DEFAULT), file, name);
    PREP_H5(H5Awrite(a, H5T_NATIVE_INT64, &v), file, name);
    PREP_H5(H5Aclose(a), file, name);
    PREP_H5(H5Sclose(space), file, name);
}

void prep_h5_attr_str(int64_t loc, const char *name, const char *v) {
    char file[4096];
    prep_h5_file_name(loc, file, sizeof file);
    hid_t t = PREP_H5(H5Tcopy(H5T_C_S1), file, name);
    PREP_H5(H5Tset_size(t, strlen(v) + 1), file, name);
    hid_t space = PREP_H5(H5Screate(H5S_SCALAR), file, name);
    hid_t a = PREP_H5(H5Acreate2((hid_t)loc, name, t, space, H5P_DEFAULT, H5P_DEFAULT), file, name);
    PREP_H5(H5Awrite(a, t, v), file, name);
    PREP_H5(H5Aclose(a), file, name);
    PREP_H5(H5Sclose(space), file, name);
    PREP_H5(H5Tclose(t), file, name);
}

void prep_h5_write_strings(int64_t loc, const char *name, int n, char *const *strs) {
    int64_t *off = MRCNN_MALLOC(sizeof(int64_t) * (n + 1), "string offsets");
    off[0] = 0;
    for (int i = 0; i < n; i++) off[i + 1] = off[i] + (int64_t)strlen(strs[i]);
    char *flat = MRCNN_MALLOC((size_t)off[n] + 1, "string bytes");
    for (int i = 0; i < n; i++) memcpy(flat + off[i], strs[i], (size_t)(off[i + 1] - off[i]));
    char oname[256];
    snprintf(oname, sizeof oname, "%s_offset", name);
    uint64_t d1 = (uint64_t)n + 1, d2 = (uint64_t)off[n];
    prep_h5_write(loc, oname, H5T_NATIVE_INT64, 1, &d1, off);
    prep_h5_write(loc, name, H5T_NATIVE_UINT8, 1, &d2, flat);
    free(off);
    free(flat);
}
