/* Checkpoint schema v1: the model weights in HDF5 by parameter name.
 *   /                 attribute schema_version (int) = 1
 *   /model/<name>     one float32 dataset per parameter, project layout
 * The training checkpoint adds its own groups (optimizer state, step) beside /model.
 * Two readers of /model: the strict one (mrcnn_checkpoint_load_model: every parameter,
 * each with the model's shape) and the lenient MODEL.WEIGHTS one (_partial: the
 * parameters the file has, the others left to their initialization; it logs which were
 * loaded, which initialized and which datasets went unused). Both read one parameter
 * the same way (read_param).
 * Loading also takes backbone convs stored unfolded with their frozen BN
 * (/model/<bn>.weight, .bias, .running_mean, .running_var), as data_prep/weights.py
 * writes them from a torchvision state_dict, and folds the BN in.
 * Integrity: datasets are written as one chunk with HDF5's Fletcher-32 checksum (the
 * 1.8+ file format, whose metadata is checksummed too), and HDF5 verifies it on every
 * read, so a flipped byte fails the load naming the dataset; weights holding Inf/NaN
 * are rejected too. Files without the filter (data_prep/weights.py, older checkpoints)
 * load without that verification. A failed write removes its temporary file. */
#include "mrcnn/check.h"
#include "mrcnn/h5_chunks.h"
#include "mrcnn/h5_errors.h"
#include "mrcnn/log.h"
#include "mrcnn/checkpoint.h"
#include "mrcnn/model.h"
#include "mrcnn/test_hooks.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The 1.10 file format: besides the checksummed superblock, object headers and group
 * indexes of 1.8, a dataset's single chunk is located from its (checksummed) object
 * header, not a v1 B-tree node without a checksum. Readable by HDF5 >= 1.10. */
#if H5_VERSION_GE(1, 10, 2)
#define MRCNN_H5_LIBVER_LOW H5F_LIBVER_V110
#else
#define MRCNN_H5_LIBVER_LOW H5F_LIBVER_V18
#endif

/* A failed HDF5 call while writing a model file (path: the temporary one, removed by
 * the fatal exit): one error line with the reason. */
static int64_t wcheck(int64_t r, const char *call, const char *what, const char *path, const char *file, int line) {
    if (r >= 0) return r;
    char reason[320];
    mrcnn_h5_reason(reason, sizeof reason);
    mrcnn_failf("checkpoint", call, file, line, "checkpoint: writing %s failed at '%s': %s (temporary file removed)",
                path, what, reason);
}
#define W(call, what, path) wcheck((int64_t)(call), #call, (what), (path), __FILE__, __LINE__)

static void write_dataset(hid_t g, const char *name, const mrcnn_tensor *t, const float *host, const char *path) {
    hsize_t dims[MRCNN_MAX_DIMS];
    int empty = t->ndim == 0;
    for (int d = 0; d < t->ndim; d++) {
        dims[d] = (hsize_t)t->shape[d];
        empty |= dims[d] == 0;
    }
    hid_t sp = W(H5Screate_simple(t->ndim, dims, NULL), name, path);
    /* One chunk of the whole tensor with the Fletcher-32 checksum, verified on read. */
    hid_t dcpl = W(H5Pcreate(H5P_DATASET_CREATE), name, path);
    if (!empty) {
        W(H5Pset_chunk(dcpl, t->ndim, dims), name, path);
        W(H5Pset_fletcher32(dcpl), name, path);
    }
    hid_t ds = W(H5Dcreate2(g, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT), name, path);
    W(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, host), name, path);
    W(H5Dclose(ds), name, path);
    W(H5Pclose(dcpl), name, path);
    W(H5Sclose(sp), name, path);
}

/* Every entry of a as one checksummed fp32 dataset of group (made with its parents),
 * from one host copy of the whole arena. */
static void write_arena_group(hid_t f, const char *group, const mrcnn_backend *be, const mrcnn_arena *a,
                              const char *path) {
    const float *host = (const float *)a->base;
    float *owned = NULL;
    if (a->device != MRCNN_DEVICE_CPU) {
        owned = MRCNN_MALLOC(a->size ? a->size : 1, "host copy of an arena for the checkpoint");
        mrcnn_tensor flat = mrcnn_tensor_view(a->base, MRCNN_DTYPE_F32, a->device, 1,
                                              (int64_t[]){(int64_t)(a->size / sizeof(float))});
        be->mem.read(be, &flat, owned);
        host = owned;
    }
    hid_t lcpl = W(H5Pcreate(H5P_LINK_CREATE), group, path);
    W(H5Pset_create_intermediate_group(lcpl, 1), group, path);
    hid_t g = W(H5Gcreate2(f, group, lcpl, H5P_DEFAULT, H5P_DEFAULT), group, path);
    /* Names like "backbone.body.conv1.weight" hold dots, not slashes: one level. */
    for (int i = 0; i < a->n_entries; i++)
        write_dataset(g, a->entries[i].name, &a->entries[i].tensor, host + a->entries[i].offset / sizeof(float), path);
    W(H5Gclose(g), group, path);
    W(H5Pclose(lcpl), group, path);
    free(owned);
}

void mrcnn_checkpoint_write_group(int64_t file_id, const char *group, const mrcnn_backend *be, const mrcnn_arena *a,
                                  const char *path) {
    write_arena_group((hid_t)file_id, group, be, a, path);
}

/* The per-channel scales folded into the model's conv weights: /fold_scale/<weight
 * name> (K) beside /model, so that a fine-tuned model, from a model file or a training
 * checkpoint, can be unfolded (data_prep/weights.py export) and trained on with the
 * same preconditioner. */
static void write_fold_scales(hid_t f, const mrcnn_arena *values, float *const *fold_scale, const char *path) {
    hid_t g = -1;
    for (int i = 0; fold_scale && i < values->n_entries; i++) {
        if (!fold_scale[i]) continue;
        if (g < 0) g = W(H5Gcreate2(f, "fold_scale", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "/fold_scale", path);
        int64_t k = values->entries[i].tensor.shape[0];
        mrcnn_tensor v = mrcnn_tensor_view(NULL, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, &k);
        write_dataset(g, values->entries[i].name, &v, fold_scale[i], path);
    }
    if (g >= 0) W(H5Gclose(g), "/fold_scale", path);
}

void mrcnn_checkpoint_write_model_group(int64_t file_id, const mrcnn_backend *be, const mrcnn_arena *values,
                                        float *const *fold_scale, const char *path) {
    write_arena_group((hid_t)file_id, "/model", be, values, path);
    write_fold_scales((hid_t)file_id, values, fold_scale, path);
}

static void write_schema_attr(hid_t f, const char *path) {
    hid_t sp = W(H5Screate(H5S_SCALAR), "schema_version", path);
    hid_t at = W(H5Acreate2(f, "schema_version", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT), "schema_version", path);
    int v = MRCNN_CHECKPOINT_SCHEMA_VERSION;
    W(H5Awrite(at, H5T_NATIVE_INT, &v), "schema_version", path);
    W(H5Aclose(at), "schema_version", path);
    W(H5Sclose(sp), "schema_version", path);
}

/* A model file alone, the pair of load_model: the tests and the fuzz seeds write one
 * (training writes its checkpoints with mrcnn_checkpoint_save, /model and more). */
MRCNN_TEST_HOOK void mrcnn_checkpoint_save_model(const mrcnn_model *m, const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    /* Until the rename, a fatal error anywhere removes the temporary file. */
    int cleanup = mrcnn_fail_cleanup_add(tmp);
    mrcnn_h5_quiet q = mrcnn_h5_quiet_begin(); // failures are reported as one line, with the reason
    /* The 1.8+ format: checksummed superblock, object headers and group indexes. */
    hid_t fapl = W(H5Pcreate(H5P_FILE_ACCESS), "file access list", tmp);
    W(H5Pset_libver_bounds(fapl, MRCNN_H5_LIBVER_LOW, H5F_LIBVER_LATEST), "file format bounds", tmp);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (f < 0) {
        char reason[320];
        mrcnn_h5_reason(reason, sizeof reason);
        mrcnn_failf("checkpoint", "H5Fcreate", __FILE__, __LINE__, "checkpoint: cannot create %s: %s", tmp, reason);
    }
    W(H5Pclose(fapl), "file access list", tmp);
    write_schema_attr(f, tmp);
    mrcnn_checkpoint_write_model_group(f, m->be, &m->params.values, m->params.fold_scale, tmp);
    W(H5Fflush(f, H5F_SCOPE_GLOBAL), "flush", tmp);
    W(H5Fclose(f), "close", tmp);
    mrcnn_h5_quiet_end(q);
    // durable before visible: a crash leaves either the old file or the new one
    int fd = open(tmp, O_RDONLY);
    MRCNN_CHECK(fd >= 0, "checkpoint: cannot reopen %s to fsync: %s", tmp, strerror(errno));
    MRCNN_CHECK(fsync(fd) == 0, "checkpoint: fsync of %s failed: %s", tmp, strerror(errno));
    close(fd);
    MRCNN_CHECK(rename(tmp, path) == 0, "checkpoint: rename %s -> %s failed: %s", tmp, path, strerror(errno));
    mrcnn_fail_cleanup_remove(cleanup);
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
    if (nd >= 0 && nd <= 16) H5Sget_simple_extent_dims(sp, dims, NULL); // HDF5 allows rank 32
    H5Sclose(sp);
    H5Dclose(ds);
    MRCNN_CHECK(nd >= 0 && nd <= 16, "checkpoint %s: dataset /model/%s has rank %d, a tensor has at most 16", path,
                name, nd);
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

/* Reads /model/<name> (checked by check_dataset first) into host: a checksum mismatch
 * (a flipped byte) or a non-finite value fails naming the file and the dataset. */
static void read_dataset_unit(hid_t g, const char *path, const char *name, float *host, int64_t n, const char *unit) {
    hid_t ds = MRCNN_CHECK_HDF5(H5Dopen2(g, name, H5P_DEFAULT), name);
    char why[256];
    MRCNN_CHECK(mrcnn_h5_chunks_whole(ds, why, sizeof why), "checkpoint %s: /model/%s: %s: the file is damaged", path,
                name, why);
    mrcnn_h5_quiet q = mrcnn_h5_quiet_begin();
    herr_t r = H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, host);
    char reason[320] = "";
    int checksum = 0;
    if (r < 0) checksum = mrcnn_h5_reason(reason, sizeof reason);
    mrcnn_h5_quiet_end(q);
    H5Dclose(ds);
    MRCNN_CHECK(r >= 0 || !checksum,
                "checkpoint %s: /model/%s fails its Fletcher-32 checksum: the file is corrupt (copy it again or use "
                "another checkpoint)", path, name);
    MRCNN_CHECK(r >= 0, "checkpoint %s: reading /model/%s failed: %s", path, name, reason);
    int64_t bad = 0, first = -1;
    for (int64_t k = 0; k < n; k++)
        if (!isfinite(host[k])) {
            if (!bad++) first = k;
        }
    MRCNN_CHECK(bad == 0,
                "checkpoint %s: /model/%s holds %lld non-finite values (of %lld), the first at %s %lld (%g): the "
                "weights are unusable", path, name, (long long)bad, (long long)n, unit, (long long)first,
                first >= 0 ? (double)host[first] : 0.0);
}

static void read_dataset(hid_t g, const char *path, const char *name, float *host, int64_t n) {
    read_dataset_unit(g, path, name, host, n, "element");
}

/* A frozen BN that folds into a usable map: finite (read_dataset checked), a variance
 * that is a variance (>= 0) and a scale that is not 0 (W' = 0 forgets W, and the
 * optimizer's s^2 and the export's W'/s need s != 0). Fails naming tensor and channel. */
static void check_frozen_bn(const char *path, const char *bn, const float *gamma, const float *var, int k) {
    for (int c = 0; c < k; c++) {
        MRCNN_CHECK(var[c] >= 0.0f,
                    "checkpoint %s: /model/%s.running_var[%d] = %g is negative: a frozen batch-norm's variance must be "
                    ">= 0", path, bn, c, (double)var[c]);
        float s = gamma[c] / sqrtf(var[c] + MRCNN_FROZEN_BN_EPS);
        MRCNN_CHECK(gamma[c] != 0.0f && s != 0.0f && isfinite(s),
                    "checkpoint %s: /model/%s.weight[%d] = %g gives the frozen batch-norm scale %g (running_var %g): a "
                    "scale must be finite and nonzero", path, bn, c, (double)gamma[c], (double)s, (double)var[c]);
    }
}

/* /fold_scale/<name> of the file into entry i, when the file has it. */
static void read_fold_scale(mrcnn_model *m, hid_t f, const char *path, int i) {
    const char *name = m->params.values.entries[i].name;
    if (H5Lexists(f, "fold_scale", H5P_DEFAULT) <= 0) return;
    hid_t g = MRCNN_CHECK_HDF5(H5Gopen2(f, "fold_scale", H5P_DEFAULT), path);
    if (has_dataset(g, name)) {
        int64_t k = m->params.values.entries[i].tensor.shape[0];
        mrcnn_tensor v = mrcnn_tensor_view(NULL, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 1, &k);
        check_dataset(g, path, name, &v);
        float *s = MRCNN_MALLOC((size_t)k * sizeof(float), "fold scale");
        read_dataset(g, path, name, s, k);
        for (int64_t c = 0; c < k; c++)
            MRCNN_CHECK(s[c] != 0.0f, "checkpoint %s: /fold_scale/%s[%lld] is 0: a folded scale must be nonzero", path,
                        name, (long long)c);
        mrcnn_params_set_fold_scale(&m->params, i, s, k);
        free(s);
    }
    H5Gclose(g);
}

/* The names in a group (its datasets, recursively: "a/b" for a nested one), for the
 * partial load's report of what went unused. */
typedef struct {
    char **names;
    int n, cap;
} name_list;

static herr_t collect_name(hid_t loc, const char *name, const H5O_info_t *info, void *op) {
    (void)loc;
    name_list *l = op;
    if (info->type != H5O_TYPE_DATASET) return 0;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->names = MRCNN_REALLOC(l->names, (size_t)l->cap * sizeof *l->names, "checkpoint names");
    }
    l->names[l->n++] = strdup(name);
    return 0;
}

static void list_datasets(hid_t f, const char *group, name_list *l) {
    if (H5Lexists(f, group, H5P_DEFAULT) <= 0) return;
    hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
    if (g < 0) return;
    /* Only a group in the symbol-table form that h5py and this project write: libhdf5
     * 1.10's walk of a damaged dense (fractal heap) link table frees garbage (found by
     * fuzz_ckpt_raw), and nothing here writes dense groups, so one is not listed. */
    H5G_info_t gi;
    if (H5Gget_info(g, &gi) < 0 || gi.storage_type != H5G_STORAGE_TYPE_SYMBOL_TABLE) {
        H5Eclear2(H5E_DEFAULT);
        H5Gclose(g);
        return;
    }
#if H5_VERSION_GE(1, 12, 0)
    H5Ovisit3(g, H5_INDEX_NAME, H5_ITER_INC, collect_name, l, H5O_INFO_BASIC);
#else
    H5Ovisit(g, H5_INDEX_NAME, H5_ITER_INC, collect_name, l);
#endif
    H5Gclose(g);
}

/* One line per kind, the names in full: "weights F: N tensors loaded: a, b, ...". */
static void report_names(const char *path, const char *what, int count, char **names, int n) {
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(names[i]) + 2;
    char *s = MRCNN_MALLOC(len, "checkpoint report");
    s[0] = 0;
    for (int i = 0, o = 0; i < n; i++) o += sprintf(s + o, "%s%s", i ? ", " : "", names[i]);
    mrcnn_info("weights %s: %d %s%s%s", path, count, what, n ? ": " : "", s);
    free(s);
}

/* Conv entry i stored unfolded with its frozen BN (/model/<bn>.weight, .bias,
 * .running_mean, .running_var): the BN folded into the conv and into its bias (entry
 * i + 1, zero when the file has none), the fold's scales kept for the preconditioner. */
static void read_folded_conv(mrcnn_model *m, hid_t g, const char *path, int i) {
    mrcnn_arena *a = &m->params.values;
    const char *name = a->entries[i].name;
    const char *bn = m->params.bn[i];
    mrcnn_tensor *t = &a->entries[i].tensor;
    const int64_t n = mrcnn_tensor_numel(t);
    char key[2 * MRCNN_ARENA_NAME_LEN];
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
        read_dataset_unit(g, path, key, bnp[j], k, "channel");
    }
    read_dataset(g, path, name, h, n);
    if (had_bias) read_dataset(g, path, a->entries[i + 1].name, bias, k);
    check_frozen_bn(path, bn, bnp[0], bnp[3], k);
    float *scale = MRCNN_MALLOC((size_t)k * sizeof(float), "fold scale");
    for (int c = 0; c < k; c++) scale[c] = bnp[0][c] / sqrtf(bnp[3][c] + MRCNN_FROZEN_BN_EPS); // as the fold
    mrcnn_params_set_fold_scale(&m->params, i, scale, k);
    free(scale);
    mrcnn_frozen_bn_fold(h, bias, had_bias, k, n / k, bnp[0], bnp[1], bnp[2], bnp[3],
                         MRCNN_FROZEN_BN_EPS);
    m->be->mem.write(m->be, t, h);
    m->be->mem.write(m->be, tb, bias);
    for (int j = 0; j < 4; j++) free(bnp[j]);
    free(bias);
    free(h);
}

/* Entry i of the model from /model (g), checked against the model's shape; returns the
 * entries it filled: 2 when it folded a BN into the conv and its bias, else 1. */
static int read_param(mrcnn_model *m, hid_t f, hid_t g, const char *path, int i) {
    mrcnn_arena *a = &m->params.values;
    const char *name = a->entries[i].name;
    mrcnn_tensor *t = &a->entries[i].tensor;
    const char *bn = m->params.bn[i];
    char key[2 * MRCNN_ARENA_NAME_LEN];
    snprintf(key, sizeof key, "%s.weight", bn);
    check_dataset(g, path, name, t);
    if (bn[0] && has_dataset(g, key)) {
        read_folded_conv(m, g, path, i);
        return 2;
    }
    const int64_t n = mrcnn_tensor_numel(t);
    float *h = MRCNN_MALLOC((size_t)n * sizeof(float), "checkpoint buffer");
    read_dataset(g, path, name, h, n);
    m->be->mem.write(m->be, t, h);
    free(h);
    if (bn[0]) read_fold_scale(m, f, path, i); // a folded checkpoint: the scales it stored
    return 1;
}

static hid_t open_model_group(hid_t f, const char *path) {
    MRCNN_CHECK(H5Lexists(f, "model", H5P_DEFAULT) > 0, "checkpoint %s: no /model group", path);
    return MRCNN_CHECK_HDF5(H5Gopen2(f, "model", H5P_DEFAULT), path);
}

/* The strict reader: every parameter of the model from /model, each there with the
 * model's shape. Returns how many were loaded. */
static int read_model_strict(mrcnn_model *m, hid_t f, const char *path) {
    hid_t g = open_model_group(f, path);
    int loaded = 0;
    for (int i = 0; i < m->params.values.n_entries;) {
        int c = read_param(m, f, g, path, i);
        i += c;
        loaded += c;
    }
    H5Gclose(g);
    return loaded;
}

/* What a partial load reports: the model's parameters it loads (folded BN included)
 * and those left to their initialization, and which datasets of the file it does not use. */
typedef struct {
    name_list file; // datasets of /model
    bool *used;     // (file.n)
    char **got, **init; // (n_entries) names of the model's parameters
    int n_got, n_init;
} partial_report;

/* Marks the file's datasets that entry name uses: its own, and a folded conv's four BN
 * tensors (bn: the BN's name). */
static void mark_used(partial_report *r, const char *name, const char *bn, bool folded) {
    for (int k = 0; k < r->file.n; k++) {
        const char *fn = r->file.names[k];
        if (!strcmp(fn, name)) r->used[k] = true;
        if (folded) {
            size_t bl = strlen(bn);
            if (!strncmp(fn, bn, bl) && fn[bl] == '.' &&
                (!strcmp(fn + bl + 1, "weight") || !strcmp(fn + bl + 1, "bias") ||
                 !strcmp(fn + bl + 1, "running_mean") || !strcmp(fn + bl + 1, "running_var")))
                r->used[k] = true;
        }
    }
}

/* Before the load: the file's /model datasets, and for each parameter whether the file
 * gives it (a folded conv's bias comes from its BN even when the file has no bias). */
static void partial_report_plan(partial_report *r, const mrcnn_model *m, hid_t f, hid_t g) {
    const mrcnn_arena *a = &m->params.values;
    list_datasets(f, "model", &r->file);
    r->used = MRCNN_CALLOC((size_t)(r->file.n ? r->file.n : 1), sizeof *r->used, "checkpoint names used");
    r->got = MRCNN_MALLOC((size_t)(a->n_entries ? a->n_entries : 1) * sizeof *r->got, "checkpoint report");
    r->init = MRCNN_MALLOC((size_t)(a->n_entries ? a->n_entries : 1) * sizeof *r->init, "checkpoint report");
    for (int i = 0; i < a->n_entries; i++) {
        const char *name = a->entries[i].name;
        char key[2 * MRCNN_ARENA_NAME_LEN];
        const char *bn = m->params.bn[i];
        bool folded = bn[0] && (snprintf(key, sizeof key, "%s.weight", bn), has_dataset(g, key));
        bool here = has_dataset(g, name);
        bool bias_of_folded = i > 0 && m->params.bn[i - 1][0] && has_dataset(g, a->entries[i - 1].name) &&
                              (snprintf(key, sizeof key, "%s.weight", m->params.bn[i - 1]), has_dataset(g, key)) &&
                              !bn[0];
        if (here || bias_of_folded) r->got[r->n_got++] = (char *)name;
        else r->init[r->n_init++] = (char *)name;
        mark_used(r, name, bn, folded);
    }
}

/* After the load: the three report lines (unused: /model's datasets no parameter took, and
 * everything in /extra); frees the report. */
static void partial_report_log(partial_report *r, hid_t f, const char *path) {
    char **unused = MRCNN_MALLOC((size_t)(r->file.n ? r->file.n : 1) * sizeof *unused, "checkpoint report");
    int n_unused = 0;
    for (int k = 0; k < r->file.n; k++)
        if (!r->used[k]) unused[n_unused++] = r->file.names[k];
    name_list extra = {0};
    list_datasets(f, "extra", &extra);
    for (int k = 0; k < extra.n; k++) {
        char *e = MRCNN_MALLOC(strlen(extra.names[k]) + 8, "checkpoint report");
        sprintf(e, "extra/%s", extra.names[k]);
        free(extra.names[k]);
        extra.names[k] = e;
    }
    report_names(path, "tensors loaded", r->n_got, r->got, r->n_got);
    report_names(path, "tensors initialized (not in the file)", r->n_init, r->init, r->n_init);
    unused = MRCNN_REALLOC(unused, (size_t)(n_unused + extra.n + 1) * sizeof *unused, "checkpoint report");
    for (int k = 0; k < extra.n; k++) unused[n_unused + k] = extra.names[k];
    report_names(path, "datasets unused", n_unused + extra.n, unused, n_unused + extra.n);
    for (int k = 0; k < r->file.n; k++) free(r->file.names[k]);
    for (int k = 0; k < extra.n; k++) free(extra.names[k]);
    free(r->file.names);
    free(extra.names);
    free(unused);
    free(r->used);
    free(r->got);
    free(r->init);
}

/* The lenient MODEL.WEIGHTS reader: the parameters /model has (each with the model's
 * shape), the others left to their initialization, logged (loaded, initialized, unused).
 * Returns how many were loaded. */
static int read_model_partial(mrcnn_model *m, hid_t f, const char *path) {
    hid_t g = open_model_group(f, path);
    const mrcnn_arena *a = &m->params.values;
    partial_report r = {0};
    partial_report_plan(&r, m, f, g);
    int loaded = 0;
    for (int i = 0; i < a->n_entries;) {
        if (!has_dataset(g, a->entries[i].name)) {
            i++;
            continue;
        }
        int c = read_param(m, f, g, path, i);
        i += c;
        loaded += c;
    }
    H5Gclose(g);
    partial_report_log(&r, f, path);
    return loaded;
}

static int why_fail(char *why, size_t len, const char *fmt, ...) MRCNN_PRINTF(3, 4);
static int why_fail(char *why, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return 0;
}

int mrcnn_checkpoint_try_read_group(int64_t file_id, const char *group, const mrcnn_arena *a, float *host, char *why,
                                    size_t len) {
    hid_t file = (hid_t)file_id;
    if (H5Lexists(file, group, H5P_DEFAULT) <= 0) return why_fail(why, len, "group '%s' missing", group);
    hid_t g = H5Gopen2(file, group, H5P_DEFAULT);
    if (g < 0) {
        char r[320];
        mrcnn_h5_reason(r, sizeof r);
        return why_fail(why, len, "group '%s' unreadable: %s", group, r);
    }
    int ok = 1;
    for (int i = 0; i < a->n_entries && ok; i++) {
        const char *name = a->entries[i].name;
        const mrcnn_tensor *t = &a->entries[i].tensor;
        if (H5Lexists(g, name, H5P_DEFAULT) <= 0) {
            ok = why_fail(why, len, "'%s/%s' missing", group, name);
            break;
        }
        hid_t ds = H5Dopen2(g, name, H5P_DEFAULT);
        hid_t sp = ds >= 0 ? H5Dget_space(ds) : -1;
        if (sp < 0) {
            char r[320];
            mrcnn_h5_reason(r, sizeof r);
            if (ds >= 0) H5Dclose(ds);
            ok = why_fail(why, len, "'%s/%s' unreadable: %s", group, name, r);
            break;
        }
        hsize_t dims[MRCNN_MAX_DIMS] = {0};
        int nd = H5Sget_simple_extent_ndims(sp);
        if (nd != t->ndim)
            ok = why_fail(why, len, "'%s/%s' has %d dims, the model wants %d", group, name, nd, t->ndim);
        if (ok) H5Sget_simple_extent_dims(sp, dims, NULL);
        for (int d = 0; ok && d < nd; d++)
            if ((int64_t)dims[d] != t->shape[d])
                ok = why_fail(why, len, "'%s/%s' dim %d is %lld, the model wants %lld", group, name, d,
                              (long long)dims[d], (long long)t->shape[d]);
        float *dst = host + a->entries[i].offset / sizeof(float);
        char cw[256];
        if (ok && !mrcnn_h5_chunks_whole(ds, cw, sizeof cw))
            ok = why_fail(why, len, "'%s/%s': %s: the file is damaged", group, name, cw);
        if (ok && H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0) {
            char r[320];
            int sum = mrcnn_h5_reason(r, sizeof r);
            ok = sum ? why_fail(why, len, "'%s/%s' fails its Fletcher-32 checksum: the file is corrupt", group, name)
                     : why_fail(why, len, "reading '%s/%s' failed: %s", group, name, r);
        }
        if (ok) {
            int64_t n = mrcnn_tensor_numel(t), bad = 0;
            for (int64_t k = 0; k < n; k++) bad += !isfinite(dst[k]);
            if (bad)
                ok = why_fail(why, len, "'%s/%s' holds %lld non-finite values (of %lld)", group, name, (long long)bad,
                              (long long)n);
        }
        H5Sclose(sp);
        H5Dclose(ds);
    }
    H5Gclose(g);
    return ok;
}

static hid_t open_checkpoint(const char *path) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    MRCNN_CHECK(f >= 0, "checkpoint: cannot open %s", path);
    MRCNN_CHECK(H5Aexists(f, "num_shards") <= 0, "%s is a shard set's file (written by mrcnn-prep coco), not a checkpoint: "
                "weights are a model_NNNNNNN.h5 written by mrcnn train or a file from data_prep/weights.py", path);
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
    read_model_strict(m, f, path);
    H5Fclose(f);
}

int mrcnn_checkpoint_load_model_partial(mrcnn_model *m, const char *path) {
    hid_t f = open_checkpoint(path);
    int n = read_model_partial(m, f, path);
    H5Fclose(f);
    MRCNN_CHECK(n > 0, "checkpoint %s: none of the model's %d parameters is in /model", path,
                mrcnn_params_count(&m->params));
    return n;
}
