/* HDF5 errors as one line (src/include/mrcnn/h5_errors.h). */
#include "mrcnn/h5_errors.h"

#include <stdio.h>
#include <string.h>

mrcnn_h5_quiet mrcnn_h5_quiet_begin(void) {
    mrcnn_h5_quiet q = {NULL, NULL};
    H5Eget_auto2(H5E_DEFAULT, &q.fn, &q.data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return q;
}

void mrcnn_h5_quiet_end(mrcnn_h5_quiet q) { H5Eset_auto2(H5E_DEFAULT, q.fn, q.data); }

typedef struct {
    char sys[256], sum[256], inner[256];
} reason_acc;

static herr_t reason_walk(unsigned n, const H5E_error2_t *err, void *data) {
    reason_acc *a = data;
    const char *d = err->desc ? err->desc : "";
    /* a failed system call: H5FD's "... errno = 28, error message = 'No space left on device'" */
    const char *m = strstr(d, "error message = '");
    if (m && !a->sys[0]) {
        m += strlen("error message = '");
        const char *q = strchr(m, '\'');
        snprintf(a->sys, sizeof a->sys, "%.*s", q ? (int)(q - m) : (int)strlen(m), m);
    }
    if (!a->sum[0] && (strstr(d, "checksum") || strstr(d, "Fletcher32"))) snprintf(a->sum, sizeof a->sum, "%s", d);
    if (n == 0 && d[0]) snprintf(a->inner, sizeof a->inner, "%s", d);
    return 0;
}

int mrcnn_h5_reason(char *out, size_t len) {
    reason_acc a;
    memset(&a, 0, sizeof a);
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, reason_walk, &a);
    H5Eclear2(H5E_DEFAULT);
    if (a.sum[0])
        snprintf(out, len, "checksum mismatch, the file is corrupt (HDF5: %s)", a.sum);
    else if (a.sys[0])
        snprintf(out, len, "%s", a.sys);
    else
        snprintf(out, len, "HDF5: %s", a.inner[0] ? a.inner : "unknown error");
    return a.sum[0] != 0;
}
