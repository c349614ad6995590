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

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static int g_fd = -1;
static char g_dir[1024];

/* Here, not in metrics.c, so that metrics.c -> tb_writer.c -> this file has no cycle. */
int mrcnn_mkdir_p(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return 0;
        *p = '/';
    }
    return mkdir(buf, 0755) == 0 || errno == EEXIST;
}

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
