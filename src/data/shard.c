/* Reading the shard format written by data_prep/shard_write.c (documented there):
 * the index, and each shard's tables; image bytes and RLE strings are read on demand
 * by hyperslab. Callers serialize HDF5 use (mrcnn_hdf5_lock) when threads are around. */
#include "mrcnn/data.h"

#include <hdf5.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"

static pthread_mutex_t g_h5_mutex = PTHREAD_MUTEX_INITIALIZER;
void mrcnn_hdf5_lock(void) { pthread_mutex_lock(&g_h5_mutex); }
void mrcnn_hdf5_unlock(void) { pthread_mutex_unlock(&g_h5_mutex); }

/* The element count of a dataset, checked against want (-1: any); rank 1 or 2. */
static int64_t ds_len(hid_t f, const char *name, const char *path, int64_t want, int64_t cols) {
    MRCNN_CHECK(H5Lexists(f, name, H5P_DEFAULT) > 0, "%s: missing dataset '%s' (not a schema-%d shard?)", path, name,
                MRCNN_SHARD_SCHEMA_VERSION);
    hid_t ds = MRCNN_CHECK_HDF5(H5Dopen2(f, name, H5P_DEFAULT), name);
    hid_t sp = MRCNN_CHECK_HDF5(H5Dget_space(ds), name);
    hsize_t d[2] = {0, 1};
    int rank = MRCNN_CHECK_HDF5(H5Sget_simple_extent_dims(sp, d, NULL), name);
    H5Sclose(sp);
    H5Dclose(ds);
    MRCNN_CHECK(rank == (cols > 1 ? 2 : 1) && (cols <= 1 || (int64_t)d[1] == cols),
                "%s: dataset '%s' has the wrong shape", path, name);
    MRCNN_CHECK(want < 0 || (int64_t)d[0] == want, "%s: dataset '%s' has %lld rows, expected %lld", path, name,
                (long long)d[0], (long long)want);
    return (int64_t)d[0];
}

static void *ds_read(hid_t f, const char *name, const char *path, hid_t type, int64_t want, int64_t cols) {
    int64_t n = ds_len(f, name, path, want, cols);
    size_t bytes = (size_t)n * (size_t)(cols > 1 ? cols : 1) * H5Tget_size(type);
    void *p = MRCNN_MALLOC(bytes + 1, name);
    if (n > 0) {
        hid_t ds = MRCNN_CHECK_HDF5(H5Dopen2(f, name, H5P_DEFAULT), name);
        MRCNN_CHECK_HDF5(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, p), name);
        H5Dclose(ds);
    }
    return p;
}

static int64_t attr_i64(hid_t f, const char *name, const char *path) {
    MRCNN_CHECK(H5Aexists(f, name) > 0, "%s: missing attribute '%s'", path, name);
    hid_t a = MRCNN_CHECK_HDF5(H5Aopen(f, name, H5P_DEFAULT), name);
    int64_t v = 0;
    MRCNN_CHECK_HDF5(H5Aread(a, H5T_NATIVE_INT64, &v), name);
    H5Aclose(a);
    return v;
}

static char *attr_str(hid_t f, const char *name, const char *path) {
    MRCNN_CHECK(H5Aexists(f, name) > 0, "%s: missing attribute '%s'", path, name);
    hid_t a = MRCNN_CHECK_HDF5(H5Aopen(f, name, H5P_DEFAULT), name);
    hid_t t = MRCNN_CHECK_HDF5(H5Aget_type(a), name);
    size_t n = H5Tget_size(t);
    char *s = MRCNN_CALLOC(n + 1, 1, name);
    MRCNN_CHECK_HDF5(H5Aread(a, t, s), name);
    H5Tclose(t);
    H5Aclose(a);
    return s;
}

/* Flat strings + offsets into n malloc'ed C strings. */
static char **read_strings(hid_t f, const char *name, const char *path, int64_t n) {
    char oname[256];
    snprintf(oname, sizeof oname, "%s_offset", name);
    int64_t *off = ds_read(f, oname, path, H5T_NATIVE_INT64, n + 1, 1);
    char *flat = ds_read(f, name, path, H5T_NATIVE_UINT8, -1, 1);
    int64_t total = ds_len(f, name, path, -1, 1);
    char **out = MRCNN_MALLOC(sizeof(char *) * (size_t)(n + 1), name);
    for (int64_t i = 0; i < n; i++) {
        MRCNN_CHECK(off[i] >= 0 && off[i] <= off[i + 1] && off[i + 1] <= total, "%s: %s offsets out of order", path, name);
        size_t l = (size_t)(off[i + 1] - off[i]);
        out[i] = MRCNN_MALLOC(l + 1, name);
        memcpy(out[i], flat + off[i], l);
        out[i][l] = 0;
    }
    free(off);
    free(flat);
    return out;
}

static void check_schema(hid_t f, const char *path) {
    int64_t v = attr_i64(f, "schema_version", path);
    MRCNN_CHECK(v == MRCNN_SHARD_SCHEMA_VERSION, "%s: schema version %lld, this build reads %d", path, (long long)v,
                MRCNN_SHARD_SCHEMA_VERSION);
}

void mrcnn_shard_set_open(mrcnn_shard_set *s, const char *index_path) {
    memset(s, 0, sizeof *s);
    hid_t f = MRCNN_CHECK_HDF5(H5Fopen(index_path, H5F_ACC_RDONLY, H5P_DEFAULT), index_path);
    check_schema(f, index_path);
    s->name = attr_str(f, "name", index_path);
    s->num_shards = (int)attr_i64(f, "num_shards", index_path);
    s->num_images = attr_i64(f, "num_images", index_path);
    s->num_annotations = attr_i64(f, "num_annotations", index_path);
    s->num_classes = (int)attr_i64(f, "num_classes", index_path);
    MRCNN_CHECK(s->num_shards > 0, "%s: no shards", index_path);
    s->files = read_strings(f, "shards/files", index_path, s->num_shards);
    s->shard_images = ds_read(f, "shards/num_images", index_path, H5T_NATIVE_INT64, s->num_shards, 1);
    s->shard_annotations = ds_read(f, "shards/num_annotations", index_path, H5T_NATIVE_INT64, s->num_shards, 1);
    s->shard_bytes = ds_read(f, "shards/bytes", index_path, H5T_NATIVE_INT64, s->num_shards, 1);
    s->category_ids = ds_read(f, "categories/id", index_path, H5T_NATIVE_INT64, s->num_classes, 1);
    s->category_names = read_strings(f, "categories/names", index_path, s->num_classes);
    s->category_supercategories = read_strings(f, "categories/supercategories", index_path, s->num_classes);
    MRCNN_CHECK_HDF5(H5Fclose(f), index_path);
    s->image_base = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(s->num_shards + 1), "image base");
    s->image_base[0] = 0;
    for (int i = 0; i < s->num_shards; i++) s->image_base[i + 1] = s->image_base[i] + s->shard_images[i];
    MRCNN_CHECK(s->image_base[s->num_shards] == s->num_images, "%s: shard image counts do not add up", index_path);
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

void mrcnn_shard_open(mrcnn_shard *sh, const char *path, int64_t fapl) {
    memset(sh, 0, sizeof *sh);
    hid_t f = MRCNN_CHECK_HDF5(H5Fopen(path, H5F_ACC_RDONLY, fapl > 0 ? (hid_t)fapl : H5P_DEFAULT), path);
    sh->file = f;
    check_schema(f, path);
    const int64_t n = sh->num_images = attr_i64(f, "num_images", path);
    const int64_t m = sh->num_annotations = attr_i64(f, "num_annotations", path);
    sh->image_id = ds_read(f, "images/id", path, H5T_NATIVE_INT64, n, 1);
    sh->height = ds_read(f, "images/height", path, H5T_NATIVE_INT32, n, 1);
    sh->width = ds_read(f, "images/width", path, H5T_NATIVE_INT32, n, 1);
    sh->offset = ds_read(f, "images/offset", path, H5T_NATIVE_INT64, n, 1);
    sh->length = ds_read(f, "images/length", path, H5T_NATIVE_INT64, n, 1);
    sh->ann_start = ds_read(f, "images/ann_start", path, H5T_NATIVE_INT64, n, 1);
    sh->ann_count = ds_read(f, "images/ann_count", path, H5T_NATIVE_INT64, n, 1);
    sh->flags = ds_read(f, "images/flags", path, H5T_NATIVE_UINT8, n, 1);
    sh->name_offset = ds_read(f, "images/names_offset", path, H5T_NATIVE_INT64, n + 1, 1);
    sh->names = ds_read(f, "images/names", path, H5T_NATIVE_UINT8, -1, 1);
    sh->ann_id = ds_read(f, "annotations/id", path, H5T_NATIVE_INT64, m, 1);
    sh->ann_image = ds_read(f, "annotations/image", path, H5T_NATIVE_INT64, m, 1);
    sh->ann_bbox = ds_read(f, "annotations/bbox", path, H5T_NATIVE_FLOAT, m, 4);
    sh->ann_category_id = ds_read(f, "annotations/category_id", path, H5T_NATIVE_INT64, m, 1);
    sh->ann_class = ds_read(f, "annotations/class", path, H5T_NATIVE_INT32, m, 1);
    sh->ann_iscrowd = ds_read(f, "annotations/iscrowd", path, H5T_NATIVE_UINT8, m, 1);
    sh->ann_area = ds_read(f, "annotations/area", path, H5T_NATIVE_DOUBLE, m, 1);
    sh->rle_offset = ds_read(f, "annotations/rle_offset", path, H5T_NATIVE_INT64, m + 1, 1);
    sh->rle_bytes = ds_len(f, "annotations/rle", path, -1, 1);
    sh->image_bytes = ds_len(f, "images/bytes", path, -1, 1);
    /* No chunk cache for the byte streams: an image read then touches only its own bytes,
     * not the whole (1 MiB) chunks around it. */
    hid_t dapl = MRCNN_CHECK_HDF5(H5Pcreate(H5P_DATASET_ACCESS), path);
    MRCNN_CHECK_HDF5(H5Pset_chunk_cache(dapl, 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT), path);
    sh->bytes_ds = MRCNN_CHECK_HDF5(H5Dopen2(f, "images/bytes", dapl), path);
    sh->rle_ds = MRCNN_CHECK_HDF5(H5Dopen2(f, "annotations/rle", dapl), path);
    MRCNN_CHECK_HDF5(H5Pclose(dapl), path);
}

void mrcnn_shard_close(mrcnn_shard *sh) {
    if (sh->bytes_ds > 0) MRCNN_CHECK_HDF5(H5Dclose((hid_t)sh->bytes_ds), "images/bytes");
    if (sh->rle_ds > 0) MRCNN_CHECK_HDF5(H5Dclose((hid_t)sh->rle_ds), "annotations/rle");
    if (sh->file > 0) MRCNN_CHECK_HDF5(H5Fclose((hid_t)sh->file), "shard file");
    void *all[] = {sh->image_id, sh->height, sh->width, sh->offset, sh->length, sh->ann_start, sh->ann_count,
                   sh->flags, sh->name_offset, sh->names, sh->ann_id, sh->ann_image, sh->ann_bbox,
                   sh->ann_category_id, sh->ann_class, sh->ann_iscrowd, sh->ann_area, sh->rle_offset};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    memset(sh, 0, sizeof *sh);
}

/* Independent reads only: the datasets were opened collectively with the file. */
static void read_range(hid_t ds, const char *name, int64_t start, int64_t count, void *dst) {
    if (count <= 0) return;
    hid_t fs = MRCNN_CHECK_HDF5(H5Dget_space(ds), name);
    hsize_t s = (hsize_t)start, c = (hsize_t)count;
    MRCNN_CHECK_HDF5(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &s, NULL, &c, NULL), name);
    hid_t ms = MRCNN_CHECK_HDF5(H5Screate_simple(1, &c, NULL), name);
    MRCNN_CHECK_HDF5(H5Dread(ds, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, dst), name);
    H5Sclose(ms);
    H5Sclose(fs);
}

size_t mrcnn_shard_read_image(const mrcnn_shard *sh, int64_t i, uint8_t **buf, size_t *cap) {
    MRCNN_CHECK(i >= 0 && i < sh->num_images, "image index %lld out of range [0, %lld)", (long long)i,
                (long long)sh->num_images);
    const int64_t off = sh->offset[i], len = sh->length[i];
    MRCNN_CHECK(off >= 0 && len >= 0 && off + len <= sh->image_bytes, "image %lld: bytes [%lld, +%lld) outside the shard's %lld",
                (long long)i, (long long)off, (long long)len, (long long)sh->image_bytes);
    if (*cap < (size_t)len + 1) {
        *buf = MRCNN_REALLOC(*buf, (size_t)len + 1, "image bytes");
        *cap = (size_t)len + 1;
    }
    read_range((hid_t)sh->bytes_ds, "images/bytes", off, len, *buf);
    return (size_t)len;
}

size_t mrcnn_shard_read_rles(const mrcnn_shard *sh, int64_t a0, int64_t n, char **buf, size_t *cap) {
    MRCNN_CHECK(a0 >= 0 && n >= 0 && a0 + n <= sh->num_annotations, "annotations [%lld, +%lld) out of range",
                (long long)a0, (long long)n);
    const int64_t b0 = sh->rle_offset[a0], b1 = sh->rle_offset[a0 + n];
    MRCNN_CHECK(b0 >= 0 && b0 <= b1 && b1 <= sh->rle_bytes, "RLE offsets of annotations [%lld, +%lld) are invalid",
                (long long)a0, (long long)n);
    size_t need = (size_t)(b1 - b0) + (size_t)n + 1;
    char *raw = MRCNN_MALLOC((size_t)(b1 - b0) + 1, "rle bytes");
    read_range((hid_t)sh->rle_ds, "annotations/rle", b0, b1 - b0, raw);
    if (*cap < need) {
        *buf = MRCNN_REALLOC(*buf, need, "rle strings");
        *cap = need;
    }
    size_t o = 0;
    for (int64_t a = a0; a < a0 + n; a++) {
        size_t l = (size_t)(sh->rle_offset[a + 1] - sh->rle_offset[a]);
        MRCNN_CHECK(sh->rle_offset[a + 1] >= sh->rle_offset[a], "RLE offsets out of order at annotation %lld", (long long)a);
        memcpy(*buf + o, raw + (sh->rle_offset[a] - b0), l);
        o += l;
        (*buf)[o++] = 0;
    }
    free(raw);
    return o;
}
