/* One family of check macros for every library the project calls.
 * A failure prints the failed call, the rank and file:line, then aborts the whole
 * job (MPI_Abort once MPI is up with more than one rank, else _exit) so that no rank
 * is left waiting in a collective. The exit is safe from any thread (src/core/check.c):
 * the first failing thread reports, a second one waits for the end. */
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

/* Extra text printed after a fatal message by the thread that reports it (e.g. which
 * settings to lower after an out-of-memory); returns NULL for none. */
typedef const char *(*mrcnn_fail_hint)(const char *message);
void mrcnn_set_fail_hint(mrcnn_fail_hint hint);

/* What the calling thread is doing, added to every failure message it reports
 * ("<message> (while <what>)"), for a failure whose cause is the situation rather than
 * the call that failed (a CUDA call refused inside a graph capture). NULL clears it;
 * what must stay valid until then. */
void mrcnn_fail_context(const char *what);

/* Graph work on the calling thread (a CUDA graph being captured or launched), so that
 * its failure never costs a run. While a guard is open, a library call that fails (the
 * CUDA, cuDNN, cuBLAS and NCCL checks, a kernel launch check) does not end the run: its
 * message is kept and the check returns. Nothing the guarded work recorded has run
 * (a capture records, a launch that fails starts nothing), so the caller drops the
 * graph and runs the work directly, where a real failure stops the run as usual.
 * Argument checks (MRCNN_CHECK) and host memory failures stay fatal. Thread-local: a
 * loader thread's CUDA calls meanwhile are not guarded. */
void mrcnn_graph_guard_begin(void);
/* Closes the guard: 0 when nothing failed inside it, else the number of failures,
 * with the first one's message in why (n bytes; why may be NULL). */
int mrcnn_graph_guard_end(char *why, size_t n);
/* Inside a guard: records the failure described by fmt and returns 1; outside: 0,
 * nothing recorded (the caller then fails or warns as it would without graphs). */
int mrcnn_graph_guard_note(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

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
/* The library-call checks' failure path: inside a graph guard the failure is recorded
 * and this returns; elsewhere it is mrcnn_fail (never returns). */
void mrcnn_fail_call(const char *lib, const char *call, const char *detail, const char *file, int line);
/* The fatal exit behind every check, usable from any thread: the first caller prints
 * message (one line) and the hint, removes the registered temporary files, flushes
 * stdout/stderr, then calls MPI_Abort(code) when MPI is initialized with more than one
 * rank, else _exit(code) (no atexit handlers: other threads may be inside OpenBLAS or
 * HDF5). A later caller from another thread waits for the process to end. */
MRCNN_NORETURN void mrcnn_fatal_exit(int code, const char *message);
/* Files a fatal exit removes (a temporary being written, so that a failed write leaves
 * nothing behind). Returns a slot for mrcnn_fail_cleanup_remove, or -1 when full. */
int mrcnn_fail_cleanup_add(const char *path);
void mrcnn_fail_cleanup_remove(int slot);

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
