/* `mrcnn-prep export`: the shard set back out as a COCO instances JSON, masks as
 * compressed RLE strings, so that a conversion can be compared with its source by any
 * COCO tool. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrcnn/check.h"
#include "mrcnn/data.h"
#include "mrcnn/json.h"
#include "prep.h"

static void export_usage(FILE *f) {
    fprintf(f,
            "usage: mrcnn-prep export NAME-index.h5 --out FILE.json\n"
            "Writes the images, annotations (segmentation as {\"size\": [h, w], \"counts\": \"...\"})\n"
            "and categories of a shard set as a COCO instances JSON.\n");
}

static char g_tmp[8192]; // the half-written output, removed on failure

static void on_fail(const char *message) {
    (void)message;
    if (g_tmp[0]) unlink(g_tmp);
    g_tmp[0] = 0;
}

int prep_cmd_export(int argc, char **argv) {
    const char *index = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (prep_is_help(argv[i])) {
            export_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--out")) {
            out = prep_arg_value(argc, argv, &i);
        } else if (argv[i][0] != '-' && !index) {
            index = argv[i];
        } else {
            fprintf(stderr, "mrcnn-prep export: unknown option '%s'\n", argv[i]);
            export_usage(stderr);
            return 2;
        }
    }
    if (!index || !out) {
        fprintf(stderr, "mrcnn-prep export: the index file and --out are required\n");
        export_usage(stderr);
        return 2;
    }
    mrcnn_shard_set set;
    mrcnn_shard_set_open(&set, index);
    char tmp[8192];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    FILE *f = fopen(tmp, "w");
    MRCNN_CHECK(f, "cannot write %s", tmp);
    snprintf(g_tmp, sizeof g_tmp, "%s", tmp);
    mrcnn_set_fail_handler(on_fail);
    fprintf(f, "{\"categories\": [");
    for (int c = 0; c < set.num_classes; c++) {
        fprintf(f, "%s\n  {\"id\": %lld, \"name\": ", c ? "," : "", (long long)set.category_ids[c]);
        mrcnn_json_write_string(f, set.category_names[c]);
        fprintf(f, ", \"supercategory\": ");
        mrcnn_json_write_string(f, set.category_supercategories[c]);
        fprintf(f, "}");
    }
    /* Images first, then annotations: two passes over the shards keep memory small. */
    fprintf(f, "],\n\"images\": [");
    int64_t n = 0;
    for (int s = 0; s < set.num_shards; s++) {
        mrcnn_shard sh;
        mrcnn_shard_set_open_shard(&set, s, &sh, 0);
        for (int64_t i = 0; i < sh.num_images; i++) {
            int64_t l = sh.name_offset[i + 1] - sh.name_offset[i];
            char *name = MRCNN_MALLOC((size_t)l + 1, "file name");
            memcpy(name, sh.names + sh.name_offset[i], (size_t)l);
            name[l] = 0;
            fprintf(f, "%s\n  {\"id\": %lld, \"file_name\": ", n++ ? "," : "", (long long)sh.image_id[i]);
            mrcnn_json_write_string(f, name);
            fprintf(f, ", \"height\": %d, \"width\": %d}", sh.height[i], sh.width[i]);
            free(name);
        }
        mrcnn_shard_close(&sh);
    }
    fprintf(f, "],\n\"annotations\": [");
    n = 0;
    char *rles = NULL;
    size_t cap = 0;
    for (int s = 0; s < set.num_shards; s++) {
        mrcnn_shard sh;
        mrcnn_shard_set_open_shard(&set, s, &sh, 0);
        mrcnn_shard_read_rles(&sh, 0, sh.num_annotations, &rles, &cap);
        const char *r = rles;
        for (int64_t a = 0; a < sh.num_annotations; a++, r += strlen(r) + 1) {
            const int64_t i = sh.ann_image[a];
            const float *b = sh.ann_bbox + 4 * a;
            fprintf(f, "%s\n  {\"id\": %lld, \"image_id\": %lld, \"category_id\": %lld, \"iscrowd\": %d, \"area\": %.17g, ",
                    n++ ? "," : "", (long long)sh.ann_id[a], (long long)sh.image_id[i], (long long)sh.ann_category_id[a],
                    sh.ann_iscrowd[a], sh.ann_area[a]);
            fprintf(f, "\"bbox\": [%.9g, %.9g, %.9g, %.9g], \"segmentation\": {\"size\": [%d, %d], \"counts\": ",
                    b[0], b[1], b[2], b[3], sh.height[i], sh.width[i]);
            mrcnn_json_write_string(f, r);
            fprintf(f, "}}");
        }
        mrcnn_shard_close(&sh);
    }
    fprintf(f, "]}\n");
    free(rles);
    MRCNN_CHECK(fclose(f) == 0, "cannot write %s", tmp);
    MRCNN_CHECK(rename(tmp, out) == 0, "cannot rename %s to %s", tmp, out);
    g_tmp[0] = 0;
    printf("exported %lld images and %lld annotations to %s\n", (long long)set.num_images,
           (long long)set.num_annotations, out);
    mrcnn_shard_set_free(&set);
    return 0;
}
