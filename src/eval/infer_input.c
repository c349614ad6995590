/* The data side of inference: image files prepared with the test transform (the
 * loader's own resize and normalize, so predict sees what eval sees), the shard set
 * through the loader's evaluation mode, and the dataset's category table. */
#include "mrcnn/infer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/data.h"

static int round_up(int v, int d) { return d > 1 ? (v + d - 1) / d * d : v; }

static int read_file(const char *path, uint8_t **data, size_t *len, char *err, size_t err_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_len, "cannot open '%s': %s", path, strerror(errno));
        return 0;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = MRCNN_MALLOC(cap, "image file");
    for (;;) {
        if (n == cap) buf = MRCNN_REALLOC(buf, cap *= 2, "image file");
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        snprintf(err, err_len, "cannot read '%s'", path);
        free(buf);
        return 0;
    }
    *data = buf;
    *len = n;
    return 1;
}

int mrcnn_infer_load_file(const mrcnn_config *cfg, const char *path, mrcnn_infer_input *in, uint8_t **rgb,
                          char *err, size_t err_len) {
    memset(in, 0, sizeof *in);
    *rgb = NULL;
    uint8_t *data;
    size_t len;
    if (!read_file(path, &data, &len, err, err_len)) return 0;
    size_t cap = 0;
    int h = 0, w = 0;
    char why[512];
    int ok = mrcnn_image_decode(data, len, rgb, &cap, &h, &w, why, sizeof why);
    free(data);
    if (!ok) {
        snprintf(err, err_len, "'%s' is not a readable JPEG or PNG image: %s", path, why);
        free(*rgb);
        *rgb = NULL;
        return 0;
    }
    mrcnn_loader_opts o;
    mrcnn_loader_opts_from_config(&o, cfg, 0);
    in->orig_h = h, in->orig_w = w;
    mrcnn_data_resize_shape(h, w, o.min_sizes[0], o.max_size, &in->h, &in->w);
    if (o.fixed_h > 0) {
        if (in->h > o.fixed_h || in->w > o.fixed_w) {
            snprintf(err, err_len, "'%s': resized to %dx%d, larger than INPUT.FIXED_SIZE %dx%d", path, in->h, in->w,
                     o.fixed_h, o.fixed_w);
            free(*rgb);
            *rgb = NULL;
            return 0;
        }
        in->canvas_h = o.fixed_h, in->canvas_w = o.fixed_w;
    } else {
        in->canvas_h = round_up(in->h, o.size_divisibility);
        in->canvas_w = round_up(in->w, o.size_divisibility);
    }
    in->canvas = MRCNN_MALLOC((size_t)in->canvas_h * in->canvas_w * 3 * sizeof(float), "input canvas");
    mrcnn_data_resize_normalize(*rgb, h, w, in->h, in->w, o.pixel_mean, o.pixel_std, in->canvas, in->canvas_h,
                                in->canvas_w);
    return 1;
}

/* ---- shards ---- */

struct mrcnn_infer_shards {
    mrcnn_loader *loader;
    int64_t steps, step;
};

int mrcnn_infer_thread_level(void) { return MRCNN_DATA_MPI_THREAD_LEVEL; }

mrcnn_infer_shards *mrcnn_infer_shards_create(const mrcnn_config *cfg, const char *index_path, MPI_Comm comm) {
    mrcnn_infer_shards *s = MRCNN_CALLOC(1, sizeof *s, "shard inference");
    mrcnn_loader_opts o;
    mrcnn_loader_opts_from_config(&o, cfg, 0);
    o.index_path = index_path;
    o.comm = comm;
    o.batch_size = 1; // one image per forward (see infer.h)
    o.masks = 0;
    s->loader = mrcnn_loader_create(&o);
    s->steps = mrcnn_loader_steps_per_epoch(s->loader);
    return s;
}

int64_t mrcnn_infer_shards_steps(const mrcnn_infer_shards *s) { return s->steps; }
int64_t mrcnn_infer_shards_num_images(const mrcnn_infer_shards *s) { return mrcnn_loader_num_images(s->loader); }

int mrcnn_infer_shards_next(mrcnn_infer_shards *s, mrcnn_infer_input *in) {
    MRCNN_CHECK(s->step < s->steps, "shard inference: read past the last step (%lld)", (long long)s->steps);
    s->step++;
    const mrcnn_data_batch *b = mrcnn_loader_next(s->loader);
    MRCNN_CHECK(b->n == 1, "shard inference: the loader gave %d images, 1 expected", b->n);
    memset(in, 0, sizeof *in);
    if (!b->valid[0]) return 0;
    in->canvas = b->images;
    in->canvas_h = b->height, in->canvas_w = b->width;
    in->h = b->image_h[0], in->w = b->image_w[0];
    in->orig_h = b->orig_h[0], in->orig_w = b->orig_w[0];
    in->image_id = b->image_id[0];
    in->image_index = b->image_index[0];
    return 1;
}

void mrcnn_infer_shards_destroy(mrcnn_infer_shards *s) {
    if (!s) return;
    mrcnn_loader_destroy(s->loader);
    free(s);
}

/* ---- categories ---- */

void mrcnn_category_table_load(mrcnn_category_table *t, const char *index_path) {
    mrcnn_shard_set set;
    mrcnn_shard_set_open(&set, index_path);
    t->n = set.num_classes;
    t->ids = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(t->n + 1), "category ids");
    t->names = MRCNN_MALLOC(sizeof(char *) * (size_t)(t->n + 1), "category names");
    for (int c = 0; c < t->n; c++) {
        t->ids[c] = set.category_ids[c];
        size_t l = strlen(set.category_names[c]);
        t->names[c] = MRCNN_MALLOC(l + 1, "category name");
        memcpy(t->names[c], set.category_names[c], l + 1);
    }
    mrcnn_shard_set_free(&set);
}

void mrcnn_category_table_free(mrcnn_category_table *t) {
    for (int c = 0; c < t->n; c++) free(t->names[c]);
    free(t->ids);
    free(t->names);
    memset(t, 0, sizeof *t);
}
