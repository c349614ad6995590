/* Training checkpoints in HDF5 (layout in trainer.h). Written by rank 0 as a
 * temporary file, fsynced, then renamed: a reader never sees a partial file under
 * the final name, and a kill -9 mid-write leaves the previous checkpoint intact. */
#include "mrcnn/trainer.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"
#include "mrcnn/metrics.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_SCHEMA_VERSION 1

static void (*g_lock)(void) = NULL, (*g_unlock)(void) = NULL;

void mrcnn_checkpoint_set_lock(void (*lock)(void), void (*unlock)(void)) {
    g_lock = lock;
    g_unlock = unlock;
}
static void lock(void) {
    if (g_lock) g_lock();
}
static void unlock(void) {
    if (g_unlock) g_unlock();
}

static void attr_write(hid_t obj, const char *name, hid_t type, const void *v, const char *path) {
    hid_t sp = MRCNN_CHECK_HDF5(H5Screate(H5S_SCALAR), path);
    hid_t a = MRCNN_CHECK_HDF5(H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT), name);
    hid_t mem = type == H5T_STD_I32LE ? H5T_NATIVE_INT32 : type;
    MRCNN_CHECK_HDF5(H5Awrite(a, mem, v), name);
    H5Aclose(a);
    H5Sclose(sp);
}
static void attr_i64(hid_t obj, const char *name, int64_t v, const char *path) { attr_write(obj, name, H5T_NATIVE_INT64, &v, path); }
static void attr_f64(hid_t obj, const char *name, double v, const char *path) { attr_write(obj, name, H5T_NATIVE_DOUBLE, &v, path); }

static int attr_read(hid_t obj, const char *name, hid_t type, void *v) {
    if (H5Aexists(obj, name) <= 0) return 0;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return 0;
    herr_t r = H5Aread(a, type, v);
    H5Aclose(a);
    return r >= 0;
}
static int64_t need_i64(hid_t obj, const char *name, const char *path) {
    int64_t v = 0;
    MRCNN_CHECK(attr_read(obj, name, H5T_NATIVE_INT64, &v), "checkpoint %s: attribute '%s' missing", path, name);
    return v;
}
static double need_f64(hid_t obj, const char *name, const char *path) {
    double v = 0;
    MRCNN_CHECK(attr_read(obj, name, H5T_NATIVE_DOUBLE, &v), "checkpoint %s: attribute '%s' missing", path, name);
    return v;
}

/* Host copy of an arena (the arena itself on the CPU). */
static const float *arena_host(const mrcnn_backend *be, const mrcnn_arena *a, float **owned) {
    *owned = NULL;
    if (a->device == MRCNN_DEVICE_CPU) return (const float *)a->base;
    *owned = MRCNN_MALLOC(a->size, "host copy of an arena for the checkpoint");
    mrcnn_tensor t = mrcnn_arena_flat(a);
    be->read(be, &t, *owned);
    return *owned;
}

static void write_group(hid_t file, const char *group, const mrcnn_backend *be, const mrcnn_arena *a,
                        const char *path) {
    float *owned;
    const float *host = arena_host(be, a, &owned);
    hid_t lcpl = MRCNN_CHECK_HDF5(H5Pcreate(H5P_LINK_CREATE), path);
    MRCNN_CHECK_HDF5(H5Pset_create_intermediate_group(lcpl, 1), path);
    hid_t g = MRCNN_CHECK_HDF5(H5Gcreate2(file, group, lcpl, H5P_DEFAULT, H5P_DEFAULT), group);
    for (int i = 0; i < a->n_entries; i++) {
        const mrcnn_tensor *t = &a->entries[i].tensor;
        hsize_t dims[MRCNN_MAX_DIMS];
        for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
        hid_t sp = MRCNN_CHECK_HDF5(H5Screate_simple(t->ndim, dims, NULL), a->entries[i].name);
        /* Names like "backbone.body.conv1.weight" hold dots, not slashes: one level. */
        hid_t ds = MRCNN_CHECK_HDF5(H5Dcreate2(g, a->entries[i].name, H5T_IEEE_F32LE, sp, lcpl, H5P_DEFAULT,
                                               H5P_DEFAULT), a->entries[i].name);
        MRCNN_CHECK_HDF5(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                  host + a->entries[i].offset / sizeof(float)), a->entries[i].name);
        H5Dclose(ds);
        H5Sclose(sp);
    }
    H5Gclose(g);
    H5Pclose(lcpl);
    free(owned);
}

static void read_group(hid_t file, const char *group, const mrcnn_backend *be, mrcnn_arena *a, const char *path) {
    float *host = MRCNN_CALLOC(1, a->size ? a->size : 1, "host buffer for checkpoint load");
    hid_t g = H5Gopen2(file, group, H5P_DEFAULT);
    MRCNN_CHECK(g >= 0, "checkpoint %s: group '%s' missing", path, group);
    for (int i = 0; i < a->n_entries; i++) {
        const char *name = a->entries[i].name;
        const mrcnn_tensor *t = &a->entries[i].tensor;
        MRCNN_CHECK(H5Lexists(g, name, H5P_DEFAULT) > 0, "checkpoint %s: '%s/%s' missing", path, group, name);
        hid_t ds = MRCNN_CHECK_HDF5(H5Dopen2(g, name, H5P_DEFAULT), name);
        hid_t sp = MRCNN_CHECK_HDF5(H5Dget_space(ds), name);
        hsize_t dims[MRCNN_MAX_DIMS] = {0};
        int nd = H5Sget_simple_extent_ndims(sp);
        MRCNN_CHECK(nd == t->ndim, "checkpoint %s: '%s/%s' has %d dims, the model wants %d", path, group, name, nd,
                    t->ndim);
        H5Sget_simple_extent_dims(sp, dims, NULL);
        for (int d = 0; d < nd; d++)
            MRCNN_CHECK((int64_t)dims[d] == t->shape[d],
                        "checkpoint %s: '%s/%s' dim %d is %lld, the model wants %lld", path, group, name, d,
                        (long long)dims[d], (long long)t->shape[d]);
        MRCNN_CHECK_HDF5(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                 host + a->entries[i].offset / sizeof(float)), name);
        H5Sclose(sp);
        H5Dclose(ds);
    }
    H5Gclose(g);
    if (a->device == MRCNN_DEVICE_CPU) {
        memcpy(a->base, host, a->size);
    } else {
        mrcnn_tensor flat = mrcnn_arena_flat(a);
        be->write(be, &flat, host);
        be->sync(be);
    }
    free(host);
}

static void fsync_path(const char *path, int dir) {
    int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    MRCNN_CHECK(fd >= 0, "checkpoint: cannot open %s to fsync it: %s", path, strerror(errno));
    MRCNN_CHECK(fsync(fd) == 0 || dir, "checkpoint: fsync of %s failed: %s", path, strerror(errno));
    close(fd);
}

static int is_ckpt_name(const char *n, long long *step) {
    int len = 0;
    if (sscanf(n, "model_%lld.h5%n", step, &len) != 1) return 0;
    return len == (int)strlen(n);
}

static int cmp_desc(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x < y) - (x > y);
}

/* Steps of dir/model_*.h5, newest first. */
static int list_steps(const char *dir, long long **steps) {
    *steps = NULL;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long s;
        if (!is_ckpt_name(e->d_name, &s)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            *steps = MRCNN_REALLOC(*steps, sizeof(long long) * cap, "checkpoint list");
        }
        (*steps)[n++] = s;
    }
    closedir(d);
    if (n) qsort(*steps, (size_t)n, sizeof(long long), cmp_desc);
    return n;
}

void mrcnn_checkpoint_save(const char *dir, const mrcnn_backend *be, const mrcnn_arena *params,
                           const mrcnn_arena *momentum, const mrcnn_train_state *st, const mrcnn_config *cfg,
                           int keep, char *path) {
    MRCNN_CHECK(mrcnn_mkdir_p(dir), "checkpoint: cannot create the directory %s: %s", dir, strerror(errno));
    char tmp[1100];
    snprintf(path, 1024, "%s/model_%07lld.h5", dir, (long long)st->step);
    snprintf(tmp, sizeof tmp, "%s/.model_%07lld.h5.tmp", dir, (long long)st->step);
    lock();
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    MRCNN_CHECK(f >= 0, "checkpoint: cannot create %s (is OUTPUT_DIR writable?)", tmp);
    int32_t schema = CKPT_SCHEMA_VERSION; // the model's schema (model.h), an int32 as it writes it
    attr_write(f, "schema_version", H5T_STD_I32LE, &schema, tmp);
    write_group(f, "/model", be, params, tmp);
    if (momentum) write_group(f, "/optimizer/momentum", be, momentum, tmp);
    char *yaml = mrcnn_config_dump(cfg);
    hid_t strt = MRCNN_CHECK_HDF5(H5Tcopy(H5T_C_S1), tmp);
    MRCNN_CHECK_HDF5(H5Tset_size(strt, strlen(yaml) + 1), tmp);
    hid_t sp = MRCNN_CHECK_HDF5(H5Screate(H5S_SCALAR), tmp);
    hid_t ds = MRCNN_CHECK_HDF5(H5Dcreate2(f, "config", strt, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "config");
    MRCNN_CHECK_HDF5(H5Dwrite(ds, strt, H5S_ALL, H5S_ALL, H5P_DEFAULT, yaml), "config");
    H5Dclose(ds);
    H5Sclose(sp);
    H5Tclose(strt);
    free(yaml);
    attr_i64(f, "step", st->step, tmp);
    attr_i64(f, "epoch", st->epoch, tmp);
    attr_i64(f, "loader_step", st->loader_step, tmp);
    attr_i64(f, "loader_batch", st->loader_batch, tmp);
    attr_i64(f, "images_seen", st->step * (int64_t)st->global_batch, tmp);
    attr_i64(f, "nonfinite", st->nonfinite, tmp);
    attr_i64(f, "loss_scale_enabled", st->scaler.enabled, tmp);
    attr_f64(f, "loss_scale", st->scaler.scale, tmp);
    attr_i64(f, "loss_scale_growth_interval", st->scaler.growth_interval, tmp);
    attr_i64(f, "loss_scale_clean_steps", st->scaler.clean_steps, tmp);
    attr_i64(f, "loss_scale_skipped", st->scaler.skipped, tmp);
    attr_f64(f, "lr", st->lr, tmp);
    attr_f64(f, "base_lr", st->base_lr, tmp);
    attr_i64(f, "world_size", st->world_size, tmp);
    attr_i64(f, "global_batch", st->global_batch, tmp);
    attr_i64(f, "seed", st->seed, tmp);
    attr_i64(f, "complete", 1, tmp);
    MRCNN_CHECK_HDF5(H5Fclose(f), tmp);
    unlock();
    fsync_path(tmp, 0);
    MRCNN_CHECK(rename(tmp, path) == 0, "checkpoint: rename %s -> %s failed: %s", tmp, path, strerror(errno));
    fsync_path(dir, 1);
    /* Keep the newest `keep`. */
    long long *steps;
    int n = list_steps(dir, &steps);
    for (int i = keep > 0 ? keep : n; i < n; i++) {
        char old[1100];
        snprintf(old, sizeof old, "%s/model_%07lld.h5", dir, steps[i]);
        if (unlink(old) != 0) mrcnn_warn("checkpoint: could not delete old %s: %s", old, strerror(errno));
    }
    free(steps);
    /* Temporary files of writes that were killed (the kill -9 case) go too. */
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, ".model_", 7) || n < 8 || strcmp(e->d_name + n - 7, ".h5.tmp")) continue;
        char old[1100];
        snprintf(old, sizeof old, "%s/%s", dir, e->d_name);
        unlink(old);
    }
    if (d) closedir(d);
}

int mrcnn_checkpoint_find_latest(const char *dir, char *path, size_t len) {
    long long *steps;
    int n = list_steps(dir, &steps), found = 0;
    lock();
    H5E_auto2_t old_fn;
    void *old_data;
    H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); // a damaged file is skipped, not an error
    for (int i = 0; i < n && !found; i++) {
        snprintf(path, len, "%s/model_%07lld.h5", dir, steps[i]);
        hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        if (f < 0) {
            mrcnn_warn("checkpoint %s is unreadable; trying an older one", path);
            continue;
        }
        int64_t complete = 0;
        if (attr_read(f, "complete", H5T_NATIVE_INT64, &complete) && complete == 1) found = 1;
        else mrcnn_warn("checkpoint %s is incomplete; trying an older one", path);
        H5Fclose(f);
    }
    H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
    unlock();
    free(steps);
    return found;
}

void mrcnn_checkpoint_load(const char *path, const mrcnn_backend *be, mrcnn_arena *params, mrcnn_arena *momentum,
                           mrcnn_train_state *st) {
    lock();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    MRCNN_CHECK(f >= 0, "checkpoint: cannot open %s", path);
    read_group(f, "/model", be, params, path);
    if (momentum) read_group(f, "/optimizer/momentum", be, momentum, path);
    if (st) {
        memset(st, 0, sizeof *st);
        MRCNN_CHECK(need_i64(f, "complete", path) == 1, "checkpoint %s is incomplete", path);
        st->step = need_i64(f, "step", path);
        st->epoch = need_i64(f, "epoch", path);
        st->loader_step = need_i64(f, "loader_step", path);
        st->loader_batch = (int)need_i64(f, "loader_batch", path);
        st->nonfinite = need_i64(f, "nonfinite", path);
        st->scaler.enabled = (int)need_i64(f, "loss_scale_enabled", path);
        st->scaler.scale = (float)need_f64(f, "loss_scale", path);
        st->scaler.growth_interval = (int)need_i64(f, "loss_scale_growth_interval", path);
        st->scaler.clean_steps = (int)need_i64(f, "loss_scale_clean_steps", path);
        st->scaler.skipped = need_i64(f, "loss_scale_skipped", path);
        st->lr = need_f64(f, "lr", path);
        st->base_lr = need_f64(f, "base_lr", path);
        st->world_size = (int)need_i64(f, "world_size", path);
        st->global_batch = (int)need_i64(f, "global_batch", path);
        st->seed = need_i64(f, "seed", path);
    }
    H5Fclose(f);
    unlock();
}
