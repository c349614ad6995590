/* Training's periodic evaluation (train_eval.h). */
#include "train_eval.h"

#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/data.h"
#include "mrcnn/eval_run.h"

void train_eval_init(train_eval *e, const mrcnn_config *cfg, const mrcnn_dist *dist, const mrcnn_backend *be,
                     const mrcnn_arena *params) {
    memset(e, 0, sizeof *e);
    e->cfg = cfg;
    e->dist = dist;
    e->be = be;
    e->params = params;
    const char *index = cfg->datasets_test;
    /* the training loader's I/O thread may be inside HDF5 */
    mrcnn_hdf5_lock();
    mrcnn_category_table_load(&e->table, index);
    if (dist->rank == 0) mrcnn_coco_gt_from_shards(&e->gt, index);
    mrcnn_hdf5_unlock();
    MRCNN_CHECK(e->table.n == cfg->roi_num_classes,
                "DATASETS.TEST %s has %d categories but the model has MODEL.ROI_HEADS.NUM_CLASSES = %d", index,
                e->table.n, cfg->roi_num_classes);
    e->data = 1;
}

void train_eval_run(train_eval *e, mrcnn_eval_metrics *m) {
    const mrcnn_config *cfg = e->cfg;
    const int root = e->dist->rank == 0;
    if (!e->inf) {
        e->eval_dist = *e->dist;
        MRCNN_CHECK_MPI(MPI_Comm_dup(e->dist->comm, &e->eval_dist.comm));
        e->inf = mrcnn_infer_create_from_params(cfg, e->dist->device, e->be, e->params);
    } else {
        mrcnn_infer_set_weights(e->inf, e->be, e->params);
    }
    mrcnn_infer_shards *sh = mrcnn_infer_shards_create(cfg, cfg->datasets_test, e->eval_dist.comm);
    m->images = mrcnn_infer_shards_num_images(sh);
    mrcnn_coco_dets dets;
    mrcnn_coco_dets_init(&dets);
    mrcnn_eval_shards_infer(&e->eval_dist, e->inf, sh, &e->table, &dets);
    mrcnn_infer_shards_destroy(sh);
    if (root) {
        mrcnn_coco_dets_check(&dets, &e->gt);
        double *ap[2][2] = {{&m->bbox_ap, &m->bbox_ap50}, {&m->segm_ap, &m->segm_ap50}};
        for (int pass = 0; pass < 2; pass++) {
            mrcnn_coco_eval ev;
            mrcnn_coco_evaluate(&e->gt, &dets, pass == 0 ? MRCNN_IOU_BBOX : MRCNN_IOU_SEGM, 0, &ev);
            *ap[pass][0] = ev.stats[0];
            *ap[pass][1] = ev.stats[1];
            mrcnn_coco_eval_free(&ev);
        }
    }
    mrcnn_coco_dets_free(&dets);
}

void train_eval_free(train_eval *e) {
    if (e->data) {
        mrcnn_category_table_free(&e->table);
        if (e->dist->rank == 0) mrcnn_coco_gt_free(&e->gt);
        e->data = 0;
    }
    if (e->inf) {
        mrcnn_infer_destroy(e->inf);
        MPI_Comm_free(&e->eval_dist.comm);
        e->inf = NULL;
    }
}
