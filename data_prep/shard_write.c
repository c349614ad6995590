/* The shard writer. Shard format, schema version 1 (MRCNN_SHARD_SCHEMA_VERSION; the
 * reader is src/data/shard.c, the prose in data_prep/README.md):
 *
 * NAME-SSSSS-of-NNNNN.h5
 *   attributes   schema_version, name, shard, num_shards, num_images, num_annotations
 *   images/bytes          uint8 (B)     the image files exactly as given (JPEG or PNG), concatenated
 *   images/offset         int64 (n)     where image i starts in images/bytes
 *   images/length         int64 (n)
 *   images/id             int64 (n)     COCO image id
 *   images/height, width  int32 (n)
 *   images/ann_start      int64 (n)     image i's annotations are rows [ann_start, ann_start + ann_count)
 *   images/ann_count      int64 (n)
 *   images/flags          uint8 (n)     1 = the image had no annotations (kept, flagged)
 *   images/names          uint8         file names concatenated; images/names_offset int64 (n + 1)
 *   annotations/id        int64 (m)
 *   annotations/image     int64 (m)     image index within this shard
 *   annotations/bbox      float32 (m, 4) x, y, w, h
 *   annotations/category_id int64 (m)
 *   annotations/class     int32 (m)     contiguous class index (0-based, categories sorted by id)
 *   annotations/iscrowd   uint8 (m)
 *   annotations/area      float64 (m)
 *   annotations/rle       uint8         COCO compressed RLE strings concatenated (all masks,
 *                                       polygons included, in pycocotools' compressed form);
 *                                       annotations/rle_offset int64 (m + 1)
 *   categories/id         int64 (K), categories/names + names_offset, categories/supercategories
 *                         + supercategories_offset
 * Every dataset is chunked with HDF5's Fletcher32 checksum (schema 2), and the file is
 * in the 1.8 format, whose metadata is checksummed too: the reader verifies them all.
 * A shard is written as NAME-...h5.tmp and renamed once closed: a file with the final
 * name is always complete. `mrcnn-prep coco` writes a whole set into a staging folder,
 * moves the shards in under names of a new generation (NAME-SSSSS-of-NNNNN.gG.h5, G > 0,
 * when the plain names are taken) and renames the index over the old one last: the
 * index names its shards, so that rename is the conversion's one commit point (cmd_coco.c).
 */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/data.h"
#include "mrcnn/shard_schema.h"
#include "prep.h"

/* Chunks of the byte streams. Each chunk carries a Fletcher32 checksum, so a read
 * fetches (and verifies) every chunk it touches whole: small chunks keep that close to
 * the bytes asked for (COCO images average ~160 KB, an image's RLE strings < 1 KB). */
#define CHUNK_BYTES (64 << 10)
#define RLE_CHUNK_BYTES (16 << 10)

typedef struct {
    void *p;
    size_t n, cap, elem;
} vec;

static void vec_push(vec *v, const void *x, size_t count) {
    if (v->n + count > v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        while (cap < v->n + count) cap *= 2;
        v->p = MRCNN_REALLOC(v->p, cap * v->elem, "shard table");
        v->cap = cap;
    }
    memcpy((char *)v->p + v->n * v->elem, x, count * v->elem);
    v->n += count;
}

struct prep_shard_writer {
    char final_path[4096], tmp_path[4200], name[256];
    int shard, num_shards;
    const prep_categories *cats;
    hid_t file, bytes_ds;
    int64_t total_bytes;
    vec offset, length, id, height, width, ann_start, ann_count, flags, names, names_offset;
    vec a_id, a_image, a_bbox, a_cat, a_class, a_crowd, a_area, rle, rle_offset;
};

void prep_shard_file_name(char *buf, size_t len, const char *name, int shard, int num_shards, int gen) {
    if (gen > 0)
        snprintf(buf, len, "%s-%05d-of-%05d.g%d.h5", name, shard, num_shards, gen);
    else
        snprintf(buf, len, "%s-%05d-of-%05d.h5", name, shard, num_shards);
}

static int digits(const char **p, int min, int max) {
    int n = 0;
    while (n < max && (*p)[n] >= '0' && (*p)[n] <= '9') n++;
    if (n < min || ((*p)[n] >= '0' && (*p)[n] <= '9')) return 0;
    *p += n;
    return 1;
}

int prep_is_shard_file_name(const char *fname, const char *name) {
    const size_t nl = strlen(name);
    if (strncmp(fname, name, nl) || fname[nl] != '-') return 0;
    const char *p = fname + nl + 1;
    if (!digits(&p, 5, 5) || strncmp(p, "-of-", 4)) return 0;
    p += 4;
    if (!digits(&p, 5, 5)) return 0;
    if (!strncmp(p, ".g", 2)) {
        p += 2;
        if (!digits(&p, 1, 9)) return 0;
    }
    return !strcmp(p, ".h5");
}

prep_shard_writer *prep_shard_begin(const char *dir, const char *name, int shard, int num_shards,
                                    const prep_categories *cats) {
    prep_shard_writer *w = MRCNN_CALLOC(1, sizeof *w, "shard writer");
    char fname[512];
    prep_shard_file_name(fname, sizeof fname, name, shard, num_shards, 0);
    snprintf(w->final_path, sizeof w->final_path, "%s/%s", dir, fname);
    snprintf(w->tmp_path, sizeof w->tmp_path, "%s.tmp", w->final_path);
    snprintf(w->name, sizeof w->name, "%s", name);
    w->shard = shard;
    w->num_shards = num_shards;
    w->cats = cats;
    vec *i64s[] = {&w->offset, &w->length, &w->id, &w->ann_start, &w->ann_count, &w->names_offset,
                   &w->a_id, &w->a_image, &w->a_cat, &w->rle_offset};
    for (size_t i = 0; i < sizeof i64s / sizeof i64s[0]; i++) i64s[i]->elem = 8;
    w->height.elem = w->width.elem = w->a_class.elem = 4;
    w->flags.elem = w->names.elem = w->a_crowd.elem = w->rle.elem = 1;
    w->a_bbox.elem = 16;
    w->a_area.elem = 8;
    int64_t zero = 0;
    vec_push(&w->names_offset, &zero, 1);
    vec_push(&w->rle_offset, &zero, 1);

    w->file = (hid_t)prep_h5_create(w->tmp_path);
    /* Image bytes grow as files are validated and appended: a chunked, extendible dataset. */
    hsize_t dims = 0, maxd = H5S_UNLIMITED;
    hid_t space = PREP_H5(H5Screate_simple(1, &dims, &maxd), w->tmp_path, MRCNN_SHARD_IMAGES_BYTES);
    const uint64_t d0 = 0;
    hid_t dcpl = (hid_t)prep_h5_dcpl_checksummed(1, &d0, 1, CHUNK_BYTES, MRCNN_SHARD_IMAGES_BYTES);
    hid_t lcpl = PREP_H5(H5Pcreate(H5P_LINK_CREATE), w->tmp_path, MRCNN_SHARD_IMAGES_BYTES);
    PREP_H5(H5Pset_create_intermediate_group(lcpl, 1), w->tmp_path, MRCNN_SHARD_IMAGES_BYTES);
    w->bytes_ds = PREP_H5(H5Dcreate2(w->file, MRCNN_SHARD_IMAGES_BYTES, H5T_NATIVE_UINT8, space, lcpl, dcpl, H5P_DEFAULT),
                          w->tmp_path, MRCNN_SHARD_IMAGES_BYTES);
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    H5Sclose(space);
    return w;
}

void prep_shard_add_image(prep_shard_writer *w, int64_t id, int32_t height, int32_t width,
                          const char *file_name, uint8_t flags, const uint8_t *bytes, size_t len) {
    hsize_t start = (hsize_t)w->total_bytes, count = len, newsize = start + len;
    PREP_H5(H5Dset_extent(w->bytes_ds, &newsize), w->tmp_path, MRCNN_SHARD_IMAGES_BYTES);
    hid_t fs = PREP_H5(H5Dget_space(w->bytes_ds), w->tmp_path, MRCNN_SHARD_IMAGES_BYTES);
    PREP_H5(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL), w->tmp_path, MRCNN_SHARD_IMAGES_BYTES);
    hid_t ms = PREP_H5(H5Screate_simple(1, &count, NULL), w->tmp_path, MRCNN_SHARD_IMAGES_BYTES);
    if (len) PREP_H5(H5Dwrite(w->bytes_ds, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, bytes), w->tmp_path, MRCNN_SHARD_IMAGES_BYTES);
    H5Sclose(ms);
    H5Sclose(fs);
    int64_t off = w->total_bytes, l = (int64_t)len, ann0 = (int64_t)w->a_id.n, zero = 0;
    w->total_bytes += l;
    vec_push(&w->offset, &off, 1);
    vec_push(&w->length, &l, 1);
    vec_push(&w->id, &id, 1);
    vec_push(&w->height, &height, 1);
    vec_push(&w->width, &width, 1);
    vec_push(&w->ann_start, &ann0, 1);
    vec_push(&w->ann_count, &zero, 1);
    vec_push(&w->flags, &flags, 1);
    vec_push(&w->names, file_name, strlen(file_name));
    int64_t end = (int64_t)w->names.n;
    vec_push(&w->names_offset, &end, 1);
}

void prep_shard_add_annotation(prep_shard_writer *w, int64_t id, const float bbox[4], int64_t category_id,
                               int32_t class_index, uint8_t iscrowd, double area, const char *rle) {
    MRCNN_CHECK(w->id.n > 0, "shard %s: an annotation before any image", w->tmp_path);
    int64_t image = (int64_t)w->id.n - 1;
    ((int64_t *)w->ann_count.p)[image]++;
    vec_push(&w->a_id, &id, 1);
    vec_push(&w->a_image, &image, 1);
    vec_push(&w->a_bbox, bbox, 1);
    vec_push(&w->a_cat, &category_id, 1);
    vec_push(&w->a_class, &class_index, 1);
    vec_push(&w->a_crowd, &iscrowd, 1);
    vec_push(&w->a_area, &area, 1);
    vec_push(&w->rle, rle, strlen(rle));
    int64_t end = (int64_t)w->rle.n;
    vec_push(&w->rle_offset, &end, 1);
}

static void write_vec(hid_t f, const char *name, hid_t type, const vec *v, uint64_t cols) {
    uint64_t dims[2] = {v->n, cols};
    /* The loader reads the RLE strings image by image: smaller chunks there. */
    prep_h5_write_chunked(f, name, type, cols > 1 ? 2 : 1, dims, v->p,
                          !strcmp(name, MRCNN_SHARD_ANNOTATIONS_RLE) ? RLE_CHUNK_BYTES : PREP_H5_TABLE_CHUNK);
}

static void write_categories(hid_t f, const prep_categories *c) {
    uint64_t k = (uint64_t)c->n;
    prep_h5_write(f, MRCNN_SHARD_CATEGORIES_ID, H5T_NATIVE_INT64, 1, &k, c->ids);
    prep_h5_write_strings(f, MRCNN_SHARD_CATEGORIES_NAMES, c->n, c->names);
    prep_h5_write_strings(f, MRCNN_SHARD_CATEGORIES_SUPERCATEGORIES, c->n, c->supers);
}

void prep_shard_finish(prep_shard_writer *w, int64_t *images, int64_t *annotations, int64_t *bytes) {
    hid_t f = w->file;
    PREP_H5(H5Dclose(w->bytes_ds), w->tmp_path, MRCNN_SHARD_IMAGES_BYTES);
    prep_h5_attr_i64(f, MRCNN_SHARD_ATTR_SCHEMA_VERSION, MRCNN_SHARD_SCHEMA_VERSION);
    prep_h5_attr_str(f, MRCNN_SHARD_ATTR_NAME, w->name);
    prep_h5_attr_i64(f, MRCNN_SHARD_ATTR_SHARD, w->shard);
    prep_h5_attr_i64(f, MRCNN_SHARD_ATTR_NUM_SHARDS, w->num_shards);
    prep_h5_attr_i64(f, MRCNN_SHARD_ATTR_NUM_IMAGES, (int64_t)w->id.n);
    prep_h5_attr_i64(f, MRCNN_SHARD_ATTR_NUM_ANNOTATIONS, (int64_t)w->a_id.n);
    write_vec(f, MRCNN_SHARD_IMAGES_OFFSET, H5T_NATIVE_INT64, &w->offset, 1);
    write_vec(f, MRCNN_SHARD_IMAGES_LENGTH, H5T_NATIVE_INT64, &w->length, 1);
    write_vec(f, MRCNN_SHARD_IMAGES_ID, H5T_NATIVE_INT64, &w->id, 1);
    write_vec(f, MRCNN_SHARD_IMAGES_HEIGHT, H5T_NATIVE_INT32, &w->height, 1);
    write_vec(f, MRCNN_SHARD_IMAGES_WIDTH, H5T_NATIVE_INT32, &w->width, 1);
    write_vec(f, MRCNN_SHARD_IMAGES_ANN_START, H5T_NATIVE_INT64, &w->ann_start, 1);
    write_vec(f, MRCNN_SHARD_IMAGES_ANN_COUNT, H5T_NATIVE_INT64, &w->ann_count, 1);
    write_vec(f, MRCNN_SHARD_IMAGES_FLAGS, H5T_NATIVE_UINT8, &w->flags, 1);
    write_vec(f, MRCNN_SHARD_IMAGES_NAMES, H5T_NATIVE_UINT8, &w->names, 1);
    write_vec(f, MRCNN_SHARD_IMAGES_NAMES_OFFSET, H5T_NATIVE_INT64, &w->names_offset, 1);
    write_vec(f, MRCNN_SHARD_ANNOTATIONS_ID, H5T_NATIVE_INT64, &w->a_id, 1);
    write_vec(f, MRCNN_SHARD_ANNOTATIONS_IMAGE, H5T_NATIVE_INT64, &w->a_image, 1);
    write_vec(f, MRCNN_SHARD_ANNOTATIONS_BBOX, H5T_NATIVE_FLOAT, &w->a_bbox, 4);
    write_vec(f, MRCNN_SHARD_ANNOTATIONS_CATEGORY_ID, H5T_NATIVE_INT64, &w->a_cat, 1);
    write_vec(f, MRCNN_SHARD_ANNOTATIONS_CLASS, H5T_NATIVE_INT32, &w->a_class, 1);
    write_vec(f, MRCNN_SHARD_ANNOTATIONS_ISCROWD, H5T_NATIVE_UINT8, &w->a_crowd, 1);
    write_vec(f, MRCNN_SHARD_ANNOTATIONS_AREA, H5T_NATIVE_DOUBLE, &w->a_area, 1);
    write_vec(f, MRCNN_SHARD_ANNOTATIONS_RLE, H5T_NATIVE_UINT8, &w->rle, 1);
    write_vec(f, MRCNN_SHARD_ANNOTATIONS_RLE_OFFSET, H5T_NATIVE_INT64, &w->rle_offset, 1);
    write_categories(f, w->cats);
    PREP_H5(H5Fclose(f), w->tmp_path, "closing it");
    MRCNN_CHECK(rename(w->tmp_path, w->final_path) == 0, "cannot rename %s to %s", w->tmp_path, w->final_path);
    *images = (int64_t)w->id.n;
    *annotations = (int64_t)w->a_id.n;
    *bytes = w->total_bytes;
    vec *all[] = {&w->offset, &w->length, &w->id, &w->height, &w->width, &w->ann_start, &w->ann_count,
                  &w->flags, &w->names, &w->names_offset, &w->a_id, &w->a_image, &w->a_bbox, &w->a_cat,
                  &w->a_class, &w->a_crowd, &w->a_area, &w->rle, &w->rle_offset};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]->p);
    free(w);
}

void prep_index_write(const char *dir, const char *name, int num_shards, int gen, const int64_t *images,
                      const int64_t *annotations, const int64_t *bytes, const prep_categories *cats) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s-index.h5", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    hid_t f = (hid_t)prep_h5_create(tmp);
    int64_t ni = 0, na = 0;
    char **files = MRCNN_MALLOC(sizeof(char *) * (num_shards + 1), "shard names");
    for (int s = 0; s < num_shards; s++) {
        ni += images[s];
        na += annotations[s];
        files[s] = MRCNN_MALLOC(512, "shard name");
        prep_shard_file_name(files[s], 512, name, s, num_shards, gen);
    }
    prep_h5_attr_i64(f, MRCNN_SHARD_ATTR_SCHEMA_VERSION, MRCNN_SHARD_SCHEMA_VERSION);
    prep_h5_attr_str(f, MRCNN_SHARD_ATTR_NAME, name);
    prep_h5_attr_i64(f, MRCNN_SHARD_ATTR_NUM_SHARDS, num_shards);
    prep_h5_attr_i64(f, MRCNN_SHARD_ATTR_NUM_IMAGES, ni);
    prep_h5_attr_i64(f, MRCNN_SHARD_ATTR_NUM_ANNOTATIONS, na);
    prep_h5_attr_i64(f, MRCNN_SHARD_ATTR_NUM_CLASSES, cats->n);
    uint64_t n = (uint64_t)num_shards;
    prep_h5_write_strings(f, MRCNN_SHARD_SHARDS_FILES, num_shards, files);
    prep_h5_write(f, MRCNN_SHARD_SHARDS_NUM_IMAGES, H5T_NATIVE_INT64, 1, &n, images);
    prep_h5_write(f, MRCNN_SHARD_SHARDS_NUM_ANNOTATIONS, H5T_NATIVE_INT64, 1, &n, annotations);
    prep_h5_write(f, MRCNN_SHARD_SHARDS_BYTES, H5T_NATIVE_INT64, 1, &n, bytes);
    write_categories(f, cats);
    PREP_H5(H5Fclose(f), tmp, "closing it");
    MRCNN_CHECK(rename(tmp, path) == 0, "cannot rename %s to %s", tmp, path);
    for (int s = 0; s < num_shards; s++) free(files[s]);
    free(files);
}
