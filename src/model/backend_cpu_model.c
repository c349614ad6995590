/* Registration hook for the model-specific ops (box ops, ROIAlign, NMS, ...) of the
 * CPU backend: mrcnn_backend_cpu_create calls it after the generic ops, so the
 * model's ops live beside the model rather than in the generic backend file.
 * Each model op adds its assignment here as it lands. */
#include "mrcnn/backend.h"

void mrcnn_backend_cpu_fill_model_ops(mrcnn_backend *be) { (void)be; }
