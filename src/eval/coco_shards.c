/* Ground truth for `mrcnn eval --shards`: the shard set's images, categories and
 * annotations (masks as the compressed RLE strings the shards store) in memory,
 * field for field what `mrcnn-prep export` writes, so that our numbers and those of
 * pycocotools on the exported JSON agree exactly. */
#include "mrcnn/infer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/data.h"

static char *dup_str(const char *s, size_t len) {
    char *d = MRCNN_MALLOC(len + 1, "ground-truth string");
    memcpy(d, s, len);
    d[len] = 0;
    return d;
}

/* The export prints boxes with %.9g; the JSON reader parses that text as a double. */
static double as_exported(float v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.9g", v);
    return strtod(buf, NULL);
}

void mrcnn_coco_gt_from_shards(mrcnn_coco_gt *gt, const char *index_path) {
    memset(gt, 0, sizeof *gt);
    mrcnn_shard_set set;
    mrcnn_shard_set_open(&set, index_path);
    gt->n_cats = set.num_classes;
    gt->cats = MRCNN_MALLOC(sizeof(mrcnn_coco_category) * (size_t)(gt->n_cats + 1), "coco categories");
    for (int c = 0; c < set.num_classes; c++) {
        gt->cats[c].id = set.category_ids[c];
        gt->cats[c].name = dup_str(set.category_names[c], strlen(set.category_names[c]));
    }
    gt->images = MRCNN_MALLOC(sizeof(mrcnn_coco_image) * (size_t)(set.num_images + 1), "coco images");
    gt->anns = MRCNN_CALLOC((size_t)(set.num_annotations + 1), sizeof(mrcnn_coco_ann), "coco annotations");
    char path[8192], *rles = NULL;
    size_t cap = 0;
    for (int s = 0; s < set.num_shards; s++) {
        mrcnn_shard_set_path(&set, s, path, sizeof path);
        mrcnn_shard sh;
        mrcnn_shard_set_open_shard(&set, s, &sh, 0); // validated: ann_image, sizes, boxes, counts
        for (int64_t i = 0; i < sh.num_images; i++) {
            MRCNN_CHECK(gt->n_images < set.num_images, "%s: more images than its index %s lists", path, index_path);
            mrcnn_coco_image *im = &gt->images[gt->n_images++];
            im->id = sh.image_id[i];
            im->height = sh.height[i];
            im->width = sh.width[i];
        }
        if (sh.num_annotations > 0) mrcnn_shard_read_rles(&sh, 0, sh.num_annotations, &rles, &cap);
        const char *r = rles;
        for (int64_t a = 0; a < sh.num_annotations; a++) {
            MRCNN_CHECK(gt->n_anns < set.num_annotations, "%s: more annotations than its index %s lists", path,
                        index_path);
            size_t len = strlen(r);
            int64_t i = sh.ann_image[a];
            mrcnn_coco_ann *g = &gt->anns[gt->n_anns++];
            g->id = sh.ann_id[a];
            g->image_id = sh.image_id[i];
            g->category_id = sh.ann_category_id[a];
            for (int k = 0; k < 4; k++) g->bbox[k] = as_exported(sh.ann_bbox[4 * a + k]);
            g->has_bbox = 1;
            g->area = sh.ann_area[a];
            g->iscrowd = sh.ann_iscrowd[a] != 0;
            g->segm.kind = MRCNN_SEGM_STRING;
            g->segm.h = sh.height[i];
            g->segm.w = sh.width[i];
            g->segm.str = dup_str(r, len);
            r += len + 1;
        }
        mrcnn_shard_close(&sh);
    }
    free(rles);
    mrcnn_shard_set_free(&set);
    mrcnn_coco_gt_index(gt, index_path);
}
