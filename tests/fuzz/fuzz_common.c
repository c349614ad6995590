/* Shared harness code: init, the longjmp fail handler, scratch files, and the trackers
 * that release what a rejected input left behind (see fuzz_common.h). */
#include "fuzz_common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <mpi.h>
#include <omp.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mrcnn/check.h"

jmp_buf fuzz_jmp;
char fuzz_msg[2048];

static char g_tmp[512];
static const char *const *g_fatal_sites;
static int g_in_run; // inside FUZZ_RUN: failures longjmp; outside they abort
static int g_err_fd = 2; // the real stderr, kept before libFuzzer's -close_fd_mask closes it

/* ---- failures --------------------------------------------------------------------- */

_Noreturn void fuzz_die(const char *fmt, ...) {
    char msg[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof msg) n = sizeof msg - 1;
    dprintf(g_err_fd, "==FUZZ== finding: %.*s\n", n, msg);
    abort();
}

static void fail_handler(const char *message) {
    snprintf(fuzz_msg, sizeof fuzz_msg, "%s", message);
    if (!g_in_run) fuzz_die("check failed outside a FUZZ_RUN (harness setup): %s", message);
    if (omp_get_level() > 0)
        fuzz_die("check failed inside an OpenMP parallel region (cannot unwind; in production the job exits "
                 "from a worker): %s", message);
    for (const char *const *s = g_fatal_sites; s && *s; s++)
        if (strstr(message, *s))
            fuzz_die("a precondition failed that the reader should have checked first (site '%s'): %s", *s, message);
    longjmp(fuzz_jmp, 1);
}

void fuzz_set_fatal_sites(const char *const *sites) { g_fatal_sites = sites; }

/* ---- scratch files ---------------------------------------------------------------- */

static void rm_tree(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[1024];
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            struct stat st;
            if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) rm_tree(p);
            else unlink(p);
        }
        closedir(d);
    }
    rmdir(path);
}

static void cleanup_tmp(void) {
    const char *keep = getenv("MRCNN_FUZZ_KEEP_TMP"); // =1: leave the scratch files for a look
    if (g_tmp[0] && !(keep && keep[0] == '1')) rm_tree(g_tmp);
}

const char *fuzz_tmpdir(void) { return g_tmp; }

void fuzz_path(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", g_tmp, name); }

void fuzz_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) fuzz_die("cannot write %s: %s", path, strerror(errno));
    if (len && fwrite(data, 1, len, f) != len) fuzz_die("short write to %s", path);
    if (fclose(f) != 0) fuzz_die("cannot write %s: %s", path, strerror(errno));
}

void fuzz_init(void) {
    static int done = 0;
    if (done) return;
    done = 1;
    int fd = dup(2); // LLVMFuzzerInitialize runs before libFuzzer closes stderr (-close_fd_mask=2)
    if (fd >= 0) g_err_fd = fd;
    int up = 0;
    MPI_Initialized(&up);
    if (!up) {
        /* Open MPI installs a backtrace handler on SIGABRT (and on SIGSEGV/SIGBUS/SIGFPE where
         * no handler is set yet); libFuzzer does not replace a handler it finds, so an abort()
         * would then kill the process without libFuzzer saving the input. No handlers. */
        setenv("OMPI_MCA_opal_signal", "", 1);
        struct sigaction before[4];
        const int sigs[4] = {SIGABRT, SIGBUS, SIGFPE, SIGSEGV};
        for (int i = 0; i < 4; i++) sigaction(sigs[i], NULL, &before[i]);
        int provided = 0;
        MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        for (int i = 0; i < 4; i++) sigaction(sigs[i], &before[i], NULL);
    }
    mrcnn_set_fail_handler(fail_handler);
    H5open();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    const char *base = getenv("MRCNN_FUZZ_TMP");
    if (!base || !base[0]) base = "/dev/shm";
    snprintf(g_tmp, sizeof g_tmp, "%s/mrcnn-fuzz-%d", base, (int)getpid());
    rm_tree(g_tmp);
    if (mkdir(g_tmp, 0700) != 0) fuzz_die("cannot create %s: %s", g_tmp, strerror(errno));
    atexit(cleanup_tmp);
}

/* ---- trackers ----------------------------------------------------------------------
 * The library's calls to these are renamed to fuzz_track_* (tracked.syms). While a
 * FUZZ_RUN is active, what they return is recorded; fuzz_end_failed releases whatever is
 * still recorded. Outside a run they only pass through. */

enum { K_MEM = 1, K_FILE, K_DIR, K_FD, K_HID };

typedef struct {
    uintptr_t key; // 0: empty, 1: deleted
    int kind;
} slot;

static slot *g_tab;
static size_t g_cap, g_used, g_live;
static int g_track;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static size_t hash_key(uintptr_t k) {
    uint64_t x = (uint64_t)k * 0x9E3779B97F4A7C15ULL;
    return (size_t)(x ^ (x >> 29));
}

static void tab_put_locked(uintptr_t key, int kind);

static void tab_grow_locked(void) {
    slot *old = g_tab;
    size_t oc = g_cap;
    g_cap = g_cap ? 2 * g_cap : 4096;
    while (g_live * 2 >= g_cap) g_cap *= 2;
    g_tab = calloc(g_cap, sizeof *g_tab); // the real calloc: this file is not renamed
    if (!g_tab) abort();
    g_used = g_live = 0;
    for (size_t i = 0; i < oc; i++)
        if (old[i].key > 1) tab_put_locked(old[i].key, old[i].kind);
    free(old);
}

static void tab_put_locked(uintptr_t key, int kind) {
    if ((g_used + 1) * 4 >= g_cap * 3) tab_grow_locked();
    size_t m = g_cap - 1;
    for (size_t h = hash_key(key) & m;; h = (h + 1) & m) {
        if (g_tab[h].key <= 1) {
            if (g_tab[h].key == 0) g_used++;
            g_tab[h].key = key;
            g_tab[h].kind = kind;
            g_live++;
            return;
        }
        if (g_tab[h].key == key) { // reused (a closed fd number, a freed address)
            g_tab[h].kind = kind;
            return;
        }
    }
}

static void track(uintptr_t key, int kind) {
    if (!g_track || key <= 1) return;
    pthread_mutex_lock(&g_mu);
    tab_put_locked(key, kind);
    pthread_mutex_unlock(&g_mu);
}

static void untrack(uintptr_t key, int kind) {
    if (!g_cap || key <= 1) return;
    pthread_mutex_lock(&g_mu);
    size_t m = g_cap - 1;
    for (size_t h = hash_key(key) & m;; h = (h + 1) & m) {
        if (g_tab[h].key == 0) break;
        if (g_tab[h].key == key && g_tab[h].kind == kind) {
            g_tab[h].key = 1;
            g_live--;
            break;
        }
    }
    pthread_mutex_unlock(&g_mu);
}

/* File descriptors and HDF5 ids are small integers: keep them apart from addresses. */
#define FD_KEY(fd) (((uintptr_t)1 << 62) | (uintptr_t)(unsigned)(fd))
#define HID_KEY(id) (((uintptr_t)1 << 61) | (uintptr_t)(uint64_t)(id))

void *fuzz_track_malloc(size_t n) {
    void *p = malloc(n);
    track((uintptr_t)p, K_MEM);
    return p;
}
void *fuzz_track_calloc(size_t n, size_t s) {
    void *p = calloc(n, s);
    track((uintptr_t)p, K_MEM);
    return p;
}
void *fuzz_track_realloc(void *p, size_t n) {
    void *q = realloc(p, n);
    if (q || n == 0) untrack((uintptr_t)p, K_MEM);
    track((uintptr_t)q, K_MEM);
    return q;
}
void fuzz_track_free(void *p) {
    untrack((uintptr_t)p, K_MEM);
    free(p);
}
char *fuzz_track_strdup(const char *s) {
    char *d = strdup(s);
    track((uintptr_t)d, K_MEM);
    return d;
}
char *fuzz_track_strndup(const char *s, size_t n) {
    char *d = strndup(s, n);
    track((uintptr_t)d, K_MEM);
    return d;
}
void *fuzz_track_aligned_alloc(size_t a, size_t n) {
    void *p = aligned_alloc(a, n);
    track((uintptr_t)p, K_MEM);
    return p;
}
int fuzz_track_posix_memalign(void **p, size_t a, size_t n) {
    int r = posix_memalign(p, a, n);
    if (r == 0) track((uintptr_t)*p, K_MEM);
    return r;
}
char *fuzz_track_realpath(const char *path, char *resolved) {
    char *r = realpath(path, resolved);
    if (r && !resolved) track((uintptr_t)r, K_MEM);
    return r;
}
FILE *fuzz_track_fopen(const char *path, const char *mode) {
    FILE *f = fopen(path, mode);
    track((uintptr_t)f, K_FILE);
    return f;
}
FILE *fuzz_track_fdopen(int fd, const char *mode) {
    FILE *f = fdopen(fd, mode);
    if (f) untrack(FD_KEY(fd), K_FD);
    track((uintptr_t)f, K_FILE);
    return f;
}
int fuzz_track_fclose(FILE *f) {
    untrack((uintptr_t)f, K_FILE);
    return fclose(f);
}
DIR *fuzz_track_opendir(const char *path) {
    DIR *d = opendir(path);
    track((uintptr_t)d, K_DIR);
    return d;
}
int fuzz_track_closedir(DIR *d) {
    untrack((uintptr_t)d, K_DIR);
    return closedir(d);
}
int fuzz_track_open(const char *path, int flags, ...) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    int fd = open(path, flags, mode);
    if (fd >= 0) track(FD_KEY(fd), K_FD);
    return fd;
}
int fuzz_track_close(int fd) {
    untrack(FD_KEY(fd), K_FD);
    return close(fd);
}

/* HDF5: ids that the library creates and closes itself. */
static hid_t track_hid(hid_t id) {
    if (id >= 0) track(HID_KEY(id), K_HID);
    return id;
}
static herr_t untrack_hid(hid_t id, herr_t (*close_fn)(hid_t)) {
    untrack(HID_KEY(id), K_HID);
    return close_fn(id);
}
hid_t fuzz_track_H5Fopen(const char *n, unsigned f, hid_t a) { return track_hid(H5Fopen(n, f, a)); }
hid_t fuzz_track_H5Fcreate(const char *n, unsigned f, hid_t c, hid_t a) { return track_hid(H5Fcreate(n, f, c, a)); }
herr_t fuzz_track_H5Fclose(hid_t id) { return untrack_hid(id, H5Fclose); }
hid_t fuzz_track_H5Dopen2(hid_t l, const char *n, hid_t a) { return track_hid(H5Dopen2(l, n, a)); }
hid_t fuzz_track_H5Dcreate2(hid_t l, const char *n, hid_t t, hid_t s, hid_t lc, hid_t dc, hid_t da) {
    return track_hid(H5Dcreate2(l, n, t, s, lc, dc, da));
}
herr_t fuzz_track_H5Dclose(hid_t id) { return untrack_hid(id, H5Dclose); }
hid_t fuzz_track_H5Dget_space(hid_t d) { return track_hid(H5Dget_space(d)); }
hid_t fuzz_track_H5Dget_type(hid_t d) { return track_hid(H5Dget_type(d)); }
hid_t fuzz_track_H5Dget_create_plist(hid_t d) { return track_hid(H5Dget_create_plist(d)); }
hid_t fuzz_track_H5Gopen2(hid_t l, const char *n, hid_t a) { return track_hid(H5Gopen2(l, n, a)); }
hid_t fuzz_track_H5Gcreate2(hid_t l, const char *n, hid_t lc, hid_t gc, hid_t ga) {
    return track_hid(H5Gcreate2(l, n, lc, gc, ga));
}
herr_t fuzz_track_H5Gclose(hid_t id) { return untrack_hid(id, H5Gclose); }
hid_t fuzz_track_H5Aopen(hid_t o, const char *n, hid_t a) { return track_hid(H5Aopen(o, n, a)); }
hid_t fuzz_track_H5Acreate2(hid_t l, const char *n, hid_t t, hid_t s, hid_t c, hid_t a) {
    return track_hid(H5Acreate2(l, n, t, s, c, a));
}
herr_t fuzz_track_H5Aclose(hid_t id) { return untrack_hid(id, H5Aclose); }
hid_t fuzz_track_H5Aget_type(hid_t a) { return track_hid(H5Aget_type(a)); }
hid_t fuzz_track_H5Aget_space(hid_t a) { return track_hid(H5Aget_space(a)); }
hid_t fuzz_track_H5Screate(H5S_class_t c) { return track_hid(H5Screate(c)); }
hid_t fuzz_track_H5Screate_simple(int r, const hsize_t *d, const hsize_t *m) { return track_hid(H5Screate_simple(r, d, m)); }
herr_t fuzz_track_H5Sclose(hid_t id) { return untrack_hid(id, H5Sclose); }
hid_t fuzz_track_H5Tcopy(hid_t t) { return track_hid(H5Tcopy(t)); }
herr_t fuzz_track_H5Tclose(hid_t id) { return untrack_hid(id, H5Tclose); }
hid_t fuzz_track_H5Pcreate(hid_t c) { return track_hid(H5Pcreate(c)); }
herr_t fuzz_track_H5Pclose(hid_t id) { return untrack_hid(id, H5Pclose); }

/* HDF5 writes into the caller's arrays from uninstrumented code, where ASan cannot see an
 * overflow. These three check the caller's buffer with instrumented code first: the
 * extent's dims are copied over element by element (a too-short dims[] is a
 * stack-buffer-overflow report naming the caller's variable), and a read's destination
 * must have room for every element the read will write. */
int fuzz_track_H5Sget_simple_extent_dims(hid_t sp, hsize_t *dims, hsize_t *maxdims) {
    hsize_t d[H5S_MAX_RANK], m[H5S_MAX_RANK];
    int r = H5Sget_simple_extent_dims(sp, dims ? d : NULL, maxdims ? m : NULL);
    for (int i = 0; i < r; i++) {
        if (dims) dims[i] = d[i];
        if (maxdims) maxdims[i] = m[i];
    }
    return r;
}

static void check_dest(void *buf, hid_t mem_type, hid_t space, const char *call) {
    if (!buf || space < 0) return;
    hssize_t n = H5Sget_select_npoints(space);
    size_t size = H5Tget_size(mem_type);
    H5Eclear2(H5E_DEFAULT);
    if (n <= 0 || size == 0) return;
    size_t bytes = (size_t)n * size;
    void *bad = __asan_region_is_poisoned(buf, bytes);
    if (bad) {
        __sanitizer_print_stack_trace();
        fuzz_die("%s writes %lld elements of %zu bytes (%zu bytes) into a buffer that ends after %zu bytes", call,
                 (long long)n, size, bytes, (size_t)((char *)bad - (char *)buf));
    }
}

herr_t fuzz_track_H5Dread(hid_t ds, hid_t mt, hid_t ms, hid_t fs, hid_t xp, void *buf) {
    hid_t sp = ms != H5S_ALL ? ms : fs != H5S_ALL ? fs : H5Dget_space(ds);
    check_dest(buf, mt, sp, "H5Dread");
    if (sp != ms && sp != fs && sp >= 0) H5Sclose(sp);
    return H5Dread(ds, mt, ms, fs, xp, buf);
}

herr_t fuzz_track_H5Aread(hid_t at, hid_t mt, void *buf) {
    hid_t sp = H5Aget_space(at);
    check_dest(buf, mt, sp, "H5Aread");
    if (sp >= 0) H5Sclose(sp);
    return H5Aread(at, mt, buf);
}

static void close_hid(hid_t id, int pass) {
    H5I_type_t t = H5Iget_type(id);
    if (t == H5I_BADID) return;
    /* Pass 0 everything inside files, pass 1 the files. */
    if ((t == H5I_FILE) != (pass == 1)) return;
    switch (t) {
    case H5I_FILE: H5Fclose(id); break;
    case H5I_GROUP: H5Gclose(id); break;
    case H5I_DATATYPE: H5Tclose(id); break;
    case H5I_DATASPACE: H5Sclose(id); break;
    case H5I_DATASET: H5Dclose(id); break;
    case H5I_ATTR: H5Aclose(id); break;
    case H5I_GENPROP_LST: H5Pclose(id); break;
    default: break;
    }
}

void fuzz_begin(void) {
    fuzz_msg[0] = 0;
    g_in_run = 1;
    pthread_mutex_lock(&g_mu);
    if (g_live) { // left over from a previous run that ended without fuzz_end_*
        memset(g_tab, 0, g_cap * sizeof *g_tab);
        g_used = g_live = 0;
    }
    pthread_mutex_unlock(&g_mu);
    g_track = 1;
}

void fuzz_end_ok(void) {
    g_track = 0;
    g_in_run = 0;
    pthread_mutex_lock(&g_mu);
    if (g_cap) memset(g_tab, 0, g_cap * sizeof *g_tab);
    g_used = g_live = 0;
    pthread_mutex_unlock(&g_mu);
}

void fuzz_end_failed(void) {
    g_track = 0;
    g_in_run = 0;
    if (!g_cap) return;
    /* Copy out first: closing may call the trackers (untrack) again. */
    pthread_mutex_lock(&g_mu);
    size_t n = 0;
    slot *live = malloc((g_live + 1) * sizeof *live);
    for (size_t i = 0; i < g_cap; i++)
        if (g_tab[i].key > 1) live[n++] = g_tab[i];
    memset(g_tab, 0, g_cap * sizeof *g_tab);
    g_used = g_live = 0;
    pthread_mutex_unlock(&g_mu);
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++)
            if (live[i].kind == K_HID) close_hid((hid_t)(live[i].key & ~((uintptr_t)1 << 61)), pass);
    for (size_t i = 0; i < n; i++) {
        switch (live[i].kind) {
        case K_FILE: fclose((FILE *)live[i].key); break;
        case K_DIR: closedir((DIR *)live[i].key); break;
        case K_FD: close((int)(live[i].key & 0xffffffffu)); break;
        default: break;
        }
    }
    for (size_t i = 0; i < n; i++)
        if (live[i].kind == K_MEM) free((void *)live[i].key);
    free(live);
    H5Eclear2(H5E_DEFAULT);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); // the shard reader's quiet_end was skipped
}
