/* Loader checks, driven by test_loader.sh (under mpirun for the multi-rank ones):
 *   prog_loader reproduce INDEX OUTDIR  every annotation and mask out of the loader at scale 1
 *                                       (OUTDIR/loader.json, compared by loader_compare.py)
 *   prog_loader cover INDEX B EPOCHS G  the permutation across ranks: each image at most once
 *                                       per epoch, the same step count on every rank
 *   prog_loader flip INDEX              flipped = mirrored image, masks and boxes
 *   prog_loader resume INDEX            a restored cursor continues exactly
 *   prog_loader threadlevel INDEX       MPI below MPI_THREAD_MULTIPLE is refused
 * Exit 0 when the check holds, 1 (with a message) when not. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/data.h"
#include "mrcnn/json.h"
#include "mrcnn/log.h"
#include "mrcnn/rle.h"

static int g_rank, g_size;

#define FAILF(...)                                                      \
    do {                                                                \
        fprintf(stderr, "FAIL [rank %d] ", g_rank);                     \
        fprintf(stderr, __VA_ARGS__);                                   \
        fprintf(stderr, "\n");                                          \
        MPI_Abort(MPI_COMM_WORLD, 1);                                   \
    } while (0)

static void base_opts(mrcnn_loader_opts *o, const char *index) {
    memset(o, 0, sizeof *o);
    o->index_path = index;
    o->comm = MPI_COMM_WORLD;
    o->batch_size = 2;
    o->seed = 1234;
    o->num_min_sizes = 1;
    o->min_sizes[0] = 64;
    o->max_size = 1000;
    o->size_divisibility = 32;
    for (int c = 0; c < 3; c++) o->pixel_mean[c] = 100 + 10 * c, o->pixel_std[c] = 50 + 5 * c;
    o->num_workers = 2;
    o->masks = 1;
    o->prefetch = 2;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static uint64_t batch_hash(const mrcnn_data_batch *b) {
    uint64_t h = 1469598103934665603ULL;
    h = fnv(h, b->images, sizeof(float) * (size_t)b->n * b->height * b->width * 3);
    h = fnv(h, b->image_index, sizeof(int64_t) * (size_t)b->n);
    h = fnv(h, b->flipped, (size_t)b->n);
    h = fnv(h, b->boxes, sizeof(float) * 4 * (size_t)b->num_instances);
    if (b->masks) h = fnv(h, b->masks, (size_t)b->num_instances * b->height * b->width);
    return h;
}

/* Eval order, scale 1: every annotation and mask as the shards hold them. */
static int run_reproduce(const char *index, const char *outdir) {
    mrcnn_loader_opts o;
    base_opts(&o, index);
    o.train = 0;
    o.batch_size = 3;
    /* shapes images share one size: scale 1 needs min size = short side */
    mrcnn_shard_set set;
    mrcnn_shard_set_open(&set, index);
    char p0[8192];
    mrcnn_shard_set_path(&set, 0, p0, sizeof p0);
    mrcnn_shard sh;
    mrcnn_shard_open(&sh, p0, 0);
    const int H = sh.height[0], W = sh.width[0];
    mrcnn_shard_close(&sh);
    mrcnn_shard_set_free(&set);
    o.min_sizes[0] = H < W ? H : W;
    o.max_size = 4 * (H > W ? H : W);
    mrcnn_loader *l = mrcnn_loader_create(&o);
    char path[8192];
    snprintf(path, sizeof path, "%s/loader.json", outdir);
    FILE *f = fopen(path, "w");
    if (!f) FAILF("cannot write %s", path);
    fprintf(f, "[");
    int64_t seen = 0;
    uint8_t *crop = malloc((size_t)H * W);
    for (int64_t s = 0; s < mrcnn_loader_steps_per_epoch(l); s++) {
        const mrcnn_data_batch *b = mrcnn_loader_next(l);
        for (int j = 0; j < b->n; j++) {
            if (!b->valid[j]) continue;
            if (b->image_h[j] != H || b->image_w[j] != W || b->flipped[j]) FAILF("eval mode resized or flipped an image");
            fprintf(f, "%s\n{\"image_id\": %lld, \"index\": %lld, \"anns\": [", seen++ ? "," : "",
                    (long long)b->image_id[j], (long long)b->image_index[j]);
            for (int64_t k = b->inst_start[j]; k < b->inst_start[j + 1]; k++) {
                const uint8_t *m = b->masks + (size_t)k * b->height * b->width;
                for (int y = 0; y < H; y++) memcpy(crop + (size_t)y * W, m + (size_t)y * b->width, (size_t)W);
                mrcnn_rle r;
                mrcnn_rle_from_mask(&r, crop, H, W);
                char *str = mrcnn_rle_to_string(&r);
                fprintf(f, "%s{\"category_id\": %lld, \"class\": %d, \"iscrowd\": %d, \"box\": [%.9g, %.9g, %.9g, %.9g], \"counts\": ",
                        k > b->inst_start[j] ? ", " : "", (long long)b->category_id[k], b->classes[k], b->iscrowd[k],
                        b->boxes[4 * k], b->boxes[4 * k + 1], b->boxes[4 * k + 2], b->boxes[4 * k + 3]);
                mrcnn_json_write_string(f, str);
                fprintf(f, "}");
                free(str);
                mrcnn_rle_free(&r);
            }
            fprintf(f, "]}");
            if (b->image_index[j] < 3) { /* pixels, un-normalized, for a PIL comparison */
                char rp[8300];
                snprintf(rp, sizeof rp, "%s/img_%lld.rgb", outdir, (long long)b->image_id[j]);
                FILE *g = fopen(rp, "wb");
                const float *im = b->images + (size_t)j * b->height * b->width * 3;
                for (int y = 0; y < H; y++)
                    for (int x = 0; x < W * 3; x++) {
                        float v = im[(size_t)y * b->width * 3 + x] * o.pixel_std[x % 3] + o.pixel_mean[x % 3];
                        uint8_t u = (uint8_t)lrintf(v < 0 ? 0 : v > 255 ? 255 : v);
                        fputc(u, g);
                    }
                fclose(g);
            }
        }
    }
    fprintf(f, "]\n");
    fclose(f);
    free(crop);
    if (seen != mrcnn_loader_num_images(l)) FAILF("eval saw %lld of %lld images", (long long)seen, (long long)mrcnn_loader_num_images(l));
    mrcnn_loader_destroy(l);
    printf("reproduce: %lld images written to %s\n", (long long)seen, path);
    return 0;
}

/* The images of global step t, rank by rank, from every rank's reads gathered rank after rank
 * (per_rank images each). */
static void step_images(const int64_t *all, int64_t per_rank, int batch, int64_t t, int64_t *out) {
    for (int r = 0; r < g_size; r++)
        for (int j = 0; j < batch; j++) out[r * batch + j] = all[(size_t)r * per_rank + t * batch + j];
}

static int run_cover(const char *index, int batch, int epochs, int grouping) {
    mrcnn_loader_opts o;
    base_opts(&o, index);
    o.train = 1;
    o.flip = 1;
    o.batch_size = batch;
    o.masks = 0;
    o.aspect_grouping = grouping;
    o.min_sizes[0] = 32;
    mrcnn_loader *l = mrcnn_loader_create(&o);
    const int64_t steps = mrcnn_loader_steps_per_epoch(l), n = mrcnn_loader_num_images(l);
    int64_t all_steps[64];
    MPI_Allgather(&steps, 1, MPI_INT64_T, all_steps, 1, MPI_INT64_T, MPI_COMM_WORLD);
    for (int r = 0; r < g_size; r++)
        if (all_steps[r] != steps) FAILF("rank %d runs %lld steps, rank %d %lld", r, (long long)all_steps[r], g_rank, (long long)steps);
    const int64_t per_epoch = steps * batch;
    int64_t *mine = malloc(sizeof(int64_t) * (size_t)(epochs * per_epoch));
    for (int64_t t = 0; t < epochs * steps; t++) {
        const mrcnn_data_batch *b = mrcnn_loader_next(l);
        if (b->epoch != t / steps || b->step != t % steps)
            FAILF("batch %lld is (epoch %lld, step %lld)", (long long)t, (long long)b->epoch, (long long)b->step);
        for (int j = 0; j < b->n; j++) mine[t * batch + j] = b->image_index[j];
    }
    const int64_t gb = (int64_t)batch * g_size;
    int64_t *all = g_rank == 0 ? malloc(sizeof(int64_t) * (size_t)(epochs * per_epoch * g_size)) : NULL;
    MPI_Gather(mine, (int)(epochs * per_epoch), MPI_INT64_T, all, (int)(epochs * per_epoch), MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (g_rank == 0) {
        int64_t *plan = malloc(sizeof(int64_t) * (size_t)gb), *prev = malloc(sizeof(int64_t) * (size_t)gb);
        uint8_t *seen = malloc((size_t)n);
        int64_t same_as_prev = 0;
        for (int e = 0; e < epochs; e++) {
            memset(seen, 0, (size_t)n);
            for (int64_t s = 0; s < steps; s++) {
                step_images(all, epochs * per_epoch, batch, e * steps + s, plan);
                for (int64_t k = 0; k < gb; k++) {
                    const int64_t g = plan[k];
                    if (g < 0 || g >= n) FAILF("image index %lld out of range", (long long)g);
                    if (seen[g]) FAILF("epoch %d: image %lld taken twice", e, (long long)g);
                    seen[g] = 1;
                }
                if (e > 0) {
                    step_images(all, epochs * per_epoch, batch, (e - 1) * steps + s, prev);
                    same_as_prev += !memcmp(prev, plan, sizeof(int64_t) * (size_t)gb);
                }
            }
            int64_t covered = 0;
            for (int64_t g = 0; g < n; g++) covered += seen[g];
            if (covered != steps * gb) FAILF("epoch %d covered %lld images, expected %lld", e, (long long)covered, (long long)(steps * gb));
            if (!grouping && n - covered >= gb) FAILF("epoch %d dropped %lld images (a full batch)", e, (long long)(n - covered));
        }
        if (epochs > 1 && same_as_prev == steps * (epochs - 1)) FAILF("every epoch has the same order");
        printf("cover: %d ranks x %d images x %lld steps per epoch, %lld images, %lld dropped per epoch, %d epochs: ok\n",
               g_size, batch, (long long)steps, (long long)n, (long long)(n - steps * gb), epochs);
        free(plan);
        free(prev);
        free(seen);
        free(all);
    }
    free(mine);
    mrcnn_loader_destroy(l);
    return 0;
}

static int run_flip(const char *index) {
    mrcnn_loader_opts o;
    base_opts(&o, index);
    o.train = 1;
    o.num_min_sizes = 2;
    o.min_sizes[0] = 48;
    o.min_sizes[1] = 72;
    o.flip = 1;
    mrcnn_loader *a = mrcnn_loader_create(&o);
    o.flip = 0;
    mrcnn_loader *b = mrcnn_loader_create(&o);
    int64_t flipped = 0, total = 0, sizes[2] = {0, 0};
    for (int64_t s = 0; s < mrcnn_loader_steps_per_epoch(a); s++) {
        const mrcnn_data_batch *x = mrcnn_loader_next(a), *y = mrcnn_loader_next(b);
        if (x->height != y->height || x->width != y->width || x->num_instances != y->num_instances)
            FAILF("flip changed the batch shape");
        const int H = x->height, W = x->width;
        for (int j = 0; j < x->n; j++) {
            if (x->image_index[j] != y->image_index[j]) FAILF("flip changed the permutation");
            const int nh = x->image_h[j], nw = x->image_w[j], f = x->flipped[j];
            if (nh != y->image_h[j] || nw != y->image_w[j] || y->flipped[j]) FAILF("sizes differ");
            sizes[(nh < nw ? nh : nw) > 60]++;
            flipped += f;
            total++;
            const float *pi = x->images + (size_t)j * H * W * 3, *qi = y->images + (size_t)j * H * W * 3;
            for (int yy = 0; yy < H; yy++)
                for (int xx = 0; xx < W; xx++) {
                    const int sx = (f && xx < nw && yy < nh) ? nw - 1 - xx : xx;
                    for (int c = 0; c < 3; c++)
                        if (pi[((size_t)yy * W + xx) * 3 + c] != qi[((size_t)yy * W + sx) * 3 + c])
                            FAILF("image %lld: pixel (%d, %d) is not the mirror", (long long)x->image_index[j], yy, xx);
                }
            for (int64_t k = x->inst_start[j]; k < x->inst_start[j + 1]; k++) {
                const float *bx = x->boxes + 4 * k, *by = y->boxes + 4 * k;
                const float e0 = f ? nw - by[2] : by[0], e2 = f ? nw - by[0] : by[2];
                if (fabsf(bx[0] - e0) > 1e-3f || fabsf(bx[2] - e2) > 1e-3f || bx[1] != by[1] || bx[3] != by[3])
                    FAILF("instance %lld: box [%g %g %g %g] is not the mirror of [%g %g %g %g]", (long long)k, bx[0], bx[1],
                          bx[2], bx[3], by[0], by[1], by[2], by[3]);
                const uint8_t *mx = x->masks + (size_t)k * H * W, *my = y->masks + (size_t)k * H * W;
                int64_t area = 0;
                for (int yy = 0; yy < H; yy++)
                    for (int xx = 0; xx < W; xx++) {
                        const int sx = (f && xx < nw && yy < nh) ? nw - 1 - xx : xx;
                        if (mx[(size_t)yy * W + xx] != my[(size_t)yy * W + sx]) FAILF("instance %lld: mask is not the mirror", (long long)k);
                        area += mx[(size_t)yy * W + xx];
                    }
                if (area == 0) FAILF("instance %lld: empty mask", (long long)k);
                /* The mask lies inside its (resized) box, give or take the nearest-neighbour pixel. */
                for (int yy = 0; yy < nh; yy++)
                    for (int xx = 0; xx < nw; xx++)
                        if (mx[(size_t)yy * W + xx] && (xx + 0.5f < bx[0] - 2 || xx + 0.5f > bx[2] + 2 || yy + 0.5f < bx[1] - 2 || yy + 0.5f > bx[3] + 2))
                            FAILF("instance %lld: mask pixel (%d, %d) outside its box [%g %g %g %g]", (long long)k, yy, xx, bx[0], bx[1], bx[2], bx[3]);
            }
        }
    }
    if (flipped == 0 || flipped == total) FAILF("%lld of %lld images flipped", (long long)flipped, (long long)total);
    if (sizes[0] == 0 || sizes[1] == 0) FAILF("multi-scale chose one size only (%lld, %lld)", (long long)sizes[0], (long long)sizes[1]);
    mrcnn_loader_destroy(a);
    mrcnn_loader_destroy(b);
    printf("flip: %lld of %lld images flipped; images, masks and boxes mirrored exactly\n", (long long)flipped, (long long)total);
    return 0;
}

static int64_t g_allocs, g_frees;
static void *counting_alloc(size_t n) { __atomic_add_fetch(&g_allocs, 1, __ATOMIC_SEQ_CST); return malloc(n); }
static void counting_free(void *p) { __atomic_add_fetch(&g_frees, 1, __ATOMIC_SEQ_CST); free(p); }

static int run_resume(const char *index) {
    mrcnn_loader_opts o;
    base_opts(&o, index);
    o.train = 1;
    o.flip = 1;
    o.num_min_sizes = 2;
    o.min_sizes[1] = 80;
    mrcnn_loader *a = mrcnn_loader_create(&o);
    const int64_t steps = mrcnn_loader_steps_per_epoch(a);
    const int64_t k = steps - 1, total = 2 * steps + 1; /* resume just before an epoch boundary */
    uint64_t hashes[4096];
    int64_t ce = 0, cs = 0, fe = 0, fs = 0;
    if (total > 4096) FAILF("dataset too large for this check");
    for (int64_t t = 0; t < total; t++) {
        if (t == k) mrcnn_loader_cursor(a, &ce, &cs);
        hashes[t] = batch_hash(mrcnn_loader_next(a));
    }
    mrcnn_loader_cursor(a, &fe, &fs);
    mrcnn_loader_destroy(a);
    if (ce != 0 || cs != k) FAILF("cursor after %lld steps is (%lld, %lld)", (long long)k, (long long)ce, (long long)cs);
    o.start_epoch = ce;
    o.start_step = cs;
    o.num_workers = 1; /* a different thread count must not matter */
    o.image_alloc = counting_alloc; /* nor the image allocator */
    o.image_free = counting_free;
    mrcnn_loader *b = mrcnn_loader_create(&o);
    for (int64_t t = k; t < total; t++)
        if (batch_hash(mrcnn_loader_next(b)) != hashes[t]) FAILF("resumed batch %lld differs", (long long)t);
    int64_t re = 0, rs = 0;
    mrcnn_loader_cursor(b, &re, &rs);
    if (re != fe || rs != fs) FAILF("cursor after resuming is (%lld, %lld), expected (%lld, %lld)", (long long)re, (long long)rs, (long long)fe, (long long)fs);
    mrcnn_loader_destroy(b);
    if (g_allocs == 0 || g_allocs != g_frees) FAILF("image allocator: %lld allocations, %lld frees", (long long)g_allocs, (long long)g_frees);
    if (g_rank == 0) printf("resume: from (epoch %lld, step %lld), %lld batches identical\n", (long long)ce, (long long)cs, (long long)(total - k));
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: prog_loader reproduce|cover|flip|resume|threadlevel INDEX ...\n");
        return 2;
    }
    const int want = !strcmp(argv[1], "threadlevel") ? MPI_THREAD_FUNNELED : MPI_THREAD_MULTIPLE;
    int provided = 0;
    MPI_Init_thread(&argc, &argv, want, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    mrcnn_log_set_rank(g_rank, g_size);
    if (want == MPI_THREAD_MULTIPLE && provided < want) FAILF("this MPI has no MPI_THREAD_MULTIPLE");
    int rc = 2;
    if (!strcmp(argv[1], "reproduce") && argc == 4) rc = run_reproduce(argv[2], argv[3]);
    else if (!strcmp(argv[1], "cover") && argc == 6) rc = run_cover(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
    else if (!strcmp(argv[1], "flip")) rc = run_flip(argv[2]);
    else if (!strcmp(argv[1], "resume")) rc = run_resume(argv[2]);
    else if (!strcmp(argv[1], "threadlevel")) {
        mrcnn_loader_opts o;
        base_opts(&o, argv[2]);
        mrcnn_loader *l = mrcnn_loader_create(&o); /* must fail: MPI is below MPI_THREAD_MULTIPLE */
        mrcnn_loader_destroy(l);
        rc = 0;
    }
    MPI_Finalize();
    return rc;
}
