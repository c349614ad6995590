/* Small helpers shared by the mrcnn-prep subcommands. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mrcnn/check.h"
#include "prep.h"

int prep_is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

const char *prep_arg_value(int argc, char **argv, int *i) {
    MRCNN_CHECK(*i + 1 < argc, "option %s needs a value", argv[*i]);
    *i += 1;
    return argv[*i];
}

long long prep_arg_int(int argc, char **argv, int *i, long long lo, long long hi) {
    const char *flag = argv[*i];
    const char *v = prep_arg_value(argc, argv, i);
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    MRCNN_CHECK(errno == 0 && end != v && *end == 0 && x >= lo && x <= hi,
                "option %s: '%s' is not an integer in [%lld, %lld]", flag, v, lo, hi);
    return x;
}

void prep_mkdirs(const char *path) {
    char buf[4096];
    MRCNN_CHECK(strlen(path) < sizeof buf, "path too long: %s", path);
    strcpy(buf, path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                MRCNN_CHECK(0, "cannot create directory %s: %s", buf, strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
}
