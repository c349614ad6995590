/* The trainer's loader. Threads per rank:
 *   - one I/O thread: the only one that calls HDF5 (collective open over an MPI-IO file
 *     access list, then independent reads of each image's bytes and RLE strings). It
 *     plans each batch (sizes, boxes, classes: all from the in-memory tables) and queues
 *     one work item per image;
 *   - num_workers decode/augment threads: JPEG/PNG decode, resize + flip + normalize +
 *     pad straight into the batch canvas, RLE masks resized and flipped alike;
 *   - the caller, whose mrcnn_loader_next takes batches in order.
 * prefetch + 1 batch slots rotate: the caller holds one while the others fill, so the
 * step does not wait as long as the loader keeps up. */
#include "mrcnn/data.h"

#include <hdf5.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data_internal.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"
#include "mrcnn/rle.h"
#include "mrcnn/rng.h"

enum { SLOT_FREE, SLOT_LOADING, SLOT_READY, SLOT_HELD };

typedef struct {
    mrcnn_data_batch b;
    int state, pending;
    size_t cap_pixels, cap_masks; // floats in b.images, bytes in b.masks
    int cap_n;
    int64_t cap_inst;
    /* per image of the batch (cap_n) */
    uint8_t **bytes;
    size_t *bytes_len, *bytes_cap;
    char **rles;
    size_t *rles_cap;
    int64_t *ann0; // first annotation row in its shard
} slot;

typedef struct {
    int s, j; // slot, image within the batch
} work_item;

struct mrcnn_loader {
    mrcnn_loader_opts o;
    MPI_Comm comm;
    int rank, size;
    mrcnn_shard_set set;
    mrcnn_shard *shards;   // (set.num_shards)
    int64_t n;             // images
    int *img_shard;        // (n)
    int64_t *img_local;    // (n)
    uint8_t *landscape;    // (n)
    int64_t global_batch, steps;
    int64_t *plan;         // (steps * global_batch) of plan_epoch, I/O thread only
    uint8_t *plan_valid;
    int64_t plan_epoch;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    slot *slots;
    int nslots;
    work_item *queue;      // ring of (cap_queue)
    int q_head, q_len, q_cap;
    pthread_t io;
    pthread_t *workers;
    int stop, opened;
    int64_t io_seq, io_epoch, io_step;   // next batch to load
    int64_t seq, cur_epoch, cur_step;    // next batch to return
    int held;                            // slot the caller holds, or -1
    mrcnn_loader_stats st;
};

static void grow_bytes(void **p, size_t *cap, size_t need, const char *what) {
    if (*cap >= need) return;
    *p = MRCNN_REALLOC(*p, need, what);
    *cap = need;
}

void mrcnn_loader_opts_from_config(mrcnn_loader_opts *o, const mrcnn_config *cfg, int train) {
    memset(o, 0, sizeof *o);
    o->comm = MPI_COMM_WORLD;
    o->batch_size = 1;
    o->train = train;
    o->seed = (uint64_t)cfg->seed;
    if (train) {
        o->num_min_sizes = cfg->input_min_size_train.n;
        for (int i = 0; i < o->num_min_sizes && i < 16; i++) o->min_sizes[i] = cfg->input_min_size_train.v[i];
        o->max_size = cfg->input_max_size_train;
    } else {
        o->num_min_sizes = 1;
        o->min_sizes[0] = cfg->input_min_size_test;
        o->max_size = cfg->input_max_size_test;
    }
    o->size_divisibility = cfg->input_size_divisibility;
    if (cfg->input_fixed_size.n == 2) o->fixed_h = cfg->input_fixed_size.v[0], o->fixed_w = cfg->input_fixed_size.v[1];
    o->flip = train && !strcmp(cfg->input_random_flip, "horizontal");
    for (int c = 0; c < 3; c++) {
        o->pixel_mean[c] = cfg->pixel_mean.n == 3 ? cfg->pixel_mean.v[c] : 0;
        o->pixel_std[c] = cfg->pixel_std.n == 3 ? cfg->pixel_std.v[c] : 1;
    }
    o->num_workers = cfg->dataloader_num_workers > 0 ? cfg->dataloader_num_workers : 1;
    o->aspect_grouping = train && cfg->dataloader_aspect_grouping;
    o->masks = 1;
    o->prefetch = 2;
    o->num_classes = cfg->roi_num_classes;
}

/* ---- the I/O thread ---- */

static void open_all(mrcnn_loader *l) {
    mrcnn_hdf5_lock();
    mrcnn_shard_set_open(&l->set, l->o.index_path);
    /* Class index c trains the model's class c + 1: past NUM_CLASSES it would fail deep in
     * the loss ("label 3 outside [-1, 2)") at the first step that samples it. */
    MRCNN_CHECK(l->o.num_classes <= 0 || l->set.num_classes <= l->o.num_classes,
                "the data set %s has %d categories, but MODEL.ROI_HEADS.NUM_CLASSES is %d: set NUM_CLASSES to %d "
                "(the data's category count) or convert a set with fewer categories", l->o.index_path,
                l->set.num_classes, l->o.num_classes, l->set.num_classes);
    l->shards = MRCNN_CALLOC((size_t)l->set.num_shards, sizeof(mrcnn_shard), "shards");
    int64_t fapl = mrcnn_shard_fapl_mpio(l->comm);
    for (int s = 0; s < l->set.num_shards; s++) mrcnn_shard_set_open_shard(&l->set, s, &l->shards[s], fapl);
    MRCNN_CHECK_HDF5(H5Pclose((hid_t)fapl), "file access list");
    mrcnn_hdf5_unlock();
}

static void close_all(mrcnn_loader *l) {
    mrcnn_hdf5_lock();
    for (int s = 0; s < l->set.num_shards; s++) mrcnn_shard_close(&l->shards[s]);
    mrcnn_hdf5_unlock();
}

static const int64_t *plan_for(mrcnn_loader *l, int64_t epoch) {
    if (l->plan_epoch != epoch) {
        data_plan_epoch(l->n, l->global_batch, l->o.seed, epoch, l->o.train, l->o.aspect_grouping, l->landscape, l->plan,
                        l->plan_valid);
        l->plan_epoch = epoch;
    }
    return l->plan;
}

static int round_up(int x, int d) { return d > 1 ? (x + d - 1) / d * d : x; }

/* The per-image arrays of a slot, for n images. */
static void slot_grow_images(slot *sl, int n) {
    mrcnn_data_batch *b = &sl->b;
    if (n <= sl->cap_n) return;
    sl->cap_n = n;
#define GROWN(f) b->f = MRCNN_REALLOC(b->f, sizeof *b->f * (size_t)(n + 1), #f)
    GROWN(image_h); GROWN(image_w); GROWN(orig_h); GROWN(orig_w); GROWN(scale); GROWN(image_id);
    GROWN(image_index); GROWN(flipped); GROWN(valid); GROWN(inst_start);
#undef GROWN
    sl->bytes = MRCNN_REALLOC(sl->bytes, sizeof(void *) * n, "bytes");
    sl->bytes_len = MRCNN_REALLOC(sl->bytes_len, sizeof(size_t) * n, "bytes");
    sl->bytes_cap = MRCNN_REALLOC(sl->bytes_cap, sizeof(size_t) * n, "bytes");
    sl->rles = MRCNN_REALLOC(sl->rles, sizeof(void *) * n, "rles");
    sl->rles_cap = MRCNN_REALLOC(sl->rles_cap, sizeof(size_t) * n, "rles");
    sl->ann0 = MRCNN_REALLOC(sl->ann0, sizeof(int64_t) * n, "ann0");
    for (int j = 0; j < n; j++) sl->bytes[j] = NULL, sl->bytes_cap[j] = 0, sl->rles[j] = NULL, sl->rles_cap[j] = 0;
}

/* Image j of the batch: global index g, original and resized size, flip, first annotation
 * and instance count (inst_start[j + 1]). The draws are keyed by (seed, epoch, image), so
 * they do not depend on the rank or the batch an image lands in. */
static void plan_image(mrcnn_loader *l, slot *sl, int j, int64_t g, uint8_t valid, int64_t epoch) {
    mrcnn_data_batch *b = &sl->b;
    const mrcnn_shard *sh = &l->shards[l->img_shard[g]];
    const int64_t i = l->img_local[g];
    const int h = sh->height[i], w = sh->width[i];
    int min_size = l->o.min_sizes[0];
    if (l->o.train && l->o.num_min_sizes > 1) {
        mrcnn_rng r = mrcnn_rng_make(l->o.seed, (uint32_t)epoch, g, MRCNN_RNG_RESIZE);
        min_size = l->o.min_sizes[mrcnn_rng_below(&r, 0, (uint32_t)l->o.num_min_sizes)];
    }
    int nh, nw;
    data_resize_shape(h, w, min_size, l->o.max_size, &nh, &nw);
    int flip = 0;
    if (l->o.train && l->o.flip) {
        mrcnn_rng r = mrcnn_rng_make(l->o.seed, (uint32_t)epoch, g, MRCNN_RNG_FLIP);
        flip = (int)(mrcnn_rng_u32(&r, 0) & 1u);
    }
    b->orig_h[j] = h, b->orig_w[j] = w, b->image_h[j] = nh, b->image_w[j] = nw;
    b->scale[j] = (float)nh / (float)h;
    b->image_id[j] = sh->image_id[i];
    b->image_index[j] = g;
    b->flipped[j] = (uint8_t)flip;
    b->valid[j] = valid;
    sl->ann0[j] = sh->ann_start[i];
    b->inst_start[j + 1] = b->inst_start[j] + sh->ann_count[i];
}

/* The canvas every image of the batch is padded to: INPUT.FIXED_SIZE, or the largest image
 * rounded up to SIZE_DIVISIBILITY. */
static void plan_canvas(const mrcnn_loader *l, mrcnn_data_batch *b) {
    int maxh = 0, maxw = 0;
    for (int j = 0; j < b->n; j++) {
        if (b->image_h[j] > maxh) maxh = b->image_h[j];
        if (b->image_w[j] > maxw) maxw = b->image_w[j];
    }
    if (l->o.fixed_h > 0) {
        MRCNN_CHECK(maxh <= l->o.fixed_h && maxw <= l->o.fixed_w, "a resized image (%dx%d) exceeds INPUT.FIXED_SIZE %dx%d",
                    maxh, maxw, l->o.fixed_h, l->o.fixed_w);
        b->height = l->o.fixed_h, b->width = l->o.fixed_w;
    } else {
        b->height = round_up(maxh, l->o.size_divisibility);
        b->width = round_up(maxw, l->o.size_divisibility);
    }
}

/* The batch's pixel, mask and instance buffers, for its canvas and instance count. */
static void slot_grow_batch(mrcnn_loader *l, slot *sl) {
    mrcnn_data_batch *b = &sl->b;
    const int64_t inst = b->num_instances;
    const size_t pixels = (size_t)b->n * b->height * b->width * 3;
    if (pixels * sizeof(float) > sl->cap_pixels) { /* contents are rewritten: no copy on growth */
        const size_t bytes = pixels * sizeof(float);
        if (l->o.image_alloc) {
            if (b->images) l->o.image_free(b->images);
            b->images = l->o.image_alloc(bytes);
            MRCNN_CHECK(b->images, "loader: the image allocator returned NULL for %zu bytes", bytes);
        } else {
            free(b->images);
            b->images = MRCNN_MALLOC(bytes, "batch images");
        }
        sl->cap_pixels = bytes;
    }
    if (l->o.masks) grow_bytes((void **)&b->masks, &sl->cap_masks, (size_t)inst * b->height * b->width + 1, "batch masks");
    if (inst > sl->cap_inst) {
        sl->cap_inst = inst;
        b->boxes = MRCNN_REALLOC(b->boxes, sizeof(float) * 4 * (size_t)inst, "batch boxes");
        b->classes = MRCNN_REALLOC(b->classes, sizeof(int32_t) * (size_t)inst, "batch classes");
        b->category_id = MRCNN_REALLOC(b->category_id, sizeof(int64_t) * (size_t)inst, "batch category ids");
        b->iscrowd = MRCNN_REALLOC(b->iscrowd, (size_t)inst, "batch iscrowd");
    }
}

/* Image j's instances from its shard's tables: boxes scaled to the resized image and flipped
 * with it, classes, category ids, crowd flags. */
static void plan_instances(const mrcnn_loader *l, slot *sl, int j) {
    mrcnn_data_batch *b = &sl->b;
    const int64_t g = b->image_index[j];
    const mrcnn_shard *sh = &l->shards[l->img_shard[g]];
    const float sx = (float)b->image_w[j] / (float)b->orig_w[j], sy = (float)b->image_h[j] / (float)b->orig_h[j];
    const float nw = (float)b->image_w[j];
    for (int64_t k = b->inst_start[j]; k < b->inst_start[j + 1]; k++) {
        const int64_t a = sl->ann0[j] + (k - b->inst_start[j]);
        const float *bb = sh->ann_bbox + 4 * a;
        float x1 = bb[0] * sx, y1 = bb[1] * sy, x2 = (bb[0] + bb[2]) * sx, y2 = (bb[1] + bb[3]) * sy;
        if (b->flipped[j]) {
            float t = nw - x2;
            x2 = nw - x1;
            x1 = t;
        }
        b->boxes[4 * k] = x1, b->boxes[4 * k + 1] = y1, b->boxes[4 * k + 2] = x2, b->boxes[4 * k + 3] = y2;
        b->classes[k] = sh->ann_class[a];
        b->category_id[k] = sh->ann_category_id[a];
        b->iscrowd[k] = sh->ann_iscrowd[a];
    }
}

/* Sizes, boxes and classes of one batch from the tables; buffers grown. */
static void plan_batch(mrcnn_loader *l, slot *sl, int64_t epoch, int64_t step) {
    const int n = l->o.batch_size;
    mrcnn_data_batch *b = &sl->b;
    const int64_t *plan = plan_for(l, epoch);
    const int64_t base = step * l->global_batch + (int64_t)l->rank * n;
    slot_grow_images(sl, n);
    b->n = n;
    b->epoch = epoch;
    b->step = step;
    b->inst_start[0] = 0;
    for (int j = 0; j < n; j++) plan_image(l, sl, j, plan[base + j], l->plan_valid[base + j], epoch);
    b->num_instances = b->inst_start[n];
    plan_canvas(l, b);
    slot_grow_batch(l, sl);
    for (int j = 0; j < n; j++) plan_instances(l, sl, j);
}

/* Global image index -> (shard, row), orientation, and the step count. */
static void build_tables(mrcnn_loader *l) {
    l->n = l->set.num_images;
    l->img_shard = MRCNN_MALLOC(sizeof(int) * (size_t)(l->n + 1), "image shard");
    l->img_local = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(l->n + 1), "image row");
    l->landscape = MRCNN_MALLOC((size_t)l->n + 1, "image orientation");
    for (int s = 0; s < l->set.num_shards; s++)
        for (int64_t i = 0; i < l->shards[s].num_images; i++) {
            const int64_t g = l->set.image_base[s] + i;
            l->img_shard[g] = s;
            l->img_local[g] = i;
            l->landscape[g] = l->shards[s].width[i] >= l->shards[s].height[i];
        }
    l->global_batch = (int64_t)l->o.batch_size * l->size;
    MRCNN_CHECK(l->n > 0, "loader: %s has no images", l->o.index_path);
    l->steps = data_plan_steps(l->n, l->global_batch, l->o.train, l->o.aspect_grouping, l->landscape);
    MRCNN_CHECK(l->steps > 0, "loader: %lld images make no full global batch of %lld (%d per rank x %d ranks)%s",
                (long long)l->n, (long long)l->global_batch, l->o.batch_size, l->size,
                l->o.aspect_grouping ? " per orientation (aspect grouping)" : "");
    MRCNN_CHECK(l->o.start_epoch >= 0 && l->o.start_step >= 0 && l->o.start_step < l->steps,
                "loader: cursor (epoch %lld, step %lld) is outside an epoch of %lld steps", (long long)l->o.start_epoch,
                (long long)l->o.start_step, (long long)l->steps);
    l->plan = MRCNN_MALLOC(sizeof(int64_t) * (size_t)(l->steps * l->global_batch), "epoch plan");
    l->plan_valid = MRCNN_MALLOC((size_t)(l->steps * l->global_batch), "epoch plan");
    l->io_epoch = l->cur_epoch = l->o.start_epoch;
    l->io_step = l->cur_step = l->o.start_step;
}

static void *io_main(void *arg) {
    mrcnn_loader *l = arg;
    open_all(l);
    build_tables(l);
    pthread_mutex_lock(&l->mu);
    l->opened = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    for (;;) {
        pthread_mutex_lock(&l->mu);
        slot *sl = &l->slots[l->io_seq % l->nslots];
        while (!l->stop && sl->state != SLOT_FREE) pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop) {
            pthread_mutex_unlock(&l->mu);
            break;
        }
        const int s_index = (int)(l->io_seq % l->nslots);
        const int64_t epoch = l->io_epoch, step = l->io_step;
        sl->state = SLOT_LOADING;
        sl->pending = l->o.batch_size;
        l->io_seq++;
        if (++l->io_step == l->steps) l->io_step = 0, l->io_epoch++;
        pthread_mutex_unlock(&l->mu);

        plan_batch(l, sl, epoch, step);
        for (int j = 0; j < sl->b.n; j++) {
            const int64_t g = sl->b.image_index[j];
            const mrcnn_shard *sh = &l->shards[l->img_shard[g]];
            const int64_t i = l->img_local[g];
            const double t0 = mrcnn_time_now();
            mrcnn_hdf5_lock();
            sl->bytes_len[j] = mrcnn_shard_read_image(sh, i, &sl->bytes[j], &sl->bytes_cap[j]);
            if (l->o.masks) mrcnn_shard_read_rles(sh, sh->ann_start[i], sh->ann_count[i], &sl->rles[j], &sl->rles_cap[j]);
            mrcnn_hdf5_unlock();
            const double dt = mrcnn_time_now() - t0;
            pthread_mutex_lock(&l->mu);
            l->st.read_s += dt;
            l->queue[(l->q_head + l->q_len) % l->q_cap] = (work_item){s_index, j};
            l->q_len++;
            pthread_cond_broadcast(&l->cv);
            pthread_mutex_unlock(&l->mu);
        }
    }
    close_all(l);
    return NULL;
}

/* ---- the workers ---- */

/* Thread CPU seconds: the stage costs stay meaningful on a busy machine. */
static double thread_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void process(mrcnn_loader *l, slot *sl, int j, uint8_t **rgb, size_t *rgb_cap, uint8_t **cm, size_t *cm_cap,
                    data_scratch *sc, double *t_dec, double *t_res, double *t_mask) {
    mrcnn_data_batch *b = &sl->b;
    double t0 = thread_cpu_now();
    int h = 0, w = 0;
    char err[512];
    MRCNN_CHECK(mrcnn_image_decode(sl->bytes[j], sl->bytes_len[j], rgb, rgb_cap, &h, &w, err, sizeof err),
                "image %lld (id %lld) of %s: %s", (long long)b->image_index[j], (long long)b->image_id[j],
                l->o.index_path, err);
    MRCNN_CHECK(h == b->orig_h[j] && w == b->orig_w[j], "image id %lld decodes to %dx%d, the shard says %dx%d",
                (long long)b->image_id[j], h, w, b->orig_h[j], b->orig_w[j]);
    double t1 = thread_cpu_now();
    const size_t plane = (size_t)b->height * b->width;
    data_resize_normalize(*rgb, h, w, b->image_h[j], b->image_w[j], b->flipped[j], l->o.pixel_mean, l->o.pixel_std,
                          b->images + (size_t)j * plane * 3, b->height, b->width, sc);
    double t2 = thread_cpu_now();
    if (l->o.masks) {
        grow_bytes((void **)cm, cm_cap, (size_t)h * w, "mask scratch");
        const char *s = sl->rles[j];
        for (int64_t k = b->inst_start[j]; k < b->inst_start[j + 1]; k++, s += strlen(s) + 1) {
            mrcnn_rle r;
            MRCNN_CHECK(mrcnn_rle_from_string(&r, s, h, w), "image id %lld: an RLE string does not decode to %dx%d",
                        (long long)b->image_id[j], h, w);
            /* The runs straight into column-major order (memset per run), noting the
             * columns and rows that hold ones. */
            size_t at = 0, n = (size_t)h * w;
            int box[4] = {w, h, 0, 0};
            for (int64_t q = 0; q < r.m && at < n; q++) {
                size_t c = r.cnts[q] < n - at ? r.cnts[q] : n - at;
                memset(*cm + at, (int)(q & 1), c);
                if ((q & 1) && c > 0) {
                    const int c0 = (int)(at / h), c1 = (int)((at + c - 1) / h);
                    const int r0 = c1 > c0 ? 0 : (int)(at % h), r1 = c1 > c0 ? h - 1 : (int)((at + c - 1) % h);
                    if (c0 < box[0]) box[0] = c0;
                    if (c1 + 1 > box[2]) box[2] = c1 + 1;
                    if (r0 < box[1]) box[1] = r0;
                    if (r1 + 1 > box[3]) box[3] = r1 + 1;
                }
                at += c;
            }
            if (at < n) memset(*cm + at, 0, n - at);
            mrcnn_rle_free(&r);
            data_mask_resize(*cm, h, w, b->image_h[j], b->image_w[j], b->flipped[j], b->masks + (size_t)k * plane,
                             b->height, b->width, box, sc);
        }
    }
    double t3 = thread_cpu_now();
    *t_dec += t1 - t0;
    *t_res += t2 - t1;
    *t_mask += t3 - t2;
}

static void *worker_main(void *arg) {
    mrcnn_loader *l = arg;
    uint8_t *rgb = NULL, *cm = NULL;
    size_t rgb_cap = 0, cm_cap = 0;
    data_scratch sc;
    memset(&sc, 0, sizeof sc);
    for (;;) {
        pthread_mutex_lock(&l->mu);
        while (!l->stop && l->q_len == 0) pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop) {
            pthread_mutex_unlock(&l->mu);
            break;
        }
        work_item it = l->queue[l->q_head];
        l->q_head = (l->q_head + 1) % l->q_cap;
        l->q_len--;
        pthread_mutex_unlock(&l->mu);
        slot *sl = &l->slots[it.s];
        double td = 0, tr = 0, tm = 0;
        process(l, sl, it.j, &rgb, &rgb_cap, &cm, &cm_cap, &sc, &td, &tr, &tm);
        pthread_mutex_lock(&l->mu);
        l->st.decode_s += td;
        l->st.resize_s += tr;
        l->st.masks_s += tm;
        l->st.images++;
        if (--sl->pending == 0) {
            sl->state = SLOT_READY;
            pthread_cond_broadcast(&l->cv);
        }
        pthread_mutex_unlock(&l->mu);
    }
    free(rgb);
    free(cm);
    data_scratch_free(&sc);
    return NULL;
}

/* ---- public ---- */

mrcnn_loader *mrcnn_loader_create(const mrcnn_loader_opts *opts) {
    MRCNN_CHECK(opts && opts->index_path, "mrcnn_loader_create: no index_path");
    MRCNN_CHECK(opts->batch_size > 0, "loader: batch_size %d must be positive", opts->batch_size);
    MRCNN_CHECK(opts->num_min_sizes >= 1 && opts->num_min_sizes <= 16, "loader: %d min sizes (1..16)", opts->num_min_sizes);
    for (int i = 0; i < opts->num_min_sizes; i++)
        MRCNN_CHECK(opts->min_sizes[i] > 0, "loader: min size %d must be positive", opts->min_sizes[i]);
    for (int c = 0; c < 3; c++) MRCNN_CHECK(opts->pixel_std[c] > 0, "loader: pixel std[%d] = %g must be positive", c, opts->pixel_std[c]);
    MRCNN_CHECK((opts->fixed_h > 0) == (opts->fixed_w > 0), "loader: fixed size needs both H and W");
    MRCNN_CHECK(!opts->image_alloc == !opts->image_free, "loader: image_alloc and image_free go together");
    int up = 0, level = 0;
    MRCNN_CHECK_MPI(MPI_Initialized(&up));
    MRCNN_CHECK(up, "loader: MPI is not initialized (call MPI_Init_thread with MPI_THREAD_MULTIPLE first)");
    MRCNN_CHECK_MPI(MPI_Query_thread(&level));
    MRCNN_CHECK(level >= MRCNN_DATA_MPI_THREAD_LEVEL,
                "loader: MPI was initialized at thread level %d; the loader's I/O thread needs MPI_THREAD_MULTIPLE (%d): "
                "use MPI_Init_thread(..., MPI_THREAD_MULTIPLE, &provided) and check provided",
                level, MRCNN_DATA_MPI_THREAD_LEVEL);
    mrcnn_loader *l = MRCNN_CALLOC(1, sizeof *l, "loader");
    l->o = *opts;
    if (l->o.num_workers < 1) l->o.num_workers = 1;
    if (l->o.prefetch < 1) l->o.prefetch = 1;
    if (!l->o.train) l->o.flip = 0, l->o.aspect_grouping = 0;
    MRCNN_CHECK_MPI(MPI_Comm_dup(opts->comm, &l->comm));
    MRCNN_CHECK_MPI(MPI_Comm_rank(l->comm, &l->rank));
    MRCNN_CHECK_MPI(MPI_Comm_size(l->comm, &l->size));
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->nslots = l->o.prefetch + 1;
    l->slots = MRCNN_CALLOC((size_t)l->nslots, sizeof(slot), "loader slots");
    l->held = -1;
    l->plan_epoch = -1;
    l->q_cap = l->nslots * l->o.batch_size + 1;
    l->queue = MRCNN_CALLOC((size_t)l->q_cap, sizeof(work_item), "loader queue");

    /* Tables first (on the I/O thread, the only HDF5 user), then the plan, then the rest. */
    MRCNN_CHECK(pthread_create(&l->io, NULL, io_main, l) == 0, "loader: cannot start the I/O thread");
    pthread_mutex_lock(&l->mu);
    while (!l->opened) pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
    l->workers = MRCNN_CALLOC((size_t)l->o.num_workers, sizeof(pthread_t), "loader workers");
    for (int i = 0; i < l->o.num_workers; i++)
        MRCNN_CHECK(pthread_create(&l->workers[i], NULL, worker_main, l) == 0, "loader: cannot start worker %d", i);
    return l;
}

void mrcnn_loader_destroy(mrcnn_loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->o.num_workers; i++) pthread_join(l->workers[i], NULL);
    pthread_join(l->io, NULL); /* it closes the files (collectively) on its way out */
    for (int k = 0; k < l->nslots; k++) {
        slot *sl = &l->slots[k];
        mrcnn_data_batch *b = &sl->b;
        if (l->o.image_alloc && b->images) l->o.image_free(b->images);
        else free(b->images);
        void *all[] = {b->image_h, b->image_w, b->orig_h, b->orig_w, b->scale, b->image_id, b->image_index,
                       b->flipped, b->valid, b->inst_start, b->boxes, b->classes, b->category_id, b->iscrowd, b->masks,
                       sl->bytes_len, sl->bytes_cap, sl->rles_cap, sl->ann0};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
        for (int j = 0; j < sl->cap_n; j++) free(sl->bytes[j]), free(sl->rles[j]);
        free(sl->bytes);
        free(sl->rles);
    }
    free(l->slots);
    free(l->queue);
    free(l->workers);
    free(l->shards);
    free(l->img_shard);
    free(l->img_local);
    free(l->landscape);
    free(l->plan);
    free(l->plan_valid);
    mrcnn_shard_set_free(&l->set);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    MRCNN_CHECK_MPI(MPI_Comm_free(&l->comm));
    free(l);
}

const mrcnn_data_batch *mrcnn_loader_next(mrcnn_loader *l) {
    const double t0 = mrcnn_time_now();
    pthread_mutex_lock(&l->mu);
    if (l->held >= 0) {
        l->slots[l->held].state = SLOT_FREE;
        l->held = -1;
        pthread_cond_broadcast(&l->cv);
    }
    const int k = (int)(l->seq % l->nslots);
    slot *sl = &l->slots[k];
    while (sl->state != SLOT_READY) pthread_cond_wait(&l->cv, &l->mu);
    sl->state = SLOT_HELD;
    l->held = k;
    l->seq++;
    if (++l->cur_step == l->steps) l->cur_step = 0, l->cur_epoch++;
    l->st.wait_s += mrcnn_time_now() - t0;
    pthread_mutex_unlock(&l->mu);
    return &sl->b;
}

void mrcnn_loader_cursor(const mrcnn_loader *l, int64_t *epoch, int64_t *step) {
    *epoch = l->cur_epoch;
    *step = l->cur_step;
}

int64_t mrcnn_loader_steps_per_epoch(const mrcnn_loader *l) { return l->steps; }
int64_t mrcnn_loader_num_images(const mrcnn_loader *l) { return l->n; }

void mrcnn_loader_stats_get(const mrcnn_loader *l, mrcnn_loader_stats *st) {
    pthread_mutex_lock((pthread_mutex_t *)&l->mu);
    *st = l->st;
    pthread_mutex_unlock((pthread_mutex_t *)&l->mu);
}
