/* mrcnn-prep: dataset preparation subcommands (COCO -> shards, synthetic shapes,
 * inspect, export) and the pieces they share. */
#ifndef MRCNN_PREP_H
#define MRCNN_PREP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv); // argv[0] is the command name
    const char *summary;
} prep_command;

int prep_cmd_coco(int argc, char **argv);
int prep_cmd_shapes(int argc, char **argv);
int prep_cmd_inspect(int argc, char **argv);
int prep_cmd_export(int argc, char **argv);

/* rgb (h, w, 3); return 0 with errno-style reason printed by the caller on failure.
 * (PNG: mrcnn_png_write_rgb, png_write.h.) */
int prep_jpeg_write(const char *path, const uint8_t *rgb, int h, int w, int quality);

/* "--flag value" parsing helpers: the value after argv[*i] or a failure naming the flag. */
const char *prep_arg_value(int argc, char **argv, int *i);
long long prep_arg_int(int argc, char **argv, int *i, long long lo, long long hi);
int prep_is_help(const char *a);
/* mkdir -p; fails naming the path. */
void prep_mkdirs(const char *path);

/* ---- shard writing (shard_write.c; the format is documented there and in README.md) ---- */
typedef struct {
    int n;
    int64_t *ids;   // (n) ascending: the contiguous class index is the position
    char **names;   // (n)
    char **supers;  // (n) supercategory, "" when absent
} prep_categories;

typedef struct prep_shard_writer prep_shard_writer;
/* Creates dir/NAME-SSSSS-of-NNNNN.h5.tmp; prep_shard_finish renames it into place. */
prep_shard_writer *prep_shard_begin(const char *dir, const char *name, int shard, int num_shards,
                                    const prep_categories *cats);
void prep_shard_add_image(prep_shard_writer *w, int64_t id, int32_t height, int32_t width,
                          const char *file_name, uint8_t flags, const uint8_t *bytes, size_t len);
/* An annotation of the image added last. rle: COCO compressed RLE string. */
void prep_shard_add_annotation(prep_shard_writer *w, int64_t id, const float bbox[4], int64_t category_id,
                               int32_t class_index, uint8_t iscrowd, double area, const char *rle);
/* Writes the tables, closes, renames; returns the counts. */
void prep_shard_finish(prep_shard_writer *w, int64_t *images, int64_t *annotations, int64_t *bytes);
/* "NAME-00003-of-00016.h5" (gen 0) or "NAME-00003-of-00016.g2.h5" (gen 2): a re-conversion
 * moves its shards in beside the old set's under names no file has yet. */
void prep_shard_file_name(char *buf, size_t len, const char *name, int shard, int num_shards, int gen);
/* 1 when fname is a shard file name of set NAME, of any generation. */
int prep_is_shard_file_name(const char *fname, const char *name);
/* dir/NAME-index.h5 (via a temporary name), naming the shards of generation gen. */
void prep_index_write(const char *dir, const char *name, int num_shards, int gen, const int64_t *images,
                      const int64_t *annotations, const int64_t *bytes, const prep_categories *cats);

/* HDF5 helpers (h5util.c). Every dataset they write is chunked with a Fletcher32
 * checksum per chunk; files are created in the 1.8 format (checksummed metadata). */
#define PREP_H5_TABLE_CHUNK (64 << 10) // bytes per chunk of a table
/* An HDF5 call's result, checked: a failure names the file, what was written and the
 * system's reason ("No space left on device"), not HDF5's return code. */
int64_t prep_h5_check(int64_t r, const char *file, const char *what, const char *call, const char *src, int line);
#define PREP_H5(call, file, what) prep_h5_check((int64_t)(call), (file), (what), #call, __FILE__, __LINE__)
/* The name of the file that loc (a file or object id) belongs to. */
void prep_h5_file_name(int64_t loc, char *buf, size_t len);
int64_t prep_h5_create(const char *path);
/* A dataset creation list: chunks of about chunk_bytes along dims[0], Fletcher32. */
int64_t prep_h5_dcpl_checksummed(int rank, const uint64_t *dims, size_t elem_bytes, size_t chunk_bytes,
                                 const char *name);
void prep_h5_write_chunked(int64_t loc, const char *name, int64_t type, int rank, const uint64_t *dims,
                           const void *data, size_t chunk_bytes);
void prep_h5_write(int64_t loc, const char *name, int64_t type, int rank, const uint64_t *dims,
                   const void *data);
void prep_h5_attr_i64(int64_t loc, const char *name, int64_t v);
void prep_h5_attr_str(int64_t loc, const char *name, const char *v);
/* Strings as flat bytes (NAME) + offsets (NAME_offset, n + 1). */
void prep_h5_write_strings(int64_t loc, const char *name, int n, char *const *strs);

#endif
