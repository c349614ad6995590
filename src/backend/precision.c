/* SOLVER.PRECISION -> backend storage dtype and TF32 (precision.h). */
#include "mrcnn/precision.h"

#include <string.h>

#include "mrcnn/check.h"

int mrcnn_precision_valid(const char *name) {
    static const char *const modes[] = {"", "auto", "fp32", "tf32", "fp16", "bf16"};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        if (name && !strcmp(name, modes[i])) return 1;
    return 0;
}

const char *mrcnn_precision_apply(mrcnn_backend *be, const char *name) {
    MRCNN_CHECK(mrcnn_precision_valid(name), "SOLVER.PRECISION '%s' is unknown (fp32, tf32, fp16, bf16 or auto)",
                name ? name : "(null)");
    const char *mode = name;
    /* The CPU reports compute capability 0, so auto is fp32 there. */
    if (!strcmp(name, "") || !strcmp(name, "auto")) mode = be->info.compute_capability(be) >= 80 ? "bf16" : "fp32";
    mrcnn_dtype storage = !strcmp(mode, "fp16") ? MRCNN_DTYPE_F16 : !strcmp(mode, "bf16") ? MRCNN_DTYPE_BF16
                                                                                           : MRCNN_DTYPE_F32;
    be->set_precision(be, storage);
    be->info.set_tf32(be, !strcmp(mode, "tf32"));
    return mode;
}
