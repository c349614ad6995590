/* Every reader of a shard set, for tests/data/test_hardening.sh (damaged shards must end
 * with one error line and exit 1 in each of them, never with a crash or a wrong answer):
 *   prog_shard_read gt INDEX      eval's ground truth from the shards (mrcnn_coco_gt_from_shards)
 *   prog_shard_read loader INDEX  the training loader, one epoch in evaluation order with masks
 *   prog_shard_read read INDEX    every image's bytes and every annotation's RLE strings
 * Prints a one-line summary and exits 0 when everything was read. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/cocoeval.h"
#include "mrcnn/data.h"
#include "mrcnn/infer.h"
#include "mrcnn/log.h"

static int run_gt(const char *index) {
    mrcnn_coco_gt gt;
    mrcnn_coco_gt_from_shards(&gt, index);
    printf("gt: %lld images, %lld annotations, %lld categories\n", (long long)gt.n_images, (long long)gt.n_anns,
           (long long)gt.n_cats);
    mrcnn_coco_gt_free(&gt);
    return 0;
}

static int run_loader(const char *index) {
    mrcnn_loader_opts o;
    memset(&o, 0, sizeof o);
    o.index_path = index;
    o.comm = MPI_COMM_WORLD;
    o.batch_size = 2;
    o.seed = 1;
    o.num_min_sizes = 1;
    o.min_sizes[0] = 64;
    o.max_size = 1000;
    o.size_divisibility = 32;
    for (int c = 0; c < 3; c++) o.pixel_mean[c] = 100, o.pixel_std[c] = 50;
    o.num_workers = 1;
    o.masks = 1;
    o.prefetch = 1;
    o.train = 0;
    mrcnn_loader *l = mrcnn_loader_create(&o);
    int64_t inst = 0, steps = mrcnn_loader_steps_per_epoch(l);
    for (int64_t s = 0; s < steps; s++) inst += mrcnn_loader_next(l)->num_instances;
    mrcnn_loader_destroy(l);
    printf("loader: %lld steps, %lld instances\n", (long long)steps, (long long)inst);
    return 0;
}

static int run_read(const char *index) {
    mrcnn_shard_set set;
    mrcnn_shard_set_open(&set, index);
    uint8_t *img = NULL;
    char *rles = NULL;
    size_t img_cap = 0, rles_cap = 0, bytes = 0;
    for (int s = 0; s < set.num_shards; s++) {
        mrcnn_shard sh;
        mrcnn_shard_set_open_shard(&set, s, &sh, 0);
        for (int64_t i = 0; i < sh.num_images; i++) {
            bytes += mrcnn_shard_read_image(&sh, i, &img, &img_cap);
            bytes += mrcnn_shard_read_rles(&sh, sh.ann_start[i], sh.ann_count[i], &rles, &rles_cap);
        }
        mrcnn_shard_close(&sh);
    }
    printf("read: %d shards, %zu bytes\n", set.num_shards, bytes);
    free(img);
    free(rles);
    mrcnn_shard_set_free(&set);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: prog_shard_read gt|loader|read INDEX\n");
        return 2;
    }
    int provided = 0, rank = 0, size = 1;
    MPI_Init_thread(&argc, &argv, MRCNN_DATA_MPI_THREAD_LEVEL, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    mrcnn_log_set_rank(rank, size);
    int rc = 2;
    if (!strcmp(argv[1], "gt")) rc = run_gt(argv[2]);
    else if (!strcmp(argv[1], "loader")) rc = run_loader(argv[2]);
    else if (!strcmp(argv[1], "read")) rc = run_read(argv[2]);
    MPI_Finalize();
    return rc;
}
