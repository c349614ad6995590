/* The gnuplot driver of plot.h. gnuplot runs as a child process on a script file
 * rather than through a pipe: a gnuplot that dies early would SIGPIPE the trainer
 * through a pipe, and the script kept beside the picture redraws it later. */
#include "mrcnn/plot.h"

#include <errno.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mrcnn/check.h"
#include "mrcnn/log.h"

extern char **environ;

static char g_exe[1024];
static int g_state = -1; // -1 not looked for yet, 0 missing, 1 found

static int is_exe(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

/* An absolute or relative path is taken as is; a bare name is looked up on PATH. */
static int find_exe(const char *name, char *out, size_t cap) {
    if (strchr(name, '/')) {
        snprintf(out, cap, "%s", name);
        return is_exe(out);
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    while (*path) {
        size_t len = strcspn(path, ":");
        snprintf(out, cap, "%.*s/%s", (int)len, len ? path : ".", name);
        if (is_exe(out)) return 1;
        path += len + (path[len] == ':');
    }
    return 0;
}

int mrcnn_plot_enabled(void) {
    if (g_state < 0) {
        const char *want = getenv("MRCNN_GNUPLOT");
        if (!want || !*want) want = "gnuplot";
        g_state = find_exe(want, g_exe, sizeof g_exe);
        if (!g_state)
            mrcnn_warn("plots are off: gnuplot not found (%s%s); training and evaluation go on without pictures "
                       "(make deps installs gnuplot-nox)",
                       getenv("MRCNN_GNUPLOT") && *getenv("MRCNN_GNUPLOT") ? "MRCNN_GNUPLOT=" : "PATH: ", want);
    }
    return g_state;
}

void mrcnn_plot_quote(char *out, size_t cap, const char *s) {
    size_t n = 0;
    if (cap < 3) {
        if (cap) out[0] = 0;
        return;
    }
    out[n++] = '\'';
    for (; *s && n + 3 < cap; s++) {
        if (*s == '\'') out[n++] = '\'';
        out[n++] = *s;
    }
    out[n++] = '\'';
    out[n] = 0;
}

const char *mrcnn_plot_color(int i) {
    /* Okabe-Ito, then a few darker tones: distinct for the colour-blind too. */
    static const char *const k[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9",
                                    "#000000", "#882255", "#117733", "#999933", "#332288", "#aa4499"};
    return k[i % (int)(sizeof k / sizeof k[0])];
}

void mrcnn_plot_buf_printf(mrcnn_plot_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->n + (size_t)need + 1 > b->cap) {
        b->cap = (b->n + (size_t)need + 1) * 2;
        b->s = MRCNN_REALLOC(b->s, b->cap, "plot script");
    }
    vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap2);
    va_end(ap2);
    b->n += (size_t)need;
}

void mrcnn_plot_buf_free(mrcnn_plot_buf *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

int mrcnn_plot_render(const char *base, int w, int h, const char *script) {
    if (!mrcnn_plot_enabled()) return 0;
    char gp[1200], png[1200], q[2500];
    snprintf(gp, sizeof gp, "%s.gp", base);
    snprintf(png, sizeof png, "%s.png", base);
    FILE *f = fopen(gp, "w");
    if (!f) {
        mrcnn_warn("plot: cannot write %s: %s", gp, strerror(errno));
        return 0;
    }
    mrcnn_plot_quote(q, sizeof q, png);
    fprintf(f, "set terminal pngcairo size %d,%d noenhanced font 'sans,10'\nset output %s\n%s\nunset output\n", w, h,
            q, script);
    if (fclose(f) != 0) {
        mrcnn_warn("plot: writing %s failed", gp);
        return 0;
    }
    unlink(png); // a stale picture must not pass for a new one
    char *argv[] = {g_exe, gp, NULL};
    pid_t pid;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", 0, 0); // O_RDONLY
    int err = posix_spawn(&pid, g_exe, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (err) {
        mrcnn_warn("plot: cannot run %s: %s", g_exe, strerror(err));
        return 0;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    struct stat st;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || stat(png, &st) != 0 || st.st_size == 0) {
        mrcnn_warn("plot: gnuplot failed on %s (status %d); no %s", gp, status, png);
        return 0;
    }
    return 1;
}
