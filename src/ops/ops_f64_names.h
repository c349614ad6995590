/* Private to src/ops, included by ops_real.h only when MRCNN_OPS_F64: the double build
 * of the ops gets its _f64 names here, so that every definition is written once with its
 * float name (grep "^void mrcnn_conv2d_forward(" finds it) and compiles as
 * mrcnn_conv2d_forward_f64 in the double objects.
 *
 * One line per function of src/ops with external linkage that has a double twin: the ops
 * of include/mrcnn/ops_decl.inc, the ROIAlign of include/mrcnn/roi_align.h and the helpers
 * private to src/ops (ops_real.h). A name left out fails the double build for the public
 * ops (ops_real.h redeclares them under these names) and tests/ops/test_ops_f64_names.sh
 * for every op (nm on both object sets). Functions compiled once, under
 * #ifndef MRCNN_OPS_F64, do not belong here. The backend's op list
 * (include/mrcnn/backend_ops.def) names, per entry, which of these double ops the op
 * table (tests/ops/test_op_table.c) checks it against; that build fails on a name
 * that does not exist. */
#ifndef MRCNN_OPS_F64_NAMES_H
#define MRCNN_OPS_F64_NAMES_H

/* include/mrcnn/ops_decl.inc, in its order */
#define mrcnn_gemm mrcnn_gemm_f64
#define mrcnn_conv2d_forward mrcnn_conv2d_forward_f64
#define mrcnn_conv2d_backward_data mrcnn_conv2d_backward_data_f64
#define mrcnn_conv2d_backward_filter mrcnn_conv2d_backward_filter_f64
#define mrcnn_deconv2x2_forward mrcnn_deconv2x2_forward_f64
#define mrcnn_deconv2x2_backward mrcnn_deconv2x2_backward_f64
#define mrcnn_relu_forward mrcnn_relu_forward_f64
#define mrcnn_relu_backward mrcnn_relu_backward_f64
#define mrcnn_maxpool2d_forward mrcnn_maxpool2d_forward_f64
#define mrcnn_maxpool2d_backward mrcnn_maxpool2d_backward_f64
#define mrcnn_upsample_add_forward mrcnn_upsample_add_forward_f64
#define mrcnn_upsample_add_backward mrcnn_upsample_add_backward_f64
#define mrcnn_linear_forward mrcnn_linear_forward_f64
#define mrcnn_linear_backward mrcnn_linear_backward_f64
#define mrcnn_add_forward mrcnn_add_forward_f64
#define mrcnn_add_backward mrcnn_add_backward_f64
#define mrcnn_bce_logits_forward mrcnn_bce_logits_forward_f64
#define mrcnn_bce_logits_backward mrcnn_bce_logits_backward_f64
#define mrcnn_softmax_ce_forward mrcnn_softmax_ce_forward_f64
#define mrcnn_softmax_ce_backward mrcnn_softmax_ce_backward_f64
#define mrcnn_smooth_l1_forward mrcnn_smooth_l1_forward_f64
#define mrcnn_smooth_l1_backward mrcnn_smooth_l1_backward_f64

/* include/mrcnn/roi_align.h */
#define mrcnn_roi_align_forward mrcnn_roi_align_forward_f64
#define mrcnn_roi_align_backward mrcnn_roi_align_backward_f64

/* src/ops/ops_real.h */
#define mrcnn_ops_blas_serial mrcnn_ops_blas_serial_f64
#define mrcnn_ops_bias_add mrcnn_ops_bias_add_f64
#define mrcnn_ops_bias_grad mrcnn_ops_bias_grad_f64
#define mrcnn_conv2d_im2col mrcnn_conv2d_im2col_f64
#define mrcnn_conv2d_col2im_add mrcnn_conv2d_col2im_add_f64
#define mrcnn_conv2d_block_rows mrcnn_conv2d_block_rows_f64
#define mrcnn_conv2d_is_pointwise mrcnn_conv2d_is_pointwise_f64

#endif
