/* Checkpoint schema v1: the model weights in HDF5 by parameter name.
 *   /                 attribute schema_version (int) = 1
 *   /model/<name>     one float32 dataset per parameter, project layout
 * The training checkpoint adds its own groups (optimizer state, step) beside /model.
 * Loading also takes backbone convs stored unfolded with their frozen BN
 * (/model/<bn>.weight, .bias, .running_mean, .running_var), as data_prep/weights.py
 * writes them from a torchvision state_dict, and folds the BN in. */
#include "mrcnn/check.h"
#include "mrcnn/model.h"

#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void write_dataset(hid_t g, const char *name, const mrcnn_tensor *t, const float *host) {
    hsize_t dims[MRCNN_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
    hid_t sp = MRCNN_CHECK_HDF5(H5Screate_simple(t->ndim, dims, NULL), name);
    hid_t ds = MRCNN_CHECK_HDF5(H5Dcreate2(g, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT,
                                           H5P_DEFAULT), name);
    MRCNN_CHECK_HDF5(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, host), name);
    H5Dclose(ds);
    H5Sclose(sp);
}

void mrcnn_checkpoint_write_model_group(const mrcnn_model *m, int64_t file_id) {
    hid_t f = (hid_t)file_id;
    hid_t g = MRCNN_CHECK_HDF5(H5Gcreate2(f, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "/model");
    const mrcnn_arena *a = &m->params.values;
    for (int i = 0; i < a->n_entries; i++) {
        const mrcnn_tensor *t = &a->entries[i].tensor;
        int64_t n = mrcnn_tensor_numel(t);
        float *h = MRCNN_MALLOC((size_t)n * sizeof(float), "checkpoint buffer");
        m->be->read(m->be, t, h);
        write_dataset(g, a->entries[i].name, t, h);
        free(h);
    }
    H5Gclose(g);
}

static void write_schema_attr(hid_t f) {
    hid_t sp = MRCNN_CHECK_HDF5(H5Screate(H5S_SCALAR), "schema_version");
    hid_t at = MRCNN_CHECK_HDF5(H5Acreate2(f, "schema_version", H5T_STD_I32LE, sp, H5P_DEFAULT,
                                           H5P_DEFAULT), "schema_version");
    int v = MRCNN_CHECKPOINT_SCHEMA_VERSION;
    MRCNN_CHECK_HDF5(H5Awrite(at, H5T_NATIVE_INT, &v), "schema_version");
    H5Aclose(at);
    H5Sclose(sp);
}

void mrcnn_checkpoint_save_model(const mrcnn_model *m, const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    MRCNN_CHECK(f >= 0, "checkpoint: cannot create %s", tmp);
    write_schema_attr(f);
    mrcnn_checkpoint_write_model_group(m, f);
    MRCNN_CHECK_HDF5(H5Fflush(f, H5F_SCOPE_GLOBAL), tmp);
    MRCNN_CHECK_HDF5(H5Fclose(f), tmp);
    // durable before visible: a crash leaves either the old file or the new one
    int fd = open(tmp, O_RDONLY);
    MRCNN_CHECK(fd >= 0, "checkpoint: cannot reopen %s to fsync", tmp);
    MRCNN_CHECK(fsync(fd) == 0, "checkpoint: fsync of %s failed", tmp);
    close(fd);
    MRCNN_CHECK(rename(tmp, path) == 0, "checkpoint: rename %s -> %s failed", tmp, path);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

static bool has_dataset(hid_t g, const char *name) {
    return H5Lexists(g, name, H5P_DEFAULT) > 0;
}

/* Fails naming the dataset unless /model/<name> exists with t's shape. */
static void check_dataset(hid_t g, const char *path, const char *name, const mrcnn_tensor *t) {
    hid_t ds = H5Dopen2(g, name, H5P_DEFAULT);
    MRCNN_CHECK(ds >= 0, "checkpoint %s: no dataset /model/%s", path, name);
    hid_t sp = MRCNN_CHECK_HDF5(H5Dget_space(ds), name);
    int nd = H5Sget_simple_extent_ndims(sp);
    hsize_t dims[16] = {0};
    H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    H5Dclose(ds);
    bool same = nd == t->ndim;
    for (int d = 0; same && d < nd; d++) same = dims[d] == (hsize_t)t->shape[d];
    char want[128];
    char got[128] = "(";
    for (int d = 0; d < nd && d < 8; d++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu", d ? ", " : "",
                 (unsigned long long)dims[d]);
    strncat(got, ")", sizeof got - strlen(got) - 1);
    MRCNN_CHECK(same, "checkpoint %s: /model/%s has shape %s but the model expects %s", path, name, got,
                mrcnn_tensor_shape_str(t, want, sizeof want));
}

/* Reads /model/<name> (checked by check_dataset first) into host. */
static void read_dataset(hid_t g, const char *name, float *host) {
    hid_t ds = MRCNN_CHECK_HDF5(H5Dopen2(g, name, H5P_DEFAULT), name);
    MRCNN_CHECK_HDF5(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, host), name);
    H5Dclose(ds);
}

/* Loads every parameter of the model from /model (all must be there unless
 * allow_missing); returns how many were loaded. */
static int read_group(mrcnn_model *m, hid_t f, const char *path, bool allow_missing) {
    MRCNN_CHECK(H5Lexists(f, "model", H5P_DEFAULT) > 0, "checkpoint %s: no /model group", path);
    hid_t g = MRCNN_CHECK_HDF5(H5Gopen2(f, "model", H5P_DEFAULT), path);
    mrcnn_arena *a = &m->params.values;
    int loaded = 0;
    for (int i = 0; i < a->n_entries; i++) {
        const char *name = a->entries[i].name;
        if (allow_missing && !has_dataset(g, name)) continue;
        loaded++;
        mrcnn_tensor *t = &a->entries[i].tensor;
        int64_t n = mrcnn_tensor_numel(t);
        const char *bn = m->params.bn[i];
        char key[2 * MRCNN_ARENA_NAME_LEN];
        snprintf(key, sizeof key, "%s.weight", bn);
        check_dataset(g, path, name, t);
        if (bn[0] && has_dataset(g, key)) {
            // an unfolded conv: fold its BN now, and its bias (the next entry) with it
            int k = (int)t->shape[0];
            MRCNN_CHECK(i + 1 < a->n_entries, "checkpoint: conv %s is not followed by its bias", name);
            mrcnn_tensor *tb = &a->entries[i + 1].tensor;
            MRCNN_CHECK(tb->ndim == 1 && tb->shape[0] == k, "checkpoint: conv %s is not followed by its bias",
                        name);
            const char *suffix[4] = {"weight", "bias", "running_mean", "running_var"};
            mrcnn_tensor vec = mrcnn_tensor_view(NULL, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1,
                                                 (int64_t[]){k});
            for (int j = 0; j < 4; j++) {
                snprintf(key, sizeof key, "%s.%s", bn, suffix[j]);
                check_dataset(g, path, key, &vec);
            }
            int had_bias = has_dataset(g, a->entries[i + 1].name);
            if (had_bias) check_dataset(g, path, a->entries[i + 1].name, tb);
            float *h = MRCNN_MALLOC((size_t)n * sizeof(float), "checkpoint buffer");
            float *bias = MRCNN_CALLOC((size_t)k, sizeof(float), "folded bias");
            float *bnp[4];
            for (int j = 0; j < 4; j++) {
                bnp[j] = MRCNN_MALLOC((size_t)k * sizeof(float), "bn buffer");
                snprintf(key, sizeof key, "%s.%s", bn, suffix[j]);
                read_dataset(g, key, bnp[j]);
            }
            read_dataset(g, name, h);
            if (had_bias) read_dataset(g, a->entries[i + 1].name, bias);
            mrcnn_frozen_bn_fold(h, bias, had_bias, k, n / k, bnp[0], bnp[1], bnp[2], bnp[3],
                                 MRCNN_FROZEN_BN_EPS);
            m->be->write(m->be, t, h);
            m->be->write(m->be, tb, bias);
            for (int j = 0; j < 4; j++) free(bnp[j]);
            free(bias);
            free(h);
            i++;
            loaded++;
            continue;
        }
        float *h = MRCNN_MALLOC((size_t)n * sizeof(float), "checkpoint buffer");
        read_dataset(g, name, h);
        m->be->write(m->be, t, h);
        free(h);
    }
    H5Gclose(g);
    return loaded;
}

void mrcnn_checkpoint_read_model_group(mrcnn_model *m, int64_t file_id, const char *path) {
    read_group(m, (hid_t)file_id, path, false);
}

static hid_t open_checkpoint(const char *path) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    MRCNN_CHECK(f >= 0, "checkpoint: cannot open %s", path);
    MRCNN_CHECK(H5Aexists(f, "schema_version") > 0, "checkpoint %s: no schema_version attribute", path);
    hid_t at = MRCNN_CHECK_HDF5(H5Aopen(f, "schema_version", H5P_DEFAULT), path);
    int v = 0;
    MRCNN_CHECK_HDF5(H5Aread(at, H5T_NATIVE_INT, &v), path);
    H5Aclose(at);
    MRCNN_CHECK(v == MRCNN_CHECKPOINT_SCHEMA_VERSION, "checkpoint %s: schema_version %d, this build reads %d",
                path, v, MRCNN_CHECKPOINT_SCHEMA_VERSION);
    return f;
}

void mrcnn_checkpoint_load_model(mrcnn_model *m, const char *path) {
    hid_t f = open_checkpoint(path);
    read_group(m, f, path, false);
    H5Fclose(f);
}

int mrcnn_checkpoint_load_model_partial(mrcnn_model *m, const char *path) {
    hid_t f = open_checkpoint(path);
    int n = read_group(m, f, path, true);
    H5Fclose(f);
    MRCNN_CHECK(n > 0, "checkpoint %s: none of the model's %d parameters is in /model", path,
                mrcnn_params_count(&m->params));
    return n;
}
