/* `mrcnn eval --shards` (eval_run.h): inference over a shard set spread across the MPI
 * ranks (each image once, one image per forward), detections gathered to rank 0 in
 * dataset order, written as a COCO results JSON and evaluated against the shards' own
 * ground truth (bbox and segm, pycocotools' numbers). */
#include "mrcnn/eval_run.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "mrcnn/cocoeval.h"
#include "mrcnn/dist.h"
#include "mrcnn/fs.h"
#include "mrcnn/infer.h"
#include "mrcnn/log.h"

/* One detection on the wire: fixed fields, then the RLE string (len bytes, no NUL). */
typedef struct {
    int64_t image_index, image_id, category_id, seq;
    double score, bbox[4];
    int64_t h, w, len;
} wire_det;

static void buf_put(char **buf, size_t *n, size_t *cap, const void *src, size_t len) {
    if (*n + len > *cap) {
        *cap = (*n + len) * 2 + 4096;
        *buf = MRCNN_REALLOC(*buf, *cap, "detections buffer");
    }
    memcpy(*buf + *n, src, len);
    *n += len;
}

typedef struct {
    wire_det d;
    const char *str;
} parsed_det;

static int cmp_parsed(const void *a, const void *b) {
    const wire_det *x = &((const parsed_det *)a)->d, *y = &((const parsed_det *)b)->d;
    if (x->image_index != y->image_index) return x->image_index < y->image_index ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* Every rank's serialized detections to rank 0, there in dataset order. */
static void gather_dets(const mrcnn_dist *dist, const char *buf, size_t n, mrcnn_coco_dets *dets) {
    MRCNN_CHECK(n <= INT_MAX, "rank %d: %zu bytes of detections do not fit one MPI message", dist->rank, n);
    int mine = (int)n, *counts = NULL, *displs = NULL;
    char *all = NULL;
    if (dist->rank == 0) {
        counts = MRCNN_MALLOC(sizeof(int) * (size_t)dist->world_size, "gather counts");
        displs = MRCNN_MALLOC(sizeof(int) * (size_t)dist->world_size, "gather displacements");
    }
    MRCNN_CHECK_MPI(MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, dist->comm));
    size_t total = 0;
    if (dist->rank == 0) {
        for (int r = 0; r < dist->world_size; r++) {
            MRCNN_CHECK(total + (size_t)counts[r] <= INT_MAX, "the gathered detections pass 2 GiB");
            displs[r] = (int)total;
            total += (size_t)counts[r];
        }
        all = MRCNN_MALLOC(total + 1, "gathered detections");
    }
    MRCNN_CHECK_MPI(MPI_Gatherv(buf, mine, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, dist->comm));
    if (dist->rank == 0) {
        size_t cap = 1024, m = 0;
        parsed_det *p = MRCNN_MALLOC(sizeof *p * cap, "parsed detections");
        for (size_t off = 0; off < total;) {
            if (m == cap) p = MRCNN_REALLOC(p, sizeof *p * (cap *= 2), "parsed detections");
            memcpy(&p[m].d, all + off, sizeof(wire_det));
            off += sizeof(wire_det);
            p[m].str = all + off;
            off += (size_t)p[m].d.len;
            m++;
        }
        qsort(p, m, sizeof *p, cmp_parsed);
        for (size_t i = 0; i < m; i++) {
            mrcnn_coco_ann a;
            memset(&a, 0, sizeof a);
            a.image_id = p[i].d.image_id;
            a.category_id = p[i].d.category_id;
            a.score = p[i].d.score;
            memcpy(a.bbox, p[i].d.bbox, sizeof a.bbox);
            a.has_bbox = 1;
            if (p[i].d.len > 0) {
                a.segm.kind = MRCNN_SEGM_STRING;
                a.segm.h = p[i].d.h;
                a.segm.w = p[i].d.w;
                a.segm.str = MRCNN_MALLOC((size_t)p[i].d.len + 1, "rle string");
                memcpy(a.segm.str, p[i].str, (size_t)p[i].d.len);
                a.segm.str[p[i].d.len] = 0;
            }
            mrcnn_coco_dets_add(dets, &a);
        }
        free(p);
    }
    free(all);
    free(counts);
    free(displs);
}

double mrcnn_eval_shards_infer(const mrcnn_dist *dist, mrcnn_infer *inf, mrcnn_infer_shards *sh,
                               const mrcnn_category_table *table, mrcnn_coco_dets *dets) {
    int64_t steps = mrcnn_infer_shards_steps(sh);
    char *buf = NULL;
    size_t nbuf = 0, cap = 0;
    int64_t seq = 0, mine = 0, n_dets = 0;
    double t_infer = mrcnn_time_now(), last_log = t_infer;
    for (int64_t s = 0; s < steps; s++) {
        mrcnn_infer_input in;
        if (!mrcnn_infer_shards_next(sh, &in)) continue;
        mrcnn_instances inst;
        mrcnn_infer_run(inf, &in, &inst);
        mrcnn_coco_dets d;
        mrcnn_coco_dets_init(&d);
        mrcnn_instances_to_dets(&inst, in.image_id, table, 1, &d);
        for (int64_t k = 0; k < d.n; k++) {
            const mrcnn_coco_ann *a = &d.anns[k];
            wire_det w = {.image_index = in.image_index, .image_id = a->image_id, .category_id = a->category_id,
                          .seq = seq++, .score = a->score, .h = a->segm.h, .w = a->segm.w,
                          .len = a->segm.str ? (int64_t)strlen(a->segm.str) : 0};
            memcpy(w.bbox, a->bbox, sizeof w.bbox);
            buf_put(&buf, &nbuf, &cap, &w, sizeof w);
            if (w.len) buf_put(&buf, &nbuf, &cap, a->segm.str, (size_t)w.len);
        }
        n_dets += d.n;
        mine++;
        mrcnn_coco_dets_free(&d);
        mrcnn_instances_free(&inst);
        double now = mrcnn_time_now();
        if (now - last_log > 10) {
            last_log = now;
            char eta[32];
            mrcnn_info("inference step %lld/%lld, %.2f s/image per rank, eta %s", (long long)s + 1, (long long)steps,
                       (now - t_infer) / (double)mine,
                       mrcnn_format_duration((now - t_infer) / (double)(s + 1) * (double)(steps - s - 1), eta, sizeof eta));
        }
    }
    double infer_s = mrcnn_time_now() - t_infer;
    gather_dets(dist, buf, nbuf, dets);
    free(buf);
    return infer_s;
}

int mrcnn_eval_shards_run(int *argc, char ***argv, const mrcnn_config *cfg, int visible_gpus, const char *weights,
                          const char *index, const char *out_dir, const mrcnn_eval_report_opts *report) {
    int want_gpu = !strcmp(cfg->model_device, "cuda");
    mrcnn_dist dist;
    mrcnn_dist_init(&dist, argc, argv, mrcnn_infer_thread_level(), want_gpu ? visible_gpus : 0, 0);
    double t0 = mrcnn_time_now();
    if (dist.rank == 0)
        MRCNN_CHECK(mrcnn_mkdir_p(out_dir), "cannot create the output folder '%s': %s", out_dir, strerror(errno));
    mrcnn_infer *inf = mrcnn_infer_create(cfg, weights, dist.device);
    mrcnn_category_table table;
    mrcnn_category_table_load(&table, index);
    MRCNN_CHECK(table.n == cfg->roi_num_classes,
                "%s has %d categories but the model has MODEL.ROI_HEADS.NUM_CLASSES = %d", index, table.n,
                cfg->roi_num_classes);
    mrcnn_infer_shards *sh = mrcnn_infer_shards_create(cfg, index, dist.comm);
    int64_t n_images = mrcnn_infer_shards_num_images(sh);
    mrcnn_info("mrcnn eval: %lld images of %s on %d ranks (%s), weights %s", (long long)n_images, index,
               dist.world_size, mrcnn_infer_backend_name(inf), weights);

    mrcnn_coco_dets dets;
    mrcnn_coco_dets_init(&dets);
    double infer_s = mrcnn_eval_shards_infer(&dist, inf, sh, &table, &dets);
    mrcnn_infer_shards_destroy(sh);
    mrcnn_infer_destroy(inf);
    mrcnn_info("inference: %.1f s (%.3f s/image on %d ranks), %lld detections", infer_s,
               infer_s * dist.world_size / (double)(n_images ? n_images : 1), dist.world_size, (long long)dets.n);

    int rc = 0;
    if (dist.rank == 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/coco_instances_results.json", out_dir);
        mrcnn_coco_dets_write(&dets, path);
        mrcnn_info("results: %s", path);
        mrcnn_coco_gt gt;
        mrcnn_coco_gt_from_shards(&gt, index);
        mrcnn_coco_dets_check(&dets, &gt);
        mrcnn_eval_report(&gt, &dets, report);
        mrcnn_coco_gt_free(&gt);
        mrcnn_info("mrcnn eval: %.1f s in all", mrcnn_time_now() - t0);
    }
    mrcnn_coco_dets_free(&dets);
    mrcnn_category_table_free(&table);
    mrcnn_dist_finalize(&dist);
    return rc;
}
