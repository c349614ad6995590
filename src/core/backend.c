#include "mrcnn/backend.h"

void mrcnn_backend_destroy(mrcnn_backend *be) {
    if (be && be->destroy) be->destroy(be);
}
