/* The failure path of the check family: print what failed and where, then take the
 * whole job down so no rank hangs in a collective waiting for this one. */
#include "mrcnn/check.h"
#include "mrcnn/log.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static mrcnn_fail_handler g_handler = NULL;

void mrcnn_set_fail_handler(mrcnn_fail_handler handler) { g_handler = handler; }

static _Noreturn void fail_message(const char *message) {
    if (g_handler) {
        g_handler(message);
        /* A handler must not return; if it does, fall through to the abort. */
    }
    fprintf(stderr, "%s\n", message);
    fflush(stderr);
    fflush(stdout);
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    int size = 1;
    if (up && !down) MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (up && !down && size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

_Noreturn void mrcnn_fail(const char *lib, const char *call, const char *detail,
                          const char *file, int line) {
    char msg[2048];
    snprintf(msg, sizeof msg, "mrcnn error [rank %d] %s: %s failed: %s (%s:%d)", mrcnn_log_rank(),
             lib, call, detail ? detail : "", file, line);
    fail_message(msg);
}

_Noreturn void mrcnn_failf(const char *lib, const char *call, const char *file, int line,
                           const char *fmt, ...) {
    char detail[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    char msg[2048];
    if (lib && lib[0] && call && call[0])
        snprintf(msg, sizeof msg, "mrcnn error [rank %d] %s (%s, at %s:%d)", mrcnn_log_rank(), detail,
                 call, file, line);
    else
        snprintf(msg, sizeof msg, "mrcnn error [rank %d] %s (%s:%d)", mrcnn_log_rank(), detail, file,
                 line);
    fail_message(msg);
}

int64_t mrcnn_check_h5(int64_t r, const char *call, const char *what, const char *file, int line) {
    if (r >= 0) return r;
    char detail[512];
    snprintf(detail, sizeof detail, "returned %lld for '%s'", (long long)r, what ? what : "?");
    mrcnn_fail("HDF5", call, detail, file, line);
}

void mrcnn_check_mpi(int rc, const char *call, const char *file, int line) {
    if (rc == MPI_SUCCESS) return;
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
    mrcnn_fail("MPI", call, s, file, line);
}

void *mrcnn_xmalloc(size_t bytes, const char *what, const char *file, int line) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) mrcnn_failf("memory", "malloc", file, line, "out of host memory allocating %zu bytes for %s", bytes, what);
    return p;
}

void *mrcnn_xcalloc(size_t n, size_t size, const char *what, const char *file, int line) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) mrcnn_failf("memory", "calloc", file, line, "out of host memory allocating %zu x %zu bytes for %s", n, size, what);
    return p;
}

void *mrcnn_xrealloc(void *p, size_t bytes, const char *what, const char *file, int line) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) mrcnn_failf("memory", "realloc", file, line, "out of host memory growing %s to %zu bytes", what, bytes);
    return q;
}
