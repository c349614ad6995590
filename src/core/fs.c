/* File-system helpers (fs.h). */
#include "mrcnn/fs.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

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
