/* The names inside a shard set's HDF5 files, written by mrcnn-prep (data_prep/shard_write.c)
 * and read by the loader (src/data/shard.c): one spelling for both. The format itself, with
 * each dataset's type and shape, is in data.h (MRCNN_SHARD_SCHEMA_VERSION and the shard
 * structs). */
#ifndef MRCNN_SHARD_SCHEMA_H
#define MRCNN_SHARD_SCHEMA_H

/* Attributes of the root group. A shard has all but num_classes; the index has all but shard. */
#define MRCNN_SHARD_ATTR_SCHEMA_VERSION      "schema_version"
#define MRCNN_SHARD_ATTR_NAME                "name"
#define MRCNN_SHARD_ATTR_SHARD               "shard"
#define MRCNN_SHARD_ATTR_NUM_SHARDS          "num_shards"
#define MRCNN_SHARD_ATTR_NUM_IMAGES          "num_images"
#define MRCNN_SHARD_ATTR_NUM_ANNOTATIONS     "num_annotations"
#define MRCNN_SHARD_ATTR_NUM_CLASSES         "num_classes"

/* One shard: a row per image. */
#define MRCNN_SHARD_IMAGES_BYTES             "images/bytes"
#define MRCNN_SHARD_IMAGES_ID                "images/id"
#define MRCNN_SHARD_IMAGES_HEIGHT            "images/height"
#define MRCNN_SHARD_IMAGES_WIDTH             "images/width"
#define MRCNN_SHARD_IMAGES_OFFSET            "images/offset"
#define MRCNN_SHARD_IMAGES_LENGTH            "images/length"
#define MRCNN_SHARD_IMAGES_ANN_START         "images/ann_start"
#define MRCNN_SHARD_IMAGES_ANN_COUNT         "images/ann_count"
#define MRCNN_SHARD_IMAGES_FLAGS             "images/flags"
#define MRCNN_SHARD_IMAGES_NAMES             "images/names"
#define MRCNN_SHARD_IMAGES_NAMES_OFFSET      "images/names_offset"

/* One shard: a row per annotation (rle: the COCO RLE bytes of all; rle_offset: (M + 1) rows). */
#define MRCNN_SHARD_ANNOTATIONS_ID           "annotations/id"
#define MRCNN_SHARD_ANNOTATIONS_IMAGE        "annotations/image"
#define MRCNN_SHARD_ANNOTATIONS_BBOX         "annotations/bbox"
#define MRCNN_SHARD_ANNOTATIONS_CATEGORY_ID  "annotations/category_id"
#define MRCNN_SHARD_ANNOTATIONS_CLASS        "annotations/class"
#define MRCNN_SHARD_ANNOTATIONS_ISCROWD      "annotations/iscrowd"
#define MRCNN_SHARD_ANNOTATIONS_AREA         "annotations/area"
#define MRCNN_SHARD_ANNOTATIONS_RLE          "annotations/rle"
#define MRCNN_SHARD_ANNOTATIONS_RLE_OFFSET   "annotations/rle_offset"

/* The categories, in both a shard and the index. */
#define MRCNN_SHARD_CATEGORIES_ID            "categories/id"
#define MRCNN_SHARD_CATEGORIES_NAMES         "categories/names"
#define MRCNN_SHARD_CATEGORIES_SUPERCATEGORIES "categories/supercategories"

/* The index (NAME-index.h5): a row per shard. */
#define MRCNN_SHARD_SHARDS_FILES             "shards/files"
#define MRCNN_SHARD_SHARDS_NUM_IMAGES        "shards/num_images"
#define MRCNN_SHARD_SHARDS_NUM_ANNOTATIONS   "shards/num_annotations"
#define MRCNN_SHARD_SHARDS_BYTES             "shards/bytes"

#endif
