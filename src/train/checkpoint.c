/* Training checkpoints in HDF5 (layout in train_checkpoint.h). Written by rank 0 as a
 * temporary file, fsynced, then renamed: a reader never sees a partial file under
 * the final name, and a kill -9 mid-write leaves the previous checkpoint intact. A
 * write that fails (disk full, file size limit, I/O error) is a fatal error naming the
 * file and the system's reason, and the temporary file is removed (check.h's cleanup
 * list), so it does not keep the disk full.
 *
 * The weights and their fold scales go through the model's /model writer and the
 * groups come back through its strict reader (checkpoint.h), so a training checkpoint
 * is a model file too: MODEL.WEIGHTS of a new run, or weights.py export, finds in it
 * the scales its folded convs trained with.
 *
 * Integrity: every weight and momentum dataset is one chunk with HDF5's Fletcher-32
 * filter, which HDF5 verifies on every read; the file uses the 1.8+ format, whose
 * superblock, object headers (attributes included: kept compact, in the root's header)
 * and group indexes carry checksums; the config is a compact dataset inside its object
 * header. A flipped byte anywhere in a checkpoint therefore fails its load. Loading
 * also rejects non-finite weights or momentum. Files written before checksums existed
 * (contiguous datasets) still load, without that verification. */
#include "mrcnn/train_checkpoint.h"
#include "mrcnn/check.h"
#include "mrcnn/checkpoint.h"
#include "mrcnn/h5_errors.h"
#include "mrcnn/log.h"
#include "mrcnn/metrics.h"
#include "mrcnn/run.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_SCHEMA_VERSION 1

/* The 1.10 file format: besides the checksummed superblock, object headers and group
 * indexes of 1.8, a dataset's single chunk is located from its (checksummed) object
 * header, not a v1 B-tree node without a checksum. Readable by HDF5 >= 1.10. */
#if H5_VERSION_GE(1, 10, 2)
#define MRCNN_H5_LIBVER_LOW H5F_LIBVER_V110
#else
#define MRCNN_H5_LIBVER_LOW H5F_LIBVER_V18
#endif

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

/* HDF5's automatic error printing is off while a checkpoint is written or read (the
 * HDF5 lock is held, so no other thread's report is hidden); a failure is one line with
 * the most telling entry of the error stack (mrcnn_h5_reason). */

/* ---- writing ---- */

/* A failed call while writing tmp: the one fatal exit (which removes tmp). */
static int64_t wcheck(int64_t r, const char *call, const char *what, const char *tmp, const char *file, int line) {
    if (r >= 0) return r;
    char reason[320];
    mrcnn_h5_reason(reason, sizeof reason);
    mrcnn_failf("checkpoint", call, file, line,
                "checkpoint: writing %s failed at '%s': %s (temporary file removed; older checkpoints kept)", tmp,
                what, reason);
}
#define W(call, what) wcheck((int64_t)(call), #call, (what), tmp, __FILE__, __LINE__)

static void attr_write(hid_t obj, const char *name, hid_t type, const void *v, const char *tmp) {
    hid_t sp = W(H5Screate(H5S_SCALAR), name);
    hid_t a = W(H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT), name);
    hid_t mem = type == H5T_STD_I32LE ? H5T_NATIVE_INT32 : type;
    W(H5Awrite(a, mem, v), name);
    W(H5Aclose(a), name);
    W(H5Sclose(sp), name);
}
static void attr_i64(hid_t obj, const char *name, int64_t v, const char *tmp) { attr_write(obj, name, H5T_NATIVE_INT64, &v, tmp); }
static void attr_f64(hid_t obj, const char *name, double v, const char *tmp) { attr_write(obj, name, H5T_NATIVE_DOUBLE, &v, tmp); }

static void attr_str(hid_t obj, const char *name, const char *v, const char *tmp) {
    hid_t t = W(H5Tcopy(H5T_C_S1), name);
    W(H5Tset_size(t, strlen(v) + 1), name);
    attr_write(obj, name, t, v, tmp);
    W(H5Tclose(t), name);
}

static int attr_read(hid_t obj, const char *name, hid_t type, void *v) {
    if (H5Aexists(obj, name) <= 0) return 0;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return 0;
    herr_t r = H5Aread(a, type, v);
    H5Aclose(a);
    return r >= 0;
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

int mrcnn_checkpoint_list(const char *dir, char ***paths) {
    long long *steps;
    int n = list_steps(dir, &steps);
    *paths = n ? MRCNN_CALLOC((size_t)n, sizeof(char *), "checkpoint paths") : NULL;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(dir) + 32;
        (*paths)[i] = MRCNN_MALLOC(len, "checkpoint path");
        snprintf((*paths)[i], len, "%s/model_%07lld.h5", dir, steps[i]);
    }
    free(steps);
    return n;
}

void mrcnn_checkpoint_list_free(char **paths, int n) {
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
}

void mrcnn_checkpoint_save(const char *dir, const mrcnn_backend *be, const mrcnn_arena *params,
                           float *const *fold_scale, const mrcnn_arena *momentum, const mrcnn_train_state *st, const mrcnn_config *cfg,
                           int keep, char *path) {
    MRCNN_CHECK(mrcnn_mkdir_p(dir), "checkpoint: cannot create the directory %s: %s", dir, strerror(errno));
    char tmp[1100];
    snprintf(path, 1024, "%s/model_%07lld.h5", dir, (long long)st->step);
    snprintf(tmp, sizeof tmp, "%s/.model_%07lld.h5.tmp", dir, (long long)st->step);
    /* From here until the rename, a fatal error anywhere removes the temporary file. */
    int cleanup = mrcnn_fail_cleanup_add(tmp);
    lock();
    mrcnn_h5_quiet q = mrcnn_h5_quiet_begin();
    /* The 1.8+ format: checksummed superblock, object headers and indexes. Up to 64
     * attributes stay compact, in the root group's (checksummed) object header. */
    hid_t fapl = W(H5Pcreate(H5P_FILE_ACCESS), "file access list");
    W(H5Pset_libver_bounds(fapl, MRCNN_H5_LIBVER_LOW, H5F_LIBVER_LATEST), "file format bounds");
    hid_t fcpl = W(H5Pcreate(H5P_FILE_CREATE), "file creation list");
    W(H5Pset_attr_phase_change(fcpl, 64, 48), "compact attributes");
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, fapl);
    if (f < 0) {
        char reason[320];
        mrcnn_h5_reason(reason, sizeof reason);
        mrcnn_failf("checkpoint", "H5Fcreate", __FILE__, __LINE__,
                    "checkpoint: cannot create %s: %s (is OUTPUT_DIR writable?)", tmp, reason);
    }
    W(H5Pclose(fcpl), "file creation list");
    W(H5Pclose(fapl), "file access list");
    int32_t schema = CKPT_SCHEMA_VERSION; // the model's schema (model.h), an int32 as it writes it
    attr_write(f, "schema_version", H5T_STD_I32LE, &schema, tmp);
    mrcnn_checkpoint_write_model_group(f, be, params, fold_scale, tmp);
    if (momentum) mrcnn_checkpoint_write_group(f, "/optimizer/momentum", be, momentum, tmp);
    char *yaml = mrcnn_config_dump(cfg);
    size_t ylen = strlen(yaml) + 1;
    hid_t strt = W(H5Tcopy(H5T_C_S1), "config");
    W(H5Tset_size(strt, ylen), "config");
    hid_t sp = W(H5Screate(H5S_SCALAR), "config");
    /* Compact (inside the checksummed object header) when it fits the 64 KiB limit. */
    hid_t dcpl = W(H5Pcreate(H5P_DATASET_CREATE), "config");
    if (ylen < 60000) W(H5Pset_layout(dcpl, H5D_COMPACT), "config");
    hid_t ds = W(H5Dcreate2(f, "config", strt, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT), "config");
    W(H5Dwrite(ds, strt, H5S_ALL, H5S_ALL, H5P_DEFAULT, yaml), "config");
    W(H5Dclose(ds), "config");
    W(H5Pclose(dcpl), "config");
    W(H5Sclose(sp), "config");
    W(H5Tclose(strt), "config");
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
    if (mrcnn_run_id()[0]) attr_str(f, "run_id", mrcnn_run_id(), tmp);
    attr_i64(f, "complete", 1, tmp);
    /* Closing writes what HDF5 still caches: a full disk often shows only here. */
    W(H5Fflush(f, H5F_SCOPE_GLOBAL), "flush");
    W(H5Fclose(f), "close");
    mrcnn_h5_quiet_end(q);
    unlock();
    fsync_path(tmp, 0);
    MRCNN_CHECK(rename(tmp, path) == 0, "checkpoint: rename %s -> %s failed: %s", tmp, path, strerror(errno));
    mrcnn_fail_cleanup_remove(cleanup);
    fsync_path(dir, 1);
    /* Keep the newest `keep` of this run's own: another run's files (higher-numbered
     * ones included) are neither counted nor deleted. */
    long long *steps;
    int n = list_steps(dir, &steps), mine = 0;
    for (int i = 0; i < n && keep > 0; i++) {
        char old[1100], id[MRCNN_RUN_ID_LEN];
        snprintf(old, sizeof old, "%s/model_%07lld.h5", dir, steps[i]);
        if (!mrcnn_checkpoint_run_id(old, id, sizeof id) || !mrcnn_run_owns_strictly(id)) continue;
        if (++mine <= keep) continue;
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

/* ---- reading ---- */

typedef struct {
    char *why;
    size_t len;
} why_buf;

static int why_fail(why_buf *w, const char *fmt, ...) MRCNN_PRINTF(2, 3);
static int why_fail(why_buf *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->why, w->len, fmt, ap);
    va_end(ap);
    return 0;
}

static const char *const k_i64_attrs[] = {"step", "epoch", "loader_step", "loader_batch", "nonfinite",
                                          "loss_scale_enabled", "loss_scale_growth_interval",
                                          "loss_scale_clean_steps", "loss_scale_skipped", "world_size",
                                          "global_batch", "seed"};

static int try_load_file(hid_t f, const mrcnn_arena *params, const mrcnn_arena *momentum, float *hp, float *hm,
                         mrcnn_train_state *st, why_buf *w) {
    int32_t schema = 0;
    if (!attr_read(f, "schema_version", H5T_NATIVE_INT32, &schema)) {
        char r[320];
        int sum = 0;
        sum = mrcnn_h5_reason(r, sizeof r);
        if (sum) return why_fail(w, "its root group (the attributes) fails its metadata checksum: the file is corrupt");
        return why_fail(w, "no readable 'schema_version' attribute (%s)", r);
    }
    if (schema != CKPT_SCHEMA_VERSION)
        return why_fail(w, "schema_version %d, this build reads %d", (int)schema, CKPT_SCHEMA_VERSION);
    int64_t complete = 0;
    if (!attr_read(f, "complete", H5T_NATIVE_INT64, &complete) || complete != 1)
        return why_fail(w, "incomplete (no 'complete' = 1 attribute: its write did not finish)");
    int64_t v[sizeof k_i64_attrs / sizeof k_i64_attrs[0]];
    for (size_t i = 0; i < sizeof k_i64_attrs / sizeof k_i64_attrs[0]; i++)
        if (!attr_read(f, k_i64_attrs[i], H5T_NATIVE_INT64, &v[i])) {
            int sum = 0;
            char r[320];
            sum = mrcnn_h5_reason(r, sizeof r);
            return why_fail(w, "attribute '%s' %s", k_i64_attrs[i],
                            sum ? "fails its metadata checksum: the file is corrupt" : "missing or unreadable");
        }
    double scale = 0, lr = 0, base_lr = 0;
    if (!attr_read(f, "loss_scale", H5T_NATIVE_DOUBLE, &scale)) return why_fail(w, "attribute 'loss_scale' missing");
    if (!attr_read(f, "lr", H5T_NATIVE_DOUBLE, &lr)) return why_fail(w, "attribute 'lr' missing");
    if (!attr_read(f, "base_lr", H5T_NATIVE_DOUBLE, &base_lr)) return why_fail(w, "attribute 'base_lr' missing");
    if (v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0 || !isfinite(scale) || !(scale > 0))
        return why_fail(w, "state attributes out of range (step %lld, epoch %lld, loader_step %lld, loader_batch %lld, "
                           "loss_scale %g)", (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3], scale);
    if (!mrcnn_checkpoint_try_read_group(f, "/model", params, hp, w->why, w->len)) return 0;
    if (momentum && !mrcnn_checkpoint_try_read_group(f, "/optimizer/momentum", momentum, hm, w->why, w->len)) return 0;
    if (st) {
        memset(st, 0, sizeof *st);
        st->step = v[0];
        st->epoch = v[1];
        st->loader_step = v[2];
        st->loader_batch = (int)v[3];
        st->nonfinite = v[4];
        st->scaler.enabled = (int)v[5];
        st->scaler.growth_interval = (int)v[6];
        st->scaler.clean_steps = (int)v[7];
        st->scaler.skipped = v[8];
        st->world_size = (int)v[9];
        st->global_batch = (int)v[10];
        st->seed = v[11];
        st->scaler.scale = (float)scale;
        st->lr = lr;
        st->base_lr = base_lr;
    }
    return 1;
}

static void arena_set(const mrcnn_backend *be, mrcnn_arena *a, const float *host) {
    if (a->device == MRCNN_DEVICE_CPU) {
        memcpy(a->base, host, a->size);
    } else {
        mrcnn_tensor flat = mrcnn_arena_flat(a);
        be->mem.write(be, &flat, host);
        be->mem.sync(be);
    }
}

int mrcnn_checkpoint_try_load(const char *path, const mrcnn_backend *be, mrcnn_arena *params, mrcnn_arena *momentum,
                              mrcnn_train_state *st, char *why, size_t why_len) {
    why_buf w = {why, why_len};
    if (why_len) why[0] = 0;
    float *hp = MRCNN_CALLOC(1, params->size ? params->size : 1, "host buffer for checkpoint load");
    float *hm = momentum ? MRCNN_CALLOC(1, momentum->size ? momentum->size : 1, "host buffer for checkpoint load")
                         : NULL;
    mrcnn_train_state s;
    lock();
    mrcnn_h5_quiet q = mrcnn_h5_quiet_begin();
    int ok;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        char r[320];
        mrcnn_h5_reason(r, sizeof r);
        ok = why_fail(&w, "unreadable as HDF5: %s", r);
    } else {
        ok = try_load_file(f, params, momentum, hp, hm, &s, &w);
        if (H5Fclose(f) < 0 && ok) {
            char r[320];
            mrcnn_h5_reason(r, sizeof r);
            ok = why_fail(&w, "closing failed: %s", r);
        }
    }
    H5Eclear2(H5E_DEFAULT);
    mrcnn_h5_quiet_end(q);
    unlock();
    if (ok) {
        arena_set(be, params, hp);
        if (momentum) arena_set(be, momentum, hm);
        if (st) *st = s;
    }
    free(hp);
    free(hm);
    return ok;
}

/* Entry i's scales in the open /fold_scale group g into s (K floats): 1 when read, 0
 * when the group has no such dataset, -1 (with why) when it is unusable. */
static int read_scale(hid_t g, const char *name, int64_t k, float *s, why_buf *w) {
    if (g < 0 || H5Lexists(g, name, H5P_DEFAULT) <= 0) return 0;
    hid_t ds = H5Dopen2(g, name, H5P_DEFAULT);
    hid_t sp = ds >= 0 ? H5Dget_space(ds) : -1;
    hsize_t dims[1] = {0};
    int ok = sp >= 0 && H5Sget_simple_extent_ndims(sp) == 1 && H5Sget_simple_extent_dims(sp, dims, NULL) == 1 &&
             (int64_t)dims[0] == k && H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, s) >= 0;
    if (sp >= 0) H5Sclose(sp);
    if (ds >= 0) H5Dclose(ds);
    if (ok) return 1;
    why_fail(w, "/fold_scale/%s is not (%lld) readable floats", name, (long long)k);
    return -1;
}

int mrcnn_checkpoint_fold_scales_match(const char *path, const mrcnn_arena *params, float *const *fold_scale,
                                       char *why, size_t why_len) {
    why_buf w = {why, why_len};
    if (why_len) why[0] = 0;
    lock();
    mrcnn_h5_quiet q = mrcnn_h5_quiet_begin();
    int ok = 1;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) ok = why_fail(&w, "unreadable as HDF5");
    /* A checkpoint written before the scales were stored says nothing to compare. */
    hid_t g = ok && H5Lexists(f, "fold_scale", H5P_DEFAULT) > 0 ? H5Gopen2(f, "fold_scale", H5P_DEFAULT) : -1;
    for (int i = 0; g >= 0 && ok && i < params->n_entries; i++) {
        const char *name = params->entries[i].name;
        const float *mine = fold_scale ? fold_scale[i] : NULL;
        int64_t k = params->entries[i].tensor.ndim ? params->entries[i].tensor.shape[0] : 0;
        float *s = MRCNN_MALLOC((size_t)(k ? k : 1) * sizeof(float), "fold scales of a checkpoint");
        int got = read_scale(g, name, k, s, &w);
        if (got < 0) ok = 0;
        else if (got && !mine)
            ok = why_fail(&w, "its %s trained with a frozen BN folded in (/fold_scale/%s), this process has no scale "
                              "for it", name, name);
        else if (!got && mine)
            ok = why_fail(&w, "its %s trained without a folded frozen BN, this process folds one into it", name);
        for (int64_t c = 0; ok && got && c < k; c++)
            if (s[c] != mine[c])
                ok = why_fail(&w, "its /fold_scale/%s[%lld] is %.9g, this process folded %.9g", name, (long long)c,
                              (double)s[c], (double)mine[c]);
        free(s);
    }
    if (g >= 0) H5Gclose(g);
    if (f >= 0) H5Fclose(f);
    H5Eclear2(H5E_DEFAULT);
    mrcnn_h5_quiet_end(q);
    unlock();
    return ok;
}

int mrcnn_checkpoint_run_id(const char *path, char *id, size_t len) {
    id[0] = 0;
    lock();
    mrcnn_h5_quiet q = mrcnn_h5_quiet_begin();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f >= 0 && H5Aexists(f, "run_id") > 0) {
        hid_t a = H5Aopen(f, "run_id", H5P_DEFAULT);
        hid_t t = a >= 0 ? H5Aget_type(a) : -1;
        size_t sz = t >= 0 ? H5Tget_size(t) : 0;
        if (t >= 0 && H5Tget_class(t) == H5T_STRING && !H5Tis_variable_str(t) && sz > 0 && sz <= len) {
            char buf[MRCNN_RUN_ID_LEN + 1] = "";
            if (sz <= sizeof buf && H5Aread(a, t, buf) >= 0) {
                buf[sz - 1] = 0;
                snprintf(id, len, "%s", buf);
            }
        }
        if (t >= 0) H5Tclose(t);
        if (a >= 0) H5Aclose(a);
    }
    if (f >= 0) H5Fclose(f);
    H5Eclear2(H5E_DEFAULT);
    mrcnn_h5_quiet_end(q);
    unlock();
    return f >= 0;
}
