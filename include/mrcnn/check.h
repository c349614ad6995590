/* One family of check macros for every library the project calls.
 * A failure prints the failed call, the rank and file:line, then aborts the whole
 * job (MPI_Abort once MPI is up) so that no rank is left waiting in a collective. */
#ifndef MRCNN_CHECK_H
#define MRCNN_CHECK_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Called on every failure. The default prints and aborts the job; tests install one
 * that longjmps so that argument errors can be asserted. It must not return. */
typedef void (*mrcnn_fail_handler)(const char *message);
void mrcnn_set_fail_handler(mrcnn_fail_handler handler);

/* C11 spells it _Noreturn; C++ (nvcc compiles .cu as C++) spells it [[noreturn]]. */
#ifdef __cplusplus
#define MRCNN_NORETURN [[noreturn]]
#else
#define MRCNN_NORETURN _Noreturn
#endif

#if defined(__GNUC__)
#define MRCNN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MRCNN_PRINTF(a, b)
#endif

MRCNN_NORETURN void mrcnn_fail(const char *lib, const char *call, const char *detail,
                          const char *file, int line);
MRCNN_NORETURN void mrcnn_failf(const char *lib, const char *call, const char *file, int line,
                           const char *fmt, ...) MRCNN_PRINTF(5, 6);
/* Returns r when r >= 0 (HDF5's hid_t/herr_t convention), fails otherwise. */
int64_t mrcnn_check_h5(int64_t r, const char *call, const char *what, const char *file, int line);
void mrcnn_check_mpi(int rc, const char *call, const char *file, int line);

/* A precondition on arguments or data, with a printf-style message saying what is wrong. */
#define MRCNN_CHECK(cond, ...)                                                  \
    do {                                                                        \
        if (!(cond)) mrcnn_failf("check", #cond, __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)

#define MRCNN_CHECK_MPI(call) mrcnn_check_mpi((call), #call, __FILE__, __LINE__)
/* what: the file or dataset name the call was about, so the message says where. */
#define MRCNN_CHECK_HDF5(call, what) mrcnn_check_h5((int64_t)(call), #call, (what), __FILE__, __LINE__)
/* malloc and friends: a NULL result names the buffer and its size. */
void *mrcnn_xmalloc(size_t bytes, const char *what, const char *file, int line);
void *mrcnn_xcalloc(size_t n, size_t size, const char *what, const char *file, int line);
void *mrcnn_xrealloc(void *p, size_t bytes, const char *what, const char *file, int line);
#define MRCNN_MALLOC(bytes, what) mrcnn_xmalloc((bytes), (what), __FILE__, __LINE__)
#define MRCNN_CALLOC(n, size, what) mrcnn_xcalloc((n), (size), (what), __FILE__, __LINE__)
#define MRCNN_REALLOC(p, bytes, what) mrcnn_xrealloc((p), (bytes), (what), __FILE__, __LINE__)

#ifdef __cplusplus
}
#endif
#endif
