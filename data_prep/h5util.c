/* HDF5 writing helpers for the shard and index writers: every call checked, with the
 * dataset name in the message. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "prep.h"

void prep_h5_write(int64_t loc, const char *name, int64_t type, int rank, const uint64_t *dims,
                   const void *data) {
    hsize_t d[4] = {0, 0, 0, 0};
    hsize_t total = 1;
    for (int i = 0; i < rank; i++) d[i] = dims[i], total *= dims[i];
    hid_t space = MRCNN_CHECK_HDF5(H5Screate_simple(rank, d, NULL), name);
    hid_t lcpl = MRCNN_CHECK_HDF5(H5Pcreate(H5P_LINK_CREATE), name);
    MRCNN_CHECK_HDF5(H5Pset_create_intermediate_group(lcpl, 1), name);
    hid_t ds = MRCNN_CHECK_HDF5(H5Dcreate2((hid_t)loc, name, (hid_t)type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT), name);
    if (total > 0) MRCNN_CHECK_HDF5(H5Dwrite(ds, (hid_t)type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), name);
    MRCNN_CHECK_HDF5(H5Dclose(ds), name);
    MRCNN_CHECK_HDF5(H5Pclose(lcpl), name);
    MRCNN_CHECK_HDF5(H5Sclose(space), name);
}

void prep_h5_attr_i64(int64_t loc, const char *name, int64_t v) {
    hid_t space = MRCNN_CHECK_HDF5(H5Screate(H5S_SCALAR), name);
    hid_t a = MRCNN_CHECK_HDF5(H5Acreate2((hid_t)loc, name, H5T_NATIVE_INT64, space, H5P_DEFAULT, H5P_DEFAULT), name);
    MRCNN_CHECK_HDF5(H5Awrite(a, H5T_NATIVE_INT64, &v), name);
    MRCNN_CHECK_HDF5(H5Aclose(a), name);
    MRCNN_CHECK_HDF5(H5Sclose(space), name);
}

void prep_h5_attr_str(int64_t loc, const char *name, const char *v) {
    hid_t t = MRCNN_CHECK_HDF5(H5Tcopy(H5T_C_S1), name);
    MRCNN_CHECK_HDF5(H5Tset_size(t, strlen(v) + 1), name);
    hid_t space = MRCNN_CHECK_HDF5(H5Screate(H5S_SCALAR), name);
    hid_t a = MRCNN_CHECK_HDF5(H5Acreate2((hid_t)loc, name, t, space, H5P_DEFAULT, H5P_DEFAULT), name);
    MRCNN_CHECK_HDF5(H5Awrite(a, t, v), name);
    MRCNN_CHECK_HDF5(H5Aclose(a), name);
    MRCNN_CHECK_HDF5(H5Sclose(space), name);
    MRCNN_CHECK_HDF5(H5Tclose(t), name);
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
