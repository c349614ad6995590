/* Reading the shard format written by data_prep/shard_write.c (documented there):
 * the index, and each shard's tables; image bytes and RLE strings are read on demand
 * by hyperslab. Callers serialize HDF5 use (mrcnn_hdf5_lock) when threads are around.
 *
 * Nothing read from a file is trusted before it is checked: every table is validated
 * once, when its file is opened (counts, offsets, ranges, sizes, class ids, boxes), so
 * that the loader, eval and inspect can index with it freely; every dataset must carry
 * HDF5's Fletcher32 checksum, which the library verifies on each read. A problem fails
 * with one line: the file, the dataset, the index, the value and what is wrong. HDF5's
 * own error stack printing is off inside these functions (its innermost message goes
 * into that line instead). */
#include "mrcnn/data.h"
#include "mrcnn/h5_chunks.h"
#include "mrcnn/h5_errors.h"
#include "mrcnn/shard_schema.h"

#include <hdf5.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/rle.h"
#include "mrcnn/test_hooks.h"

static pthread_mutex_t g_h5_mutex = PTHREAD_MUTEX_INITIALIZER;
void mrcnn_hdf5_lock(void) { pthread_mutex_lock(&g_h5_mutex); }
void mrcnn_hdf5_unlock(void) { pthread_mutex_unlock(&g_h5_mutex); }

/* Bounds on the counts in a file, far above any real data set, so that a damaged count
 * is an error before it is an allocation. */
#define MAX_ROWS ((int64_t)1 << 40)
#define MAX_SHARDS 1000000
#define MAX_CLASSES 1000000

static _Noreturn void bad_file(const char *path, const char *fmt, ...) MRCNN_PRINTF(2, 3);
static _Noreturn void bad_file(const char *path, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mrcnn_failf("check", "", __FILE__, __LINE__, "%s: %s", path, msg);
}

#define H5_OR_FAIL(call, path, ...)                                                           \
    do {                                                                                      \
        if ((call) < 0) {                                                                     \
            char why_[400], what_[512];                                                       \
            mrcnn_h5_reason(why_, sizeof why_);                                               \
            snprintf(what_, sizeof what_, __VA_ARGS__);                                       \
            bad_file((path), "%s: %s", what_, why_);                                          \
        }                                                                                     \
    } while (0)

/* ---- datasets and attributes ---- */

/* Opens a dataset and checks that it carries its Fletcher32 checksum. */
static hid_t ds_open(hid_t f, const char *name, const char *path, hid_t dapl) {
    htri_t e = H5Lexists(f, name, H5P_DEFAULT);
    if (e <= 0) {
        /* A missing group makes H5Lexists fail for the path: same message. */
        H5Eclear2(H5E_DEFAULT);
        bad_file(path, "missing dataset '%s' (not a schema-%d shard file?)", name, MRCNN_SHARD_SCHEMA_VERSION);
    }
    hid_t ds = H5Dopen2(f, name, dapl);
    H5_OR_FAIL(ds, path, "cannot open dataset '%s'", name);
    hid_t dcpl = H5Dget_create_plist(ds);
    H5_OR_FAIL(dcpl, path, "dataset '%s'", name);
    unsigned flags = 0;
    size_t nelem = 0;
    int has = H5Pget_layout(dcpl) == H5D_CHUNKED &&
              H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &nelem, NULL, 0, NULL, NULL) >= 0;
    H5Eclear2(H5E_DEFAULT);
    H5Pclose(dcpl);
    if (!has) bad_file(path, "dataset '%s' has no Fletcher32 checksum (schema %d requires one)", name, MRCNN_SHARD_SCHEMA_VERSION);
    return ds;
}

/* The row count of a dataset, checked against want (-1: any); rank 1, or 2 with cols.
 * check_chunks: 0 when the caller only counts rows and reads the dataset later (the
 * read checks the chunks then; one walk over the chunk index per dataset is enough). */
static int64_t ds_rows(hid_t ds, const char *name, const char *path, int64_t want, int64_t cols, int check_chunks) {
    hid_t sp = H5Dget_space(ds);
    H5_OR_FAIL(sp, path, "dataset '%s'", name);
    hsize_t d[2] = {0, 1};
    int rank = H5Sget_simple_extent_ndims(sp);
    if (rank == 1 || rank == 2) rank = H5Sget_simple_extent_dims(sp, d, NULL);
    H5Sclose(sp);
    if (rank != (cols > 1 ? 2 : 1) || (cols > 1 && (int64_t)d[1] != cols))
        bad_file(path, "dataset '%s' has the wrong shape (rank %d), expected %s", name, rank,
                 cols > 1 ? "(n, 4)" : "(n)");
    if (want >= 0 && (int64_t)d[0] != want)
        bad_file(path, "dataset '%s' has %lld rows, expected %lld", name, (long long)d[0], (long long)want);
    if ((int64_t)d[0] > MAX_ROWS) bad_file(path, "dataset '%s' has %llu rows", name, (unsigned long long)d[0]);
    /* The extent is only a declaration (chunks never written read back as fill values),
     * and libhdf5 trusts each chunk's recorded size: both are checked before anything is
     * sized by the extent or read. */
    char why[256];
    if (check_chunks && !mrcnn_h5_chunks_whole(ds, why, sizeof why))
        bad_file(path, "dataset '%s': %s (truncated or damaged file)", name, why);
    return (int64_t)d[0];
}

/* Only the extent: every caller reads the dataset afterwards with ds_read. */
static int64_t ds_len(hid_t f, const char *name, const char *path, int64_t want, int64_t cols) {
    hid_t ds = ds_open(f, name, path, H5P_DEFAULT);
    int64_t n = ds_rows(ds, name, path, want, cols, 0);
    H5Dclose(ds);
    return n;
}

/* A whole dataset into memory (want rows, -1: any; *rows gets the count when not NULL). */
static void *ds_read_n(hid_t f, const char *name, const char *path, hid_t type, int64_t want, int64_t cols,
                       int64_t *rows) {
    hid_t ds = ds_open(f, name, path, H5P_DEFAULT);
    int64_t n = ds_rows(ds, name, path, want, cols, 1);
    size_t bytes = (size_t)n * (size_t)(cols > 1 ? cols : 1) * H5Tget_size(type);
    void *p = MRCNN_MALLOC(bytes + 1, name);
    if (n > 0) H5_OR_FAIL(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, p), path, "cannot read dataset '%s'", name);
    H5Dclose(ds);
    if (rows) *rows = n;
    return p;
}

static void *ds_read(hid_t f, const char *name, const char *path, hid_t type, int64_t want, int64_t cols) {
    return ds_read_n(f, name, path, type, want, cols, NULL);
}

static int64_t attr_i64(hid_t f, const char *name, const char *path) {
    if (H5Aexists(f, name) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        bad_file(path, "missing attribute '%s'", name);
    }
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    H5_OR_FAIL(a, path, "cannot open attribute '%s'", name);
    int64_t v = 0;
    H5_OR_FAIL(H5Aread(a, H5T_NATIVE_INT64, &v), path, "cannot read attribute '%s'", name);
    H5Aclose(a);
    return v;
}

/* An attribute that must lie in [lo, hi]. */
static int64_t attr_count(hid_t f, const char *name, const char *path, int64_t lo, int64_t hi) {
    int64_t v = attr_i64(f, name, path);
    if (v < lo || v > hi)
        bad_file(path, "attribute '%s' = %lld is outside [%lld, %lld]", name, (long long)v, (long long)lo, (long long)hi);
    return v;
}

static char *attr_str(hid_t f, const char *name, const char *path) {
    if (H5Aexists(f, name) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        bad_file(path, "missing attribute '%s'", name);
    }
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    H5_OR_FAIL(a, path, "cannot open attribute '%s'", name);
    hid_t t = H5Aget_type(a);
    H5_OR_FAIL(t, path, "attribute '%s'", name);
    if (H5Tget_class(t) != H5T_STRING) bad_file(path, "attribute '%s' is not a string", name);
    size_t n = H5Tget_size(t);
    if (n > 4096) bad_file(path, "attribute '%s' is %zu bytes long", name, n);
    char *s = MRCNN_CALLOC(n + 1, 1, name);
    H5_OR_FAIL(H5Aread(a, t, s), path, "cannot read attribute '%s'", name);
    H5Tclose(t);
    H5Aclose(a);
    return s;
}

/* Offsets into a byte stream of total bytes: off[0] = 0, non-decreasing, off[n] = total. */
static void check_offsets(const int64_t *off, int64_t n, int64_t total, const char *oname, const char *path) {
    if (off[0] != 0) bad_file(path, "%s[0] = %lld, expected 0", oname, (long long)off[0]);
    for (int64_t i = 0; i < n; i++)
        if (off[i + 1] < off[i] || off[i + 1] > total)
            bad_file(path, "%s[%lld] = %lld is outside [%lld, %lld] (offsets into %lld bytes, in order)", oname,
                     (long long)(i + 1), (long long)off[i + 1], (long long)off[i], (long long)total, (long long)total);
    if (off[n] != total)
        bad_file(path, "%s[%lld] = %lld, but the bytes are %lld long", oname, (long long)n, (long long)off[n],
                 (long long)total);
}

/* Flat strings + offsets into n malloc'ed C strings; a NUL byte inside one is an error
 * when no_nul (file names: a NUL would cut the name). */
static char **read_strings(hid_t f, const char *name, const char *path, int64_t n, int no_nul) {
    char oname[256];
    snprintf(oname, sizeof oname, "%s_offset", name);
    int64_t *off = ds_read(f, oname, path, H5T_NATIVE_INT64, n + 1, 1);
    int64_t total = 0;
    char *flat = ds_read_n(f, name, path, H5T_NATIVE_UINT8, -1, 1, &total);
    check_offsets(off, n, total, oname, path);
    char **out = MRCNN_MALLOC(sizeof(char *) * (size_t)(n + 1), name);
    for (int64_t i = 0; i < n; i++) {
        size_t l = (size_t)(off[i + 1] - off[i]);
        if (no_nul && memchr(flat + off[i], 0, l)) bad_file(path, "%s[%lld] contains a NUL byte", name, (long long)i);
        out[i] = MRCNN_MALLOC(l + 1, name);
        memcpy(out[i], flat + off[i], l);
        out[i][l] = 0;
    }
    free(off);
    free(flat);
    return out;
}

static void check_schema(hid_t f, const char *path) {
    /* A checkpoint has a schema_version too (of its own format): say what the file is,
     * not that its version is wrong. */
    htri_t ckpt = H5Lexists(f, "model", H5P_DEFAULT);
    H5Eclear2(H5E_DEFAULT);
    if (ckpt > 0)
        bad_file(path, "this is a checkpoint (it holds /model), not a shard set: a data set (DATASETS.TRAIN, "
                       "DATASETS.TEST, --shards) is the NAME-index.h5 written by mrcnn-prep coco");
    int64_t v = attr_i64(f, MRCNN_SHARD_ATTR_SCHEMA_VERSION, path);
    if (v != MRCNN_SHARD_SCHEMA_VERSION)
        bad_file(path, "schema version %lld, this build reads %d (convert the data set again with mrcnn-prep coco)",
                 (long long)v, MRCNN_SHARD_SCHEMA_VERSION);
}

static hid_t open_file(const char *path, hid_t fapl) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5_OR_FAIL(f, path, "cannot open as an HDF5 file");
    return f;
}

/* ---- the index ---- */

void mrcnn_shard_set_open(mrcnn_shard_set *s, const char *index_path) {
    memset(s, 0, sizeof *s);
    const char *p = index_path;
    mrcnn_h5_quiet q = mrcnn_h5_quiet_begin();
    hid_t f = open_file(p, H5P_DEFAULT);
    check_schema(f, p);
    htri_t one_shard = H5Aexists(f, MRCNN_SHARD_ATTR_SHARD);
    H5Eclear2(H5E_DEFAULT);
    if (one_shard > 0) {
        char *name = attr_str(f, MRCNN_SHARD_ATTR_NAME, p);
        bad_file(p, "this is one shard of set '%s', not its index: name the set by %s-index.h5 in the same folder", name,
                 name);
    }
    s->name = attr_str(f, MRCNN_SHARD_ATTR_NAME, p);
    s->num_shards = (int)attr_count(f, MRCNN_SHARD_ATTR_NUM_SHARDS, p, 1, MAX_SHARDS);
    s->num_images = attr_count(f, MRCNN_SHARD_ATTR_NUM_IMAGES, p, 0, MAX_ROWS);
    s->num_annotations = attr_count(f, MRCNN_SHARD_ATTR_NUM_ANNOTATIONS, p, 0, MAX_ROWS);
    s->num_classes = (int)attr_count(f, MRCNN_SHARD_ATTR_NUM_CLASSES, p, 0, MAX_CLASSES);
    int64_t rows = ds_len(f, MRCNN_SHARD_SHARDS_NUM_IMAGES, p, -1, 1);
    if (rows != s->num_shards)
        bad_file(p, "the attribute num_shards = %d, but dataset 'shards/num_images' has %lld rows", s->num_shards, (long long)rows);
    rows = ds_len(f, MRCNN_SHARD_CATEGORIES_ID, p, -1, 1);
    if (rows != s->num_classes)
        bad_file(p, "the attribute num_classes = %d, but dataset 'categories/id' has %lld rows", s->num_classes, (long long)rows);
    s->files = read_strings(f, MRCNN_SHARD_SHARDS_FILES, p, s->num_shards, 1);
    s->shard_images = ds_read(f, MRCNN_SHARD_SHARDS_NUM_IMAGES, p, H5T_NATIVE_INT64, s->num_shards, 1);
    s->shard_annotations = ds_read(f, MRCNN_SHARD_SHARDS_NUM_ANNOTATIONS, p, H5T_NATIVE_INT64, s->num_shards, 1);
    s->shard_bytes = ds_read(f, MRCNN_SHARD_SHARDS_BYTES, p, H5T_NATIVE_INT64, s->num_shards, 1);
    s->category_ids = ds_read(f, MRCNN_SHARD_CATEGORIES_ID, p, H5T_NATIVE_INT64, s->num_classes, 1);
    s->category_names = read_strings(f, MRCNN_SHARD_CATEGORIES_NAMES, p, s->num_classes, 0);
    s->category_supercategories = read_strings(f, MRCNN_SHARD_CATEGORIES_SUPERCATEGORIES, p, s->num_classes, 0);
    H5_OR_FAIL(H5Fclose(f), p, "closing the file");
    mrcnn_h5_quiet_end(q);
    int64_t ni = 0, na = 0;
    for (int i = 0; i < s->num_shards; i++) {
        const char *fn = s->files[i];
        if (!fn[0] || strchr(fn, '/') || !strcmp(fn, ".") || !strcmp(fn, ".."))
            bad_file(p, "shards/files[%d] = '%s' is not a file name in the index's folder", i, fn);
        if (s->shard_images[i] < 0 || s->shard_images[i] > MAX_ROWS)
            bad_file(p, "shards/num_images[%d] = %lld is negative or too large", i, (long long)s->shard_images[i]);
        if (s->shard_annotations[i] < 0 || s->shard_annotations[i] > MAX_ROWS)
            bad_file(p, "shards/num_annotations[%d] = %lld is negative or too large", i, (long long)s->shard_annotations[i]);
        if (s->shard_bytes[i] < 0) bad_file(p, "shards/bytes[%d] = %lld is negative", i, (long long)s->shard_bytes[i]);
        ni += s->shard_images[i];
        na += s->shard_annotations[i];
    }
    if (ni != s->num_images)
        bad_file(p, "shards/num_images add up to %lld, the attribute num_images says %lld", (long long)ni,
                 (long long)s->num_images);
    if (na != s->num_annotations)
        bad_file(p, "shards/num_annotations add up to %lld, the attribute num_annotations says %lld", (long long)na,
                 (long long)s->num_annotations);
    for (int c = 1; c < s->num_classes; c++)
        if (s->category_ids[c] <= s->category_ids[c - 1])
            bad_file(p, "categories/id[%d] = %lld is not above categories/id[%d] = %lld (ids must ascend)", c,
                     (long long)s->category_ids[c], c - 1, (long long)s->category_ids[c - 1]);
    s->image_base = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(s->num_shards + 1), "image base");
    s->image_base[0] = 0;
    for (int i = 0; i < s->num_shards; i++) s->image_base[i + 1] = s->image_base[i] + s->shard_images[i];
    const char *slash = strrchr(index_path, '/');
    size_t dl = slash ? (size_t)(slash - index_path) : 1;
    s->dir = MRCNN_MALLOC(dl + 1, "dir");
    memcpy(s->dir, slash ? index_path : ".", dl);
    s->dir[dl] = 0;
}

void mrcnn_shard_set_path(const mrcnn_shard_set *s, int i, char *buf, size_t len) {
    snprintf(buf, len, "%s/%s", s->dir, s->files[i]);
}

static void free_strings(char **v, int64_t n) {
    for (int64_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

void mrcnn_shard_set_free(mrcnn_shard_set *s) {
    free_strings(s->files, s->num_shards);
    free_strings(s->category_names, s->num_classes);
    free_strings(s->category_supercategories, s->num_classes);
    free(s->dir);
    free(s->name);
    free(s->shard_images);
    free(s->shard_annotations);
    free(s->shard_bytes);
    free(s->image_base);
    free(s->category_ids);
    memset(s, 0, sizeof *s);
}

int64_t mrcnn_shard_fapl_mpio(MPI_Comm comm) {
    hid_t fapl = MRCNN_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS), "file access list");
    MRCNN_CHECK_HDF5(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL), "H5Pset_fapl_mpio");
    return fapl;
}

/* ---- one shard ---- */

/* Every table against every other; see data.h for the list. */
static void validate_shard(const mrcnn_shard *sh) {
    const char *p = sh->path;
    const int64_t n = sh->num_images, m = sh->num_annotations, K = sh->num_categories;
    for (int64_t c = 1; c < K; c++)
        if (sh->category_ids[c] <= sh->category_ids[c - 1])
            bad_file(p, "categories/id[%lld] = %lld is not above categories/id[%lld] = %lld (ids must ascend)",
                     (long long)c, (long long)sh->category_ids[c], (long long)(c - 1), (long long)sh->category_ids[c - 1]);
    int64_t names_len = sh->name_offset[n];
    check_offsets(sh->name_offset, n, names_len, MRCNN_SHARD_IMAGES_NAMES_OFFSET, p);
    if (memchr(sh->names, 0, (size_t)names_len)) {
        int64_t at = (int64_t)((const char *)memchr(sh->names, 0, (size_t)names_len) - sh->names), i = 0;
        while (i < n && sh->name_offset[i + 1] <= at) i++;
        bad_file(p, "images/names of image [%lld] contains a NUL byte", (long long)i);
    }
    check_offsets(sh->rle_offset, m, sh->rle_bytes, MRCNN_SHARD_ANNOTATIONS_RLE_OFFSET, p);
    int64_t next_ann = 0;
    for (int64_t i = 0; i < n; i++) {
        const long long I = (long long)i;
        const int32_t h = sh->height[i], w = sh->width[i];
        if (h < 1 || h > MRCNN_MAX_IMAGE_SIDE) bad_file(p, "images/height[%lld] = %d is outside [1, %d]", I, h, MRCNN_MAX_IMAGE_SIDE);
        if (w < 1 || w > MRCNN_MAX_IMAGE_SIDE) bad_file(p, "images/width[%lld] = %d is outside [1, %d]", I, w, MRCNN_MAX_IMAGE_SIDE);
        const int64_t off = sh->offset[i], len = sh->length[i];
        if (off < 0 || off > sh->image_bytes)
            bad_file(p, "images/offset[%lld] = %lld is outside the %lld image bytes", I, (long long)off, (long long)sh->image_bytes);
        if (len < 1 || len > sh->image_bytes - off)
            bad_file(p, "images/length[%lld] = %lld: bytes [%lld, +%lld) are empty or beyond the %lld image bytes", I,
                     (long long)len, (long long)off, (long long)len, (long long)sh->image_bytes);
        if (sh->ann_start[i] != next_ann)
            bad_file(p, "images/ann_start[%lld] = %lld, expected %lld (annotation rows are contiguous, image by image)", I,
                     (long long)sh->ann_start[i], (long long)next_ann);
        const int64_t cnt = sh->ann_count[i];
        if (cnt < 0 || cnt > m - next_ann)
            bad_file(p, "images/ann_count[%lld] = %lld is negative or reaches past the %lld annotations (from row %lld)", I,
                     (long long)cnt, (long long)m, (long long)next_ann);
        if (sh->flags[i] & ~MRCNN_IMAGE_FLAG_NO_ANNOTATIONS)
            bad_file(p, "images/flags[%lld] = %u has unknown bits", I, sh->flags[i]);
        if (!cnt != !!(sh->flags[i] & MRCNN_IMAGE_FLAG_NO_ANNOTATIONS))
            bad_file(p, "images/flags[%lld] = %u disagrees with images/ann_count[%lld] = %lld", I, sh->flags[i], I,
                     (long long)cnt);
        for (int64_t a = next_ann; a < next_ann + cnt; a++) {
            const long long A = (long long)a;
            if (sh->ann_image[a] != i)
                bad_file(p, "annotations/image[%lld] = %lld, but the row is in image %lld's range (images/ann_start, ann_count)",
                         A, (long long)sh->ann_image[a], I);
            const int32_t cls = sh->ann_class[a];
            if (cls < 0 || cls >= K)
                bad_file(p, "annotations/class[%lld] = %d is outside the %lld categories", A, cls, (long long)K);
            if (sh->category_ids[cls] != sh->ann_category_id[a])
                bad_file(p, "annotations/category_id[%lld] = %lld, but class %d is category %lld", A,
                         (long long)sh->ann_category_id[a], cls, (long long)sh->category_ids[cls]);
            if (sh->ann_iscrowd[a] > 1) bad_file(p, "annotations/iscrowd[%lld] = %u, expected 0 or 1", A, sh->ann_iscrowd[a]);
            const double area = sh->ann_area[a];
            if (!isfinite(area) || area < 0) bad_file(p, "annotations/area[%lld] = %g is not a finite area >= 0", A, area);
            const float *b = sh->ann_bbox + 4 * a;
            const double bd[4] = {b[0], b[1], b[2], b[3]};
            if (!(b[2] > 0 && b[3] > 0) || !mrcnn_bbox_in_range(bd, h, w))
                bad_file(p, "annotations/bbox[%lld] = [%g, %g, %g, %g] is not a finite box with area within reach of its %dx%d image",
                         A, bd[0], bd[1], bd[2], bd[3], h, w);
        }
        next_ann += cnt;
    }
    if (next_ann != m) bad_file(p, "images/ann_count add up to %lld, but there are %lld annotations", (long long)next_ann, (long long)m);
}

/* Reads every table of a shard; validate_shard checks them. */
static void shard_read(mrcnn_shard *sh, const char *path, int64_t fapl) {
    memset(sh, 0, sizeof *sh);
    const char *p = path;
    size_t pl = strlen(path);
    sh->path = MRCNN_MALLOC(pl + 1, "shard path");
    memcpy(sh->path, path, pl + 1);
    mrcnn_h5_quiet q = mrcnn_h5_quiet_begin();
    hid_t f = open_file(path, fapl > 0 ? (hid_t)fapl : H5P_DEFAULT);
    sh->file = f;
    check_schema(f, p);
    const int64_t n = sh->num_images = attr_count(f, MRCNN_SHARD_ATTR_NUM_IMAGES, p, 0, MAX_ROWS);
    const int64_t m = sh->num_annotations = attr_count(f, MRCNN_SHARD_ATTR_NUM_ANNOTATIONS, p, 0, MAX_ROWS);
    int64_t rows = ds_len(f, MRCNN_SHARD_IMAGES_ID, p, -1, 1);
    if (rows != n) bad_file(p, "the attribute num_images = %lld, but dataset 'images/id' has %lld rows", (long long)n, (long long)rows);
    rows = ds_len(f, MRCNN_SHARD_ANNOTATIONS_ID, p, -1, 1);
    if (rows != m)
        bad_file(p, "the attribute num_annotations = %lld, but dataset 'annotations/id' has %lld rows", (long long)m, (long long)rows);
    sh->image_id = ds_read(f, MRCNN_SHARD_IMAGES_ID, p, H5T_NATIVE_INT64, n, 1);
    sh->height = ds_read(f, MRCNN_SHARD_IMAGES_HEIGHT, p, H5T_NATIVE_INT32, n, 1);
    sh->width = ds_read(f, MRCNN_SHARD_IMAGES_WIDTH, p, H5T_NATIVE_INT32, n, 1);
    sh->offset = ds_read(f, MRCNN_SHARD_IMAGES_OFFSET, p, H5T_NATIVE_INT64, n, 1);
    sh->length = ds_read(f, MRCNN_SHARD_IMAGES_LENGTH, p, H5T_NATIVE_INT64, n, 1);
    sh->ann_start = ds_read(f, MRCNN_SHARD_IMAGES_ANN_START, p, H5T_NATIVE_INT64, n, 1);
    sh->ann_count = ds_read(f, MRCNN_SHARD_IMAGES_ANN_COUNT, p, H5T_NATIVE_INT64, n, 1);
    sh->flags = ds_read(f, MRCNN_SHARD_IMAGES_FLAGS, p, H5T_NATIVE_UINT8, n, 1);
    sh->name_offset = ds_read(f, MRCNN_SHARD_IMAGES_NAMES_OFFSET, p, H5T_NATIVE_INT64, n + 1, 1);
    int64_t names_len = 0;
    sh->names = ds_read_n(f, MRCNN_SHARD_IMAGES_NAMES, p, H5T_NATIVE_UINT8, -1, 1, &names_len);
    sh->ann_id = ds_read(f, MRCNN_SHARD_ANNOTATIONS_ID, p, H5T_NATIVE_INT64, m, 1);
    sh->ann_image = ds_read(f, MRCNN_SHARD_ANNOTATIONS_IMAGE, p, H5T_NATIVE_INT64, m, 1);
    sh->ann_bbox = ds_read(f, MRCNN_SHARD_ANNOTATIONS_BBOX, p, H5T_NATIVE_FLOAT, m, 4);
    sh->ann_category_id = ds_read(f, MRCNN_SHARD_ANNOTATIONS_CATEGORY_ID, p, H5T_NATIVE_INT64, m, 1);
    sh->ann_class = ds_read(f, MRCNN_SHARD_ANNOTATIONS_CLASS, p, H5T_NATIVE_INT32, m, 1);
    sh->ann_iscrowd = ds_read(f, MRCNN_SHARD_ANNOTATIONS_ISCROWD, p, H5T_NATIVE_UINT8, m, 1);
    sh->ann_area = ds_read(f, MRCNN_SHARD_ANNOTATIONS_AREA, p, H5T_NATIVE_DOUBLE, m, 1);
    sh->rle_offset = ds_read(f, MRCNN_SHARD_ANNOTATIONS_RLE_OFFSET, p, H5T_NATIVE_INT64, m + 1, 1);
    sh->category_ids = ds_read_n(f, MRCNN_SHARD_CATEGORIES_ID, p, H5T_NATIVE_INT64, -1, 1, &sh->num_categories);
    if (sh->num_categories > MAX_CLASSES) bad_file(p, "categories/id has %lld rows", (long long)sh->num_categories);
    /* No chunk cache for the byte streams: an image read then touches only the chunks
     * that hold its bytes (each read whole, as its checksum covers it). */
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    H5_OR_FAIL(dapl, p, "dataset access list");
    H5_OR_FAIL(H5Pset_chunk_cache(dapl, 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT), p, "dataset access list");
    sh->bytes_ds = ds_open(f, MRCNN_SHARD_IMAGES_BYTES, p, dapl);
    sh->image_bytes = ds_rows((hid_t)sh->bytes_ds, MRCNN_SHARD_IMAGES_BYTES, p, -1, 1, 1);
    sh->rle_ds = ds_open(f, MRCNN_SHARD_ANNOTATIONS_RLE, p, dapl);
    sh->rle_bytes = ds_rows((hid_t)sh->rle_ds, MRCNN_SHARD_ANNOTATIONS_RLE, p, -1, 1, 1);
    H5Pclose(dapl);
    mrcnn_h5_quiet_end(q);
    if (names_len != sh->name_offset[n])
        bad_file(p, "images/names_offset[%lld] = %lld, but images/names is %lld bytes long", (long long)n,
                 (long long)sh->name_offset[n], (long long)names_len);
}

/* One shard without its index: the fuzz targets' entry (readers open a set's shards). */
MRCNN_TEST_HOOK void mrcnn_shard_open(mrcnn_shard *sh, const char *path, int64_t fapl) {
    shard_read(sh, path, fapl);
    validate_shard(sh);
}

void mrcnn_shard_set_open_shard(const mrcnn_shard_set *s, int i, mrcnn_shard *sh, int64_t fapl) {
    MRCNN_CHECK(i >= 0 && i < s->num_shards, "shard %d of a set of %d", i, s->num_shards);
    char path[8192];
    mrcnn_shard_set_path(s, i, path, sizeof path);
    shard_read(sh, path, fapl);
    if (sh->num_images != s->shard_images[i] || sh->num_annotations != s->shard_annotations[i] ||
        sh->image_bytes != s->shard_bytes[i])
        bad_file(path, "%lld images, %lld annotations, %lld image bytes, but its index says %lld, %lld, %lld "
                 "(shards/num_images[%d], num_annotations[%d], bytes[%d])",
                 (long long)sh->num_images, (long long)sh->num_annotations, (long long)sh->image_bytes,
                 (long long)s->shard_images[i], (long long)s->shard_annotations[i], (long long)s->shard_bytes[i], i, i, i);
    if (sh->num_categories != s->num_classes)
        bad_file(path, "categories/id has %lld rows, its index has %d classes", (long long)sh->num_categories, s->num_classes);
    for (int c = 0; c < s->num_classes; c++)
        if (sh->category_ids[c] != s->category_ids[c])
            bad_file(path, "categories/id[%d] = %lld differs from the index's %lld", c, (long long)sh->category_ids[c],
                     (long long)s->category_ids[c]);
    validate_shard(sh);
}

void mrcnn_shard_close(mrcnn_shard *sh) {
    if (sh->bytes_ds > 0) MRCNN_CHECK_HDF5(H5Dclose((hid_t)sh->bytes_ds), MRCNN_SHARD_IMAGES_BYTES);
    if (sh->rle_ds > 0) MRCNN_CHECK_HDF5(H5Dclose((hid_t)sh->rle_ds), MRCNN_SHARD_ANNOTATIONS_RLE);
    if (sh->file > 0) MRCNN_CHECK_HDF5(H5Fclose((hid_t)sh->file), "shard file");
    void *all[] = {sh->image_id, sh->height, sh->width, sh->offset, sh->length, sh->ann_start, sh->ann_count,
                   sh->flags, sh->name_offset, sh->names, sh->ann_id, sh->ann_image, sh->ann_bbox,
                   sh->ann_category_id, sh->ann_class, sh->ann_iscrowd, sh->ann_area, sh->rle_offset,
                   sh->category_ids, sh->path};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    memset(sh, 0, sizeof *sh);
}

/* Independent reads only: the datasets were opened collectively with the file.
 * Returns 0 with HDF5's reason in why. */
static int read_range(hid_t ds, int64_t start, int64_t count, void *dst, char *why, size_t why_len) {
    if (count <= 0) return 1;
    mrcnn_h5_quiet q = mrcnn_h5_quiet_begin();
    int ok = 0;
    hid_t fs = H5Dget_space(ds);
    hsize_t s = (hsize_t)start, c = (hsize_t)count;
    if (fs >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, &s, NULL, &c, NULL) >= 0) {
        hid_t ms = H5Screate_simple(1, &c, NULL);
        ok = ms >= 0 && H5Dread(ds, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, dst) >= 0;
        if (!ok) mrcnn_h5_reason(why, why_len); // before the next call clears the error stack
        if (ms >= 0) H5Sclose(ms);
    } else {
        mrcnn_h5_reason(why, why_len);
    }
    if (fs >= 0) H5Sclose(fs);
    mrcnn_h5_quiet_end(q);
    return ok;
}

int mrcnn_shard_try_read_image(const mrcnn_shard *sh, int64_t i, uint8_t **buf, size_t *cap, size_t *len, char *err,
                               size_t err_len) {
    MRCNN_CHECK(i >= 0 && i < sh->num_images, "%s: image index %lld out of range [0, %lld)", sh->path, (long long)i,
                (long long)sh->num_images);
    const int64_t off = sh->offset[i], l = sh->length[i]; // validated at open
    if (*cap < (size_t)l + 1) {
        *buf = MRCNN_REALLOC(*buf, (size_t)l + 1, "image bytes");
        *cap = (size_t)l + 1;
    }
    char why[320];
    if (!read_range((hid_t)sh->bytes_ds, off, l, *buf, why, sizeof why)) {
        snprintf(err, err_len, "%s: images/bytes of image [%lld] (bytes [%lld, +%lld)): %s", sh->path, (long long)i,
                 (long long)off, (long long)l, why);
        return 0;
    }
    *len = (size_t)l;
    return 1;
}

size_t mrcnn_shard_read_image(const mrcnn_shard *sh, int64_t i, uint8_t **buf, size_t *cap) {
    char err[1024];
    size_t len = 0;
    if (!mrcnn_shard_try_read_image(sh, i, buf, cap, &len, err, sizeof err))
        mrcnn_failf("check", "", __FILE__, __LINE__, "%s", err);
    return len;
}

int mrcnn_shard_try_read_rles(const mrcnn_shard *sh, int64_t a0, int64_t n, char **buf, size_t *cap, size_t *len,
                              char *err, size_t err_len) {
    MRCNN_CHECK(a0 >= 0 && n >= 0 && n <= sh->num_annotations - a0, "%s: annotations [%lld, +%lld) out of range [0, %lld)",
                sh->path, (long long)a0, (long long)n, (long long)sh->num_annotations);
    const int64_t b0 = sh->rle_offset[a0], b1 = sh->rle_offset[a0 + n]; // validated at open
    size_t need = (size_t)(b1 - b0) + (size_t)n + 1;
    char *raw = MRCNN_MALLOC((size_t)(b1 - b0) + 1, "rle bytes");
    char why[320];
    if (!read_range((hid_t)sh->rle_ds, b0, b1 - b0, raw, why, sizeof why)) {
        snprintf(err, err_len, "%s: annotations/rle of annotations [%lld, +%lld) (bytes [%lld, %lld)): %s", sh->path,
                 (long long)a0, (long long)n, (long long)b0, (long long)b1, why);
        free(raw);
        return 0;
    }
    if (*cap < need) {
        *buf = MRCNN_REALLOC(*buf, need, "rle strings");
        *cap = need;
    }
    size_t o = 0;
    for (int64_t a = a0; a < a0 + n; a++) {
        size_t l = (size_t)(sh->rle_offset[a + 1] - sh->rle_offset[a]);
        const char *src = raw + (sh->rle_offset[a] - b0);
        if (memchr(src, 0, l)) {
            snprintf(err, err_len, "%s: annotations/rle of annotation [%lld] contains a NUL byte", sh->path, (long long)a);
            free(raw);
            return 0;
        }
        memcpy(*buf + o, src, l);
        o += l;
        (*buf)[o++] = 0;
    }
    free(raw);
    *len = o;
    return 1;
}

size_t mrcnn_shard_read_rles(const mrcnn_shard *sh, int64_t a0, int64_t n, char **buf, size_t *cap) {
    char err[1024];
    size_t len = 0;
    if (!mrcnn_shard_try_read_rles(sh, a0, n, buf, cap, &len, err, sizeof err))
        mrcnn_failf("check", "", __FILE__, __LINE__, "%s", err);
    return len;
}
