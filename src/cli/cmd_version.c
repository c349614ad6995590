#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "mrcnn/backend.h"

int mrcnn_cmd_version(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: mrcnn version\nPrints the version and whether this build has the CUDA backend.\n");
        return 0;
    }
    const char *why = NULL;
    mrcnn_backend *gpu = mrcnn_backend_cuda_create(0, &why);
    printf("mrcnn 0.1.0\ncuda backend: %s\n", gpu ? "available" : why);
    if (gpu) mrcnn_backend_destroy(gpu);
    return 0;
}
