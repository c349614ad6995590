/* The failure path of the check family: print what failed and where, then take the
 * whole job down so no rank hangs in a collective waiting for this one.
 *
 * One fatal exit for every thread (mrcnn_fatal_exit). The first thread that fails
 * reports: its message, the hint, the removal of registered temporary files, the log
 * flushed; then MPI_Abort when MPI is up with more than one rank, else _exit. Never
 * exit(): its atexit handlers (OpenBLAS's and HDF5's teardown, the sanitizers') would
 * run while other threads are still inside those libraries, which is how a clean
 * error on the loader or I/O thread became a SIGSEGV. A thread that fails while the
 * first one reports waits for the process to end. */
#include "mrcnn/check.h"
#include "mrcnn/log.h"

#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static mrcnn_fail_handler g_handler = NULL;
static mrcnn_fail_hint g_hint = NULL;

void mrcnn_set_fail_handler(mrcnn_fail_handler handler) { g_handler = handler; }
void mrcnn_set_fail_hint(mrcnn_fail_hint hint) { g_hint = hint; }

/* ---- temporary files to remove on a fatal exit ----
 * Slots: 0 free, 1 being written, 2 holds a path. Lock-free, so the fatal path never
 * waits for a lock another (now stopped) thread holds. */
#define CLEANUP_SLOTS 16
static char g_cleanup_path[CLEANUP_SLOTS][4096];
static atomic_int g_cleanup_state[CLEANUP_SLOTS];

int mrcnn_fail_cleanup_add(const char *path) {
    if (!path || strlen(path) >= sizeof g_cleanup_path[0]) return -1;
    for (int i = 0; i < CLEANUP_SLOTS; i++) {
        int expected = 0;
        if (!atomic_compare_exchange_strong(&g_cleanup_state[i], &expected, 1)) continue;
        memcpy(g_cleanup_path[i], path, strlen(path) + 1);
        atomic_store(&g_cleanup_state[i], 2);
        return i;
    }
    return -1;
}

void mrcnn_fail_cleanup_remove(int slot) {
    if (slot >= 0 && slot < CLEANUP_SLOTS) atomic_store(&g_cleanup_state[slot], 0);
}

static void run_cleanup(void) {
    for (int i = 0; i < CLEANUP_SLOTS; i++) {
        int expected = 2;
        if (atomic_compare_exchange_strong(&g_cleanup_state[i], &expected, 1)) unlink(g_cleanup_path[i]);
    }
}

/* ---- the one fatal exit ---- */
static atomic_int g_failing = 0;
static pthread_t g_fail_thread;
static volatile sig_atomic_t g_exit_code = 1;

static void write_all(int fd, const char *s, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

/* MPI_Abort that does not return within its grace period still ends this process with
 * the intended code (the launcher then ends the others). */
static void on_abort_timeout(int sig) {
    (void)sig;
    _exit(g_exit_code);
}

_Noreturn void mrcnn_fatal_exit(int code, const char *message) {
    int expected = 0;
    if (!atomic_compare_exchange_strong(&g_failing, &expected, 1)) {
        /* Failing again inside the report: end now. */
        if (pthread_equal(g_fail_thread, pthread_self())) _exit(code);
        /* Another thread reports the first failure and ends the process. */
        for (;;) pause();
    }
    g_fail_thread = pthread_self();
    g_exit_code = code;
    /* One write per line, so lines of other ranks or threads do not cut into it. */
    if (message) {
        char line[4096];
        size_t n = strlen(message);
        if (n > sizeof line - 2) n = sizeof line - 2;
        memcpy(line, message, n);
        line[n++] = '\n';
        write_all(2, line, n);
    }
    const char *hint = g_hint && message ? g_hint(message) : NULL;
    if (hint && hint[0]) {
        write_all(2, hint, strlen(hint));
        if (hint[strlen(hint) - 1] != '\n') write_all(2, "\n", 1);
    }
    run_cleanup();
    fflush(stdout);
    fflush(stderr);
    int up = 0, down = 0, size = 1;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down) MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (up && !down && size > 1) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_abort_timeout;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGALRM, &sa, NULL);
        alarm(20);
        MPI_Abort(MPI_COMM_WORLD, code);
    }
    _exit(code);
}

static _Thread_local const char *g_context = NULL;

void mrcnn_fail_context(const char *what) { g_context = what; }

static _Noreturn void fail_message(const char *message) {
    char with[3072];
    if (g_context && message) {
        snprintf(with, sizeof with, "%s (while %s)", message, g_context);
        message = with;
    }
    if (g_handler) {
        g_handler(message);
        /* A handler must not return; if it does, fall through to the exit. */
    }
    mrcnn_fatal_exit(1, message);
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

/* ---- graph guards (check.h) ---- */
static _Thread_local int g_guard_depth = 0;
static _Thread_local int g_guard_failures = 0;
static _Thread_local char g_guard_first[1024];

void mrcnn_graph_guard_begin(void) {
    if (g_guard_depth++ == 0) {
        g_guard_failures = 0;
        g_guard_first[0] = 0;
    }
}

int mrcnn_graph_guard_end(char *why, size_t n) {
    if (g_guard_depth > 0) g_guard_depth--;
    if (why && n) snprintf(why, n, "%s", g_guard_first);
    return g_guard_failures;
}

int mrcnn_graph_guard_note(const char *fmt, ...) {
    if (g_guard_depth == 0) return 0;
    /* The first failure is the cause; the later ones are its echo (every call into an
     * invalidated capture fails too). */
    if (g_guard_failures++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g_guard_first, sizeof g_guard_first, fmt, ap);
        va_end(ap);
    }
    return 1;
}

void mrcnn_fail_call(const char *lib, const char *call, const char *detail, const char *file, int line) {
    if (mrcnn_graph_guard_note("%s: %s failed: %s (%s:%d)", lib, call, detail ? detail : "", file, line)) return;
    mrcnn_fail(lib, call, detail, file, line);
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
