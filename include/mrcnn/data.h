/* Training data: the sharded HDF5 dataset (format in data_prep/README.md), the
 * image codecs, and the trainer's loader (parallel HDF5 reads, decode/augment
 * worker threads, double-buffered prefetch, a resumable cursor).
 * Implementation: src/data/. */
#ifndef MRCNN_DATA_H
#define MRCNN_DATA_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "mrcnn/config.h"
#include "mrcnn/rle.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- shard format: names shared by the writer (data_prep) and the reader ---- */
/* 2: every dataset chunked with HDF5's Fletcher32 checksum filter, files in the 1.8
 * format (superblock and object headers checksummed too); schema 1 had no checksums. */
#define MRCNN_SHARD_SCHEMA_VERSION 2
#define MRCNN_IMAGE_FLAG_NO_ANNOTATIONS 1u // kept, but flagged by the converter
/* Image sides are at most MRCNN_MAX_IMAGE_SIDE (rle.h), and an image has at most
 * MRCNN_MAX_IMAGE_PIXELS pixels: PIL's decompression-bomb limit (2 x Image.MAX_IMAGE_PIXELS),
 * so what a torchvision pipeline opens opens here too, and a few hundred bytes of header
 * cannot ask for 12 GB of pixels. */
#define MRCNN_MAX_IMAGE_PIXELS 178956970LL

/* ---- image codecs (src/data/image.c); pure CPU, thread-safe ---- */
/* Decodes a JPEG (grayscale, RGB/YCbCr, CMYK/YCCK) or PNG into RGB8 (H, W, 3).
 * *rgb is grown with realloc when *cap is too small (both may start as NULL/0).
 * Returns 1, or 0 with a reason in err ("truncated JPEG: ...") on any corruption,
 * including libjpeg's recoverable warnings such as a premature end of data. */
int mrcnn_image_decode(const uint8_t *data, size_t len, uint8_t **rgb, size_t *cap, int *h, int *w,
                       char *err, size_t err_len);
/* Validates a whole file for the converter: every JPEG scan is entropy-decoded (at
 * 1/8 scale, which is cheap) so truncation and corrupt data are found. */
int mrcnn_image_check(const uint8_t *data, size_t len, int *h, int *w, char *err, size_t err_len);

/* ---- a shard set, read side (src/data/shard.c) ---- */
typedef struct mrcnn_shard_set {
    char *dir;                // folder of the index file; shard paths are relative to it
    char *name;
    int num_shards;
    char **files;             // (num_shards) shard file names
    int64_t *shard_images;    // (num_shards)
    int64_t *shard_annotations; // (num_shards)
    int64_t *shard_bytes;     // (num_shards) encoded image bytes
    int64_t *image_base;      // (num_shards + 1) global image index of each shard's first image
    int64_t num_images, num_annotations;
    int num_classes;          // contiguous class index c in [0, num_classes) <-> category_ids[c]
    int64_t *category_ids;    // (num_classes), ascending
    char **category_names;    // (num_classes)
    char **category_supercategories; // (num_classes)
} mrcnn_shard_set;

/* Reads NAME-index.h5 (any process, any thread that owns HDF5; plain POSIX I/O) and
 * checks every field (counts, file names, category ids ascending); a damaged or
 * inconsistent index fails with one line naming the file, the dataset and the index. */
void mrcnn_shard_set_open(mrcnn_shard_set *s, const char *index_path);
void mrcnn_shard_set_free(mrcnn_shard_set *s);
/* dir/files[i] into buf. */
void mrcnn_shard_set_path(const mrcnn_shard_set *s, int i, char *buf, size_t len);

/* One shard's tables in memory; the image bytes and RLE strings stay in the file. */
typedef struct mrcnn_shard {
    int64_t file;             // hid_t of the open file
    int64_t bytes_ds, rle_ds; // hid_t of images/bytes and annotations/rle, opened once (collectively)
    int64_t num_images, num_annotations;
    int64_t *image_id;        // (num_images)
    int32_t *height, *width;  // (num_images)
    int64_t *offset, *length; // (num_images) into the flat image bytes
    int64_t *ann_start, *ann_count; // (num_images) the image's annotations are contiguous
    uint8_t *flags;           // (num_images) MRCNN_IMAGE_FLAG_*
    int64_t *name_offset;     // (num_images + 1) into names
    char *names;              // file names, concatenated without separators
    int64_t *ann_id;          // (num_annotations)
    int64_t *ann_image;       // (num_annotations) image index within the shard
    float *ann_bbox;          // (num_annotations, 4) x, y, w, h as in COCO
    int64_t *ann_category_id; // (num_annotations)
    int32_t *ann_class;       // (num_annotations) contiguous class index, 0-based
    uint8_t *ann_iscrowd;     // (num_annotations)
    double *ann_area;         // (num_annotations) as given (or the RLE area when absent)
    int64_t *rle_offset;      // (num_annotations + 1) into the flat RLE string bytes
    int64_t rle_bytes;        // total
    int64_t image_bytes;      // total
    int64_t num_categories;   // the shard's own category table (equal to its index's)
    int64_t *category_ids;    // (num_categories) ascending
    char *path;               // the file, for messages
} mrcnn_shard;

/* fapl: an HDF5 file-access property list id, or 0 for the default (POSIX) driver.
 * With an MPI-IO fapl the open is collective over its communicator.
 * Every table is validated once here, so that no reader can be led out of bounds:
 * counts and rows agree, image byte ranges, annotation ranges (contiguous, each
 * annotation's image is the one whose range holds it), RLE and name offsets lie in
 * their byte streams, image sizes in [1, MRCNN_MAX_IMAGE_SIDE], class ids map to the
 * categories, boxes and areas are finite and in range (mrcnn_bbox_in_range), flags and
 * crowd flags are 0/1, and every dataset carries its Fletcher32 checksum. Any problem
 * fails (exit 1) with one line naming the file, the dataset, the index and the value. */
void mrcnn_shard_open(mrcnn_shard *sh, const char *path, int64_t fapl);
/* Opens shard i of a set (mrcnn_shard_open) and checks it against the index: image,
 * annotation and byte counts, and the category table. */
void mrcnn_shard_set_open_shard(const mrcnn_shard_set *s, int i, mrcnn_shard *sh, int64_t fapl);
void mrcnn_shard_close(mrcnn_shard *sh);
/* Encoded bytes of image i into *buf (grown as needed); returns the length. A read
 * error or a checksum mismatch fails, naming the shard, images/bytes and the image. */
size_t mrcnn_shard_read_image(const mrcnn_shard *sh, int64_t i, uint8_t **buf, size_t *cap);
/* The RLE strings of annotations [a0, a0 + n) into *buf (grown), each NUL-terminated
 * in turn; returns the byte count including the NULs. Fails like read_image. */
size_t mrcnn_shard_read_rles(const mrcnn_shard *sh, int64_t a0, int64_t n, char **buf, size_t *cap);
/* The same, returning 0 with the reason in err instead of failing (inspect --check
 * reports damaged images and masks as problems and goes on). */
int mrcnn_shard_try_read_image(const mrcnn_shard *sh, int64_t i, uint8_t **buf, size_t *cap, size_t *len, char *err,
                               size_t err_len);
int mrcnn_shard_try_read_rles(const mrcnn_shard *sh, int64_t a0, int64_t n, char **buf, size_t *cap, size_t *len,
                              char *err, size_t err_len);
/* A file access property list for MPI-IO on comm (close with H5Pclose). */
int64_t mrcnn_shard_fapl_mpio(MPI_Comm comm);

/* ---- the loader (src/data/loader.c) ---- */
/* The MPI thread level the loader needs: its I/O thread makes MPI-IO calls while
 * the training thread runs collectives. mrcnn_loader_create checks it. */
#define MRCNN_DATA_MPI_THREAD_LEVEL MPI_THREAD_MULTIPLE

typedef struct mrcnn_loader_opts {
    const char *index_path;   // NAME-index.h5
    MPI_Comm comm;            // every rank of comm creates the loader
    int batch_size;           // images per rank per step
    int train;                // 1: shuffle, flip, multi-scale, drop the remainder;
                              // 0: dataset order, no flip, first min size, every image once
    uint64_t seed;
    int min_sizes[16];        // short-side choices (one drawn per image when train)
    int num_min_sizes;
    int max_size;             // long-side cap
    int size_divisibility;    // pad H and W up to a multiple (0 or 1: none)
    int fixed_h, fixed_w;     // > 0: pad every batch to this canvas (static shapes)
    int flip;                 // horizontal flip with probability 1/2 (train only)
    float pixel_mean[3], pixel_std[3]; // RGB, 0-255 scale
    int num_workers;          // decode/augment threads per rank (>= 1)
    int aspect_grouping;      // every global batch all landscape or all portrait
    int masks;                // decode the masks (0: boxes and classes only)
    int prefetch;             // batches prepared ahead (>= 1; 2 = double buffering)
    int64_t start_epoch, start_step; // the cursor to resume from
    int num_classes;          // the model's classes (> 0): a set with more categories is refused at
                              // open, naming both counts (0: not checked)
    /* Optional allocator for the batch images (e.g. cudaHostAlloc'ed pinned memory for
     * fast copies to the GPU); NULL: malloc/free. Called from the loader's I/O thread. */
    void *(*image_alloc)(size_t bytes);
    void (*image_free)(void *p);
} mrcnn_loader_opts;

/* Fills opts from INPUT.*, DATALOADER.*, MODEL.PIXEL_MEAN/STD and SEED; the caller sets
 * index_path, comm and batch_size (SOLVER.IMS_PER_BATCH / world size). */
void mrcnn_loader_opts_from_config(mrcnn_loader_opts *o, const mrcnn_config *cfg, int train);

/* The loader's test-time input transform, for callers outside src/data (inference):
 * (h, w) -> (nh, nw) with the shorter side min_size and the longer at most max_size;
 * then the RGB image (h, w, 3) resized bilinearly to (nh, nw), normalized by
 * mean/std and written, unflipped, into the float canvas (ch, cw, 3), exactly as a
 * training batch is (src/data/augment.c). */
void mrcnn_data_resize_shape(int h, int w, int min_size, int max_size, int *nh, int *nw);
void mrcnn_data_resize_normalize(const uint8_t *rgb, int h, int w, int nh, int nw, const float mean[3],
                                 const float std_[3], float *canvas, int ch, int cw);

/* One rank's batch. Valid until the next mrcnn_loader_next call. */
typedef struct mrcnn_data_batch {
    int n;                    // images
    int height, width;        // padded canvas
    float *images;            // (n, height, width, 3) normalized, zero padding
    int *image_h, *image_w;   // (n) resized size inside the canvas
    int *orig_h, *orig_w;     // (n) size in the dataset
    float *scale;             // (n) resized / original
    int64_t *image_id;        // (n) COCO image id
    int64_t *image_index;     // (n) global index in the shard set
    uint8_t *flipped;         // (n)
    uint8_t *valid;           // (n) 0 only for the repeats that pad the last evaluation step
    int64_t *inst_start;      // (n + 1) the instances of image i are [inst_start[i], inst_start[i+1])
    int64_t num_instances;
    float *boxes;             // (num_instances, 4) x1, y1, x2, y2 in canvas pixels
    int32_t *classes;         // (num_instances) contiguous class index
    int64_t *category_id;     // (num_instances)
    uint8_t *iscrowd;         // (num_instances)
    uint8_t *masks;           // (num_instances, height, width) 0/1, or NULL without masks
    int64_t epoch, step;      // which step of which epoch this is
} mrcnn_data_batch;

typedef struct mrcnn_loader mrcnn_loader; // opaque

/* Collective over opts->comm. */
mrcnn_loader *mrcnn_loader_create(const mrcnn_loader_opts *opts);
/* Collective over opts->comm (the HDF5 files close collectively). */
void mrcnn_loader_destroy(mrcnn_loader *l);
/* Steps per epoch: the same on every rank and every epoch. Training drops the images
 * left over after the last full global batch (batch_size * ranks; with aspect grouping,
 * the leftovers of both buckets): a different few each epoch, since the permutation
 * changes. Evaluation (train = 0) pads the last step with repeats (valid = 0). */
int64_t mrcnn_loader_steps_per_epoch(const mrcnn_loader *l);
int64_t mrcnn_loader_num_images(const mrcnn_loader *l);
/* Blocks until the next batch is ready; crosses epochs on its own. */
const mrcnn_data_batch *mrcnn_loader_next(mrcnn_loader *l);
/* The position of the batch the next mrcnn_loader_next returns: save it in the
 * checkpoint, and pass it back as start_epoch/start_step to continue exactly. */
void mrcnn_loader_cursor(const mrcnn_loader *l, int64_t *epoch, int64_t *step);
/* Seconds per stage, summed over this rank's threads: read (HDF5, wall time on the
 * I/O thread); decode, resize (+ flip, normalize, pad) and masks (CPU time of the
 * workers, so that the costs hold on a busy machine); and the wall time next() waited. */
typedef struct mrcnn_loader_stats {
    double read_s, decode_s, resize_s, masks_s, wait_s;
    int64_t images;
} mrcnn_loader_stats;
void mrcnn_loader_stats_get(const mrcnn_loader *l, mrcnn_loader_stats *st);

/* The process-wide lock around HDF5 calls (Debian's parallel HDF5 is not
 * thread-safe). The loader's I/O thread holds it for each HDF5 call; other code that
 * touches HDF5 while a loader runs (checkpoints) must take it too. */
void mrcnn_hdf5_lock(void);
void mrcnn_hdf5_unlock(void);

#ifdef __cplusplus
}
#endif
#endif
