/* Host views of a model's pass that only tests read: the training step's sampled rows,
 * inference with the proposals' host copies, a device tensor as fp32 and the five loss
 * terms as an array. Each is several device reads: the library's training and inference
 * paths read nothing of this (they read st->loss_dev and one packed detections buffer). */
#ifndef MRCNN_TEST_MODEL_H
#define MRCNN_TEST_MODEL_H

#include "mrcnn/backend.h"
#include "mrcnn/layers.h"
#include "mrcnn/model.h"

/* Fills st->losses, rpn_sampled and the host copies (proposals, proposal_scores,
 * proposal_counts, rois, roi_labels, roi_image_start, fg_rois, fg_labels, fg_gt) of a
 * training step's valid rows. */
void test_model_read_pass(const mrcnn_model *m, mrcnn_pass *st);
/* mrcnn_model_predict, then the host copies of the proposals (st->proposals,
 * proposal_scores, proposal_counts: three more reads). */
void test_model_detect(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, mrcnn_pass *st, mrcnn_detections *det);
/* host (numel) = t read back as fp32: fp16 and bf16 converted on the host. */
void test_read_f32(const mrcnn_backend *be, const mrcnn_tensor *t, float *host);
/* out (MRCNN_N_LOSSES) = the terms of l, in mrcnn_loss_names' order. */
void test_losses_to_array(const mrcnn_losses *l, double *out);

#endif
