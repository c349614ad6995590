/* The model side of inference: one prepared image through mrcnn_model_predict (one
 * device -> host read), then torchvision's transform.postprocess (boxes back to the
 * original size, masks pasted into the full image and thresholded at 0.5) and RLE
 * encoding. */
#include "mrcnn/backend_open.h"
#include "mrcnn/infer.h"

#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/checkpoint.h"
#include "mrcnn/log.h"
#include "mrcnn/model.h"
#include "mrcnn/postprocess.h"

struct mrcnn_infer {
    mrcnn_backend *be;
    mrcnn_model model;
    mrcnn_ws ws;
    /* device -> host reads (the backend's counter) over the images run, reported when
     * destroyed: on a GPU each one is a wait, so a batch should make one */
    int64_t images;
    uint64_t reads, max_reads;
};

static mrcnn_infer *infer_alloc(const mrcnn_config *cfg, int device) {
    mrcnn_infer *inf = MRCNN_CALLOC(1, sizeof *inf, "inference state");
    const mrcnn_backend_open_opts bo = {.device = mrcnn_backend_device_parse(cfg->model_device), .gpu = device,
                                        .fallback = "running on the CPU"};
    inf->be = mrcnn_backend_open(&bo, NULL);
    mrcnn_model_init(&inf->model, cfg, inf->be);
    mrcnn_ws_init(&inf->ws, inf->be);
    return inf;
}

mrcnn_infer *mrcnn_infer_create(const mrcnn_config *cfg, const char *weights, int device) {
    MRCNN_CHECK(weights && weights[0], "inference needs weights (--weights CKPT or MODEL.WEIGHTS)");
    mrcnn_infer *inf = infer_alloc(cfg, device);
    mrcnn_checkpoint_load_model(&inf->model, weights);
    return inf;
}

mrcnn_infer *mrcnn_infer_create_from_params(const mrcnn_config *cfg, int device, const mrcnn_backend *src_be,
                                            const mrcnn_arena *params) {
    mrcnn_infer *inf = infer_alloc(cfg, device);
    mrcnn_infer_set_weights(inf, src_be, params);
    return inf;
}

/* Through the host: the two backends may be different devices (or kinds). */
void mrcnn_infer_set_weights(mrcnn_infer *inf, const mrcnn_backend *src_be, const mrcnn_arena *params) {
    mrcnn_arena *dst = &inf->model.params.values;
    MRCNN_CHECK(params->n_entries == dst->n_entries, "inference weights: %d parameters given, the model has %d",
                params->n_entries, dst->n_entries);
    float *h = NULL;
    size_t cap = 0;
    for (int i = 0; i < dst->n_entries; i++) {
        const mrcnn_arena_entry *s = &params->entries[i];
        mrcnn_tensor *t = &dst->entries[i].tensor;
        size_t bytes = mrcnn_tensor_nbytes(t);
        MRCNN_CHECK(!strcmp(s->name, dst->entries[i].name) && s->tensor.dtype == MRCNN_DTYPE_F32 &&
                        t->dtype == MRCNN_DTYPE_F32 && mrcnn_tensor_nbytes(&s->tensor) == bytes,
                    "inference weights: parameter %d is '%s' (%zu bytes), the model wants fp32 '%s' (%zu bytes)", i,
                    s->name, mrcnn_tensor_nbytes(&s->tensor), dst->entries[i].name, bytes);
        if (bytes > cap) h = MRCNN_REALLOC(h, cap = bytes, "weights copy buffer");
        src_be->mem.read(src_be, &s->tensor, h);
        inf->be->mem.write(inf->be, t, h);
    }
    free(h);
}

void mrcnn_infer_destroy(mrcnn_infer *inf) {
    if (!inf) return;
    if (inf->images > 0)
        mrcnn_info("inference on %s: %lld images, %llu device->host reads, at most %llu per image", inf->be->name,
                   (long long)inf->images, (unsigned long long)inf->reads, (unsigned long long)inf->max_reads);
    mrcnn_ws_free(&inf->ws);
    mrcnn_model_free(&inf->model);
    mrcnn_backend_destroy(inf->be);
    free(inf);
}

const char *mrcnn_infer_backend_name(const mrcnn_infer *inf) { return inf->be->name; }

void mrcnn_instances_free(mrcnn_instances *inst) {
    for (int i = 0; i < inst->n; i++) mrcnn_rle_free(&inst->masks[i]);
    free(inst->boxes);
    free(inst->scores);
    free(inst->classes);
    free(inst->masks);
    memset(inst, 0, sizeof *inst);
}

void mrcnn_infer_run(mrcnn_infer *inf, const mrcnn_infer_input *in, mrcnn_instances *out) {
    MRCNN_CHECK(in->canvas_h % 32 == 0 && in->canvas_w % 32 == 0,
                "image %lld: canvas %dx%d is not a multiple of 32 (INPUT.SIZE_DIVISIBILITY)", (long long)in->image_id,
                in->canvas_h, in->canvas_w);
    mrcnn_model *m = &inf->model;
    const uint64_t reads0 = mrcnn_backend_stats_get(inf->be).reads;
    int64_t shape[4] = {1, in->canvas_h, in->canvas_w, 3};
    mrcnn_batch b;
    memset(&b, 0, sizeof b);
    b.images = mrcnn_ws_tensor(&inf->ws, MRCNN_DTYPE_F32, 4, shape);
    inf->be->mem.write(inf->be, &b.images, in->canvas);
    int hw[2] = {in->h, in->w};
    int64_t index = in->image_index;
    b.image_hw = hw;
    b.image_index = &index;
    mrcnn_pass st;
    memset(&st, 0, sizeof st);
    mrcnn_detections det;
    mrcnn_model_predict(m, &inf->ws, &b, &st, &det);
    const uint64_t reads = mrcnn_backend_stats_get(inf->be).reads - reads0;
    inf->images++;
    inf->reads += reads;
    if (reads > inf->max_reads) inf->max_reads = reads;

    int n = det.counts[0], M = det.mask_size;
    memset(out, 0, sizeof *out);
    out->n = n;
    out->h = in->orig_h;
    out->w = in->orig_w;
    size_t nn = (size_t)(n ? n : 1);
    out->boxes = MRCNN_MALLOC(nn * 4 * sizeof(float), "instance boxes");
    out->scores = MRCNN_MALLOC(nn * sizeof(float), "instance scores");
    out->classes = MRCNN_MALLOC(nn * sizeof(int32_t), "instance classes");
    out->masks = MRCNN_CALLOC(nn, sizeof(mrcnn_rle), "instance masks");
    memcpy(out->boxes, det.boxes, (size_t)n * 4 * sizeof(float));
    memcpy(out->scores, det.scores, (size_t)n * sizeof(float));
    mrcnn_boxes_rescale(n, out->boxes, in->h, in->w, in->orig_h, in->orig_w);
    uint8_t *full = MRCNN_MALLOC((size_t)in->orig_h * in->orig_w, "pasted mask");
    for (int i = 0; i < n; i++) {
        MRCNN_CHECK(det.labels[i] >= 1 && det.labels[i] < m->num_classes, "detection label %d out of 1..%d",
                    det.labels[i], m->num_classes - 1);
        out->classes[i] = det.labels[i] - 1;
        mrcnn_paste_mask_u8(det.mask_probs + (size_t)i * M * M, M, out->boxes + 4 * i, in->orig_h, in->orig_w, 0.5f,
                            full);
        mrcnn_rle_from_mask(&out->masks[i], full, in->orig_h, in->orig_w);
    }
    free(full);
    mrcnn_detections_free(&det);
    mrcnn_pass_free(&st);
    mrcnn_ws_reset(&inf->ws);
}

void mrcnn_instances_to_dets(const mrcnn_instances *inst, int64_t image_id, const mrcnn_category_table *table,
                             int with_masks, mrcnn_coco_dets *dets) {
    for (int i = 0; i < inst->n; i++) {
        int c = inst->classes[i];
        int64_t cat = c + 1;
        if (table) {
            MRCNN_CHECK(c >= 0 && c < table->n, "class %d has no category id: the dataset has %d categories (does "
                        "MODEL.ROI_HEADS.NUM_CLASSES match it?)", c, table->n);
            cat = table->ids[c];
        }
        const float *b = inst->boxes + 4 * i;
        /* detectron2 converts XYXY to XYWH in float32 before the JSON */
        float wf = b[2] - b[0], hf = b[3] - b[1];
        double box[4] = {b[0], b[1], wf, hf};
        mrcnn_coco_dets_add_rle(dets, image_id, cat, (double)inst->scores[i], box, with_masks ? &inst->masks[i] : NULL);
    }
}
