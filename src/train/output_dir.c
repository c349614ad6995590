/* OUTPUT_DIR of a training run, claimed by rank 0 before anything is trained:
 *  - created with its parents when missing (as detectron2 does);
 *  - proven writable by creating and removing a file in it, so a read-only or full
 *    directory stops the run at once, not at the first checkpoint thousands of steps in;
 *  - locked: flock(LOCK_EX | LOCK_NB) on OUTPUT_DIR/.lock, held until the process
 *    exits (the kernel releases it then, also after kill -9), with "host pid" written
 *    into the file, so a second training into the same directory fails naming the
 *    first instead of deleting its checkpoints and interleaving its metrics.json.
 * A file system without flock support gets a warning and no lock. */
#include "mrcnn/trainer.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"
#include "mrcnn/metrics.h"
#include "mrcnn/run.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int g_fd = -1;
static char g_dir[1024];

static void probe_writable(const char *dir) {
    char probe[1200];
    snprintf(probe, sizeof probe, "%s/.write_test.%d", dir, (int)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    int err = errno;
    if (fd >= 0) {
        int slot = mrcnn_fail_cleanup_add(probe);
        ssize_t w = write(fd, "x", 1);
        err = w == 1 ? 0 : errno;
        if (close(fd) != 0 && !err) err = errno;
        unlink(probe);
        mrcnn_fail_cleanup_remove(slot);
    }
    MRCNN_CHECK(fd >= 0 && err == 0, "OUTPUT_DIR %s is not writable (creating a file in it failed: %s); checkpoints "
                                     "and metrics go there: choose a writable OUTPUT_DIR", dir, strerror(err));
}

void mrcnn_output_dir_claim(const char *dir) {
    MRCNN_CHECK(dir && dir[0], "OUTPUT_DIR is empty");
    if (g_fd >= 0 && strcmp(g_dir, dir) == 0) return;
    mrcnn_output_dir_release();
    struct stat sb;
    if (stat(dir, &sb) == 0)
        MRCNN_CHECK(S_ISDIR(sb.st_mode), "OUTPUT_DIR %s exists but is not a directory", dir);
    MRCNN_CHECK(mrcnn_mkdir_p(dir), "cannot create OUTPUT_DIR %s: %s", dir, strerror(errno));
    probe_writable(dir);
    char path[1200];
    snprintf(path, sizeof path, "%s/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    MRCNN_CHECK(fd >= 0, "cannot open the lock file %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        if (err == EWOULDBLOCK) {
            char holder[256] = "";
            ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
            holder[n > 0 ? n : 0] = 0;
            char host[200] = "?";
            long pid = 0;
            if (sscanf(holder, "host %199s pid %ld", host, &pid) != 2) snprintf(host, sizeof host, "?");
            close(fd);
            mrcnn_failf("output", "", __FILE__, __LINE__,
                        "OUTPUT_DIR %s is in use by another training (host %s, pid %ld, holding %s): two runs in one "
                        "OUTPUT_DIR overwrite each other's checkpoints and metrics; choose another OUTPUT_DIR or stop "
                        "that run", dir, host, pid, path);
        }
        mrcnn_warn("OUTPUT_DIR %s: cannot lock %s (%s: the file system has no flock support?); a second training "
                   "into this directory would not be detected", dir, path, strerror(err));
    } else {
        char host[200] = "?", line[300];
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        int n = snprintf(line, sizeof line, "host %s pid %ld\n", host, (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n)
            mrcnn_warn("OUTPUT_DIR %s: cannot write the lock holder into %s: %s", dir, path, strerror(errno));
    }
    g_fd = fd;
    snprintf(g_dir, sizeof g_dir, "%s", dir);
}

void mrcnn_output_dir_release(void) {
    if (g_fd < 0) return;
    close(g_fd); // releases the flock
    g_fd = -1;
    g_dir[0] = 0;
}

/* ---- the run that owns OUTPUT_DIR ---- */

static char g_run_id[MRCNN_RUN_ID_LEN];
/* Under --resume, checkpoints without a run id (written by an older mrcnn) are this
 * run's history: a fresh run is refused where any checkpoint exists, so they cannot be
 * another run's. Retention never deletes them (mrcnn_run_owns_strictly). */
static int g_adopts_legacy;

const char *mrcnn_run_id(void) { return g_run_id; }

int mrcnn_run_owns(const char *id) {
    if (!id[0]) return g_adopts_legacy || !g_run_id[0];
    return strcmp(id, g_run_id) == 0;
}

int mrcnn_run_owns_strictly(const char *id) { return strcmp(id, g_run_id) == 0; }

/* Date and time for the reader, 48 bits of the clock and pid against collisions. */
static void run_id_new(char *id, size_t len) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    uint64_t h = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    snprintf(id, len, "%04d%02d%02d-%02d%02d%02d-%012llx", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec, (unsigned long long)(h & 0xFFFFFFFFFFFFull));
}

/* OUTPUT_DIR/run_id: "" when absent; a malformed one is an error (it names the run). */
static int marker_read(const char *dir, char *id, size_t len) {
    char path[1200];
    snprintf(path, sizeof path, "%s/run_id", dir);
    id[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[MRCNN_RUN_ID_LEN + 8] = "";
    int ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    line[strcspn(line, "\r\n")] = 0;
    ok = ok && line[0] && strlen(line) < len;
    for (const char *c = line; ok && *c; c++) ok = (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') || *c == '-';
    MRCNN_CHECK(ok, "%s is not a run id (one line of [0-9a-z-], at most %d characters): it names the run that owns "
                    "OUTPUT_DIR; remove it only if %s holds no run", path, (int)len - 1, dir);
    snprintf(id, len, "%s", line);
    return 1;
}

static void marker_write(const char *dir, const char *id) {
    char path[1200], tmp[1300];
    snprintf(path, sizeof path, "%s/run_id", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    MRCNN_CHECK(f, "cannot create %s: %s", tmp, strerror(errno));
    int slot = mrcnn_fail_cleanup_add(tmp);
    int ok = fprintf(f, "%s\n", id) > 0;
    ok &= fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    ok &= fclose(f) == 0;
    if (!ok && !err) err = errno;
    MRCNN_CHECK(ok, "writing %s failed: %s", tmp, strerror(err));
    MRCNN_CHECK(rename(tmp, path) == 0, "rename %s -> %s failed: %s", tmp, path, strerror(errno));
    mrcnn_fail_cleanup_remove(slot);
}

void mrcnn_run_begin(const char *dir, int resume) {
    char marker[MRCNN_RUN_ID_LEN], newest[MRCNN_RUN_ID_LEN] = "";
    int has_marker = marker_read(dir, marker, sizeof marker);
    char **paths;
    int n = mrcnn_checkpoint_list(dir, &paths);
    if (n > 0 && !mrcnn_checkpoint_run_id(paths[0], newest, sizeof newest)) newest[0] = 0;
    char metrics[1200];
    snprintf(metrics, sizeof metrics, "%s/metrics.json", dir);
    struct stat sb;
    int has_metrics = stat(metrics, &sb) == 0;
    g_adopts_legacy = 0;
    if (!resume && (has_marker || n > 0 || has_metrics)) {
        char who[200], what[2400];
        if (has_marker || newest[0]) snprintf(who, sizeof who, "run %s", has_marker ? marker : newest);
        else snprintf(who, sizeof who, "a run without a run id (written by an older mrcnn)");
        int w = 0;
        if (n > 0)
            w = snprintf(what, sizeof what, "%d checkpoint%s, newest %s", n, n > 1 ? "s" : "", paths[0]);
        if (has_metrics) w += snprintf(what + w, sizeof what - (size_t)w, "%s%s", w ? ", " : "", metrics);
        if (!w) snprintf(what, sizeof what, "%s/run_id", dir);
        mrcnn_checkpoint_list_free(paths, n);
        mrcnn_failf("output", "", __FILE__, __LINE__,
                    "OUTPUT_DIR %s holds an earlier training, %s (%s): continue it with --resume, or choose another "
                    "OUTPUT_DIR (a new run here would mix its checkpoints and metrics with that run's)",
                    dir, who, what);
    }
    mrcnn_checkpoint_list_free(paths, n);
    if (has_marker) {
        snprintf(g_run_id, sizeof g_run_id, "%s", marker);
    } else if (newest[0]) {
        snprintf(g_run_id, sizeof g_run_id, "%s", newest);
    } else {
        run_id_new(g_run_id, sizeof g_run_id);
        if (n > 0)
            mrcnn_info("--resume: the checkpoints in %s carry no run id (an older mrcnn): continuing them as run %s; "
                       "retention keeps them", dir, g_run_id);
    }
    g_adopts_legacy = resume;
    if (!has_marker) marker_write(dir, g_run_id);
    mrcnn_info("run %s in %s%s", g_run_id, dir, resume ? " (--resume)" : "");
}
