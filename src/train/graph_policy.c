/* When the trainer captures its step as a CUDA graph, by the config: SOLVER.CUDA_GRAPH,
 * whose auto follows the backend (the graph cache and the capture: trainer_step.c). */
#include "mrcnn/check.h"
#include "mrcnn/trainer.h"

#include <string.h>

int mrcnn_config_cuda_graph(const mrcnn_config *cfg, const char *backend_name) {
    const char *v = cfg->solver_cuda_graph;
    if (!strcmp(v, "on") || !strcmp(v, "true")) return 1;
    if (!strcmp(v, "off") || !strcmp(v, "false")) return 0;
    MRCNN_CHECK(!strcmp(v, "auto"), "SOLVER.CUDA_GRAPH '%s' is unknown (auto, on or off)", v);
    return backend_name != NULL && !strcmp(backend_name, "cuda");
}
