/* Measured weak scaling: `mrcnn train` at each rank count with a fixed batch per rank,
 * launched by mpirun (CPU ranks here) or srun (jobs/scaling.sbatch), then the
 * all-reduce probe (bench_probe.c) under the same launcher. img/s and step ms come from
 * the trainer's metrics.json (LOG_PERIOD=1, the warm-up steps dropped); when the trainer
 * logs "allreduce_wait_ms" (its wait for the gradient buckets after backward), that is
 * the exposed communication, otherwise the probe's. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_scaling.h"
#include "mrcnn/json.h"
#include "mrcnn/metrics.h"
#include "mrcnn/plot.h"

/* Shared with cmd_bench.c's model mode (bench_scaling.h); here so that cmd_bench.c ->
 * bench_scaling.c is the only direction. */
int bench_parse_int_list(const char *s, int *out, int cap) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 1) return 0;
        if (*end == '-') {
            p = end + 1;
            b = strtol(p, &end, 10);
            if (end == p || b < a) return 0;
        }
        for (long v = a; v <= b; v++) {
            if (n == cap) return 0;
            out[n++] = (int)v;
        }
        if (*end == ',') end++;
        else if (*end) return 0;
        p = end;
    }
    return n;
}

int bench_plot_scaling(const char *base, const char *title, const char *xlabel, const double *x,
                       const double *img_s, const double *eff, int n, int modelled) {
    if (n < 1 || !mrcnn_plot_enabled()) return 0;
    char csv[1300], q[2700], qt[1200];
    snprintf(csv, sizeof csv, "%s_plot.csv", base); // base.csv is the full table
    FILE *f = fopen(csv, "w");
    if (!f) {
        fprintf(stderr, "mrcnn bench: cannot write %s\n", csv);
        return 0;
    }
    /* Ideal: throughput linear in the count from the first point, efficiency 1. */
    fprintf(f, "%s,img_per_s,ideal_img_per_s,efficiency,ideal_efficiency\n", modelled ? "gpus" : "ranks");
    for (int i = 0; i < n; i++)
        fprintf(f, "%.17g,%.17g,%.17g,%.17g,1\n", x[i], img_s[i], img_s[0] * x[i] / x[0], eff[i]);
    if (fclose(f) != 0) return 0;
    const char *kind = modelled ? "modelled" : "measured";
    /* measured: filled points on a solid line; modelled: open points on a dashed one */
    const char *style = modelled ? "linespoints pt 6 ps 1.5 dt 2" : "linespoints pt 7 ps 1.5 dt 1";
    mrcnn_plot_quote(q, sizeof q, csv);
    mrcnn_plot_quote(qt, sizeof qt, title);
    mrcnn_plot_buf b = {0};
    mrcnn_plot_buf_printf(&b,
                          "set datafile separator ','\nset grid\nset key top left font ',9'\nset logscale x 2\n"
                          "set xlabel '%s'\nset xrange [*:*] noextend\nset offsets graph 0.05, graph 0.05, 0, 0\n"
                          "set multiplot layout 1,2 title %s font ',12'\n"
                          "set title 'throughput (log-log: ideal is a straight line)'\n"
                          "set ylabel 'throughput (images/s, all ranks)'\nset logscale y 2\n"
                          "plot %s using 1:3 with lines lw 2 dt 3 lc rgb '#555555' title 'ideal (linear from the first "
                          "point)', \\\n    '' using 1:2 with %s lw 2 lc rgb '%s' title '%s'\n"
                          "unset logscale y\nset title 'weak-scaling efficiency'\n"
                          "set ylabel 'efficiency (img/s per rank / first)'\nset yrange [0:1.1]\nset key bottom left\n"
                          "plot %s using 1:5 with lines lw 2 dt 3 lc rgb '#555555' title 'ideal (1.0)', \\\n"
                          "    '' using 1:4 with %s lw 2 lc rgb '%s' title '%s'\nunset multiplot\n",
                          xlabel, qt, q, style, mrcnn_plot_color(0), kind, q, style, mrcnn_plot_color(1), kind);
    int ok = mrcnn_plot_render(base, 1200, 480, b.s);
    mrcnn_plot_buf_free(&b);
    return ok;
}

#define MAX_RANK_COUNTS 64
#define MAX_SETS 64

typedef struct {
    int ranks[MAX_RANK_COUNTS], n_ranks;
    const char *config, *launch, *out;
    const char *sets[MAX_SETS];
    int n_sets, steps, warmup, per_rank_batch, gpus_per_node;
    double bucket_mb, backward_ms;
} opts;

typedef struct {
    int ranks, global_batch, timed_steps;
    double img_per_s, step_ms, efficiency;
    double allreduce_ms, exposed_ms, hidden_share, probe_backward_ms;
    int trainer_wait; // exposed_ms came from the trainer's own allreduce_wait_ms
} row;

/* Appends s to buf as one single-quoted shell word. */
static void shell_word(char *buf, size_t cap, const char *s) {
    size_t n = strlen(buf);
    if (n + 2 < cap) buf[n++] = ' ';
    if (n + 1 < cap) buf[n++] = '\'';
    for (; *s && n + 5 < cap; s++) {
        if (*s == '\'') {
            memcpy(buf + n, "'\\''", 4);
            n += 4;
        } else {
            buf[n++] = *s;
        }
    }
    if (n + 1 < cap) buf[n++] = '\'';
    buf[n] = 0;
}

/* The launcher with {n} and {nodes} replaced. */
static void expand_launch(char *buf, size_t cap, const char *tmpl, int n, int nodes) {
    size_t k = 0;
    for (const char *p = tmpl; *p && k + 16 < cap;) {
        if (!strncmp(p, "{n}", 3)) {
            k += (size_t)snprintf(buf + k, cap - k, "%d", n);
            p += 3;
        } else if (!strncmp(p, "{nodes}", 7)) {
            k += (size_t)snprintf(buf + k, cap - k, "%d", nodes);
            p += 7;
        } else {
            buf[k++] = *p++;
        }
    }
    buf[k] = 0;
}

static int run(const char *cmd, const char *log) {
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "mrcnn bench scaling: this run failed (%s %d); its log is %s:\n  %s\n",
                st != -1 && WIFEXITED(st) ? "exit code" : "status", st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : st,
                log, cmd);
        char tail[1400];
        snprintf(tail, sizeof tail, "tail -n 15 '%s' >&2", log);
        if (system(tail) != 0) fprintf(stderr, "(no log)\n");
        return 0;
    }
    return 1;
}

/* Mean step_ms (and allreduce_wait_ms when present) over the logged steps after warmup. */
static int read_metrics(const char *path, int warmup, row *r) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "mrcnn bench scaling: the trainer wrote no %s\n", path);
        return 0;
    }
    char line[8192];
    double sum_ms = 0, sum_wait = 0;
    int n = 0, n_wait = 0;
    while (fgets(line, sizeof line, f)) {
        mrcnn_json *j = mrcnn_json_open_mem(line, strlen(line));
        double step = -1, step_ms = NAN, wait_ms = NAN;
        if (mrcnn_json_next(j) == MRCNN_JSON_OBJECT_BEGIN) {
            while (mrcnn_json_next(j) == MRCNN_JSON_KEY) {
                char key[64];
                snprintf(key, sizeof key, "%s", mrcnn_json_text(j, NULL));
                mrcnn_json_token t = mrcnn_json_next(j);
                double v = t == MRCNN_JSON_NUMBER ? mrcnn_json_double(j) : NAN;
                if (t == MRCNN_JSON_OBJECT_BEGIN || t == MRCNN_JSON_ARRAY_BEGIN) mrcnn_json_skip(j);
                if (!strcmp(key, "step")) step = v;
                else if (!strcmp(key, "step_ms")) step_ms = v;
                else if (!strcmp(key, "allreduce_wait_ms")) wait_ms = v;
            }
        }
        mrcnn_json_close(j);
        if (step > warmup && isfinite(step_ms)) {
            sum_ms += step_ms;
            n++;
            if (isfinite(wait_ms)) {
                sum_wait += wait_ms;
                n_wait++;
            }
        }
    }
    fclose(f);
    if (n == 0) {
        fprintf(stderr, "mrcnn bench scaling: %s has no timed step after the %d warm-up steps (raise --steps)\n", path,
                warmup);
        return 0;
    }
    r->timed_steps = n;
    r->step_ms = sum_ms / n;
    r->img_per_s = 1e3 * r->global_batch / r->step_ms;
    r->trainer_wait = n_wait == n;
    if (r->trainer_wait) r->exposed_ms = sum_wait / n;
    return 1;
}

static int read_probe(const char *path, row *r) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "mrcnn bench scaling: the probe wrote no %s\n", path);
        return 0;
    }
    char key[64];
    double v;
    int got = 0;
    double exposed = NAN;
    while (fscanf(f, "%63s %lf", key, &v) == 2) {
        if (!strcmp(key, "allreduce_ms")) r->allreduce_ms = v, got |= 1;
        else if (!strcmp(key, "exposed_ms")) exposed = v, got |= 2;
        else if (!strcmp(key, "backward_ms")) r->probe_backward_ms = v, got |= 4;
    }
    fclose(f);
    if (got != 7) {
        fprintf(stderr, "mrcnn bench scaling: %s is incomplete\n", path);
        return 0;
    }
    if (!r->trainer_wait) r->exposed_ms = exposed;
    return 1;
}

static int parse_opts(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->ranks[0] = 1;
    o->ranks[1] = 2;
    o->n_ranks = 2;
    o->config = "configs/tiny.yaml";
    o->launch = "mpirun --oversubscribe -np {n}";
    o->out = "scaling";
    o->steps = 8;
    o->warmup = 2;
    o->per_rank_batch = 1;
    o->backward_ms = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "mrcnn bench scaling: '%s' is unknown or wants a value (see --help)\n", a);
            return 0;
        }
        i++;
        if (!strcmp(a, "--ranks")) {
            if (!(o->n_ranks = bench_parse_int_list(v, o->ranks, MAX_RANK_COUNTS))) {
                fprintf(stderr, "mrcnn bench scaling: --ranks wants a list like 1,2,3 or 1-4, got '%s'\n", v);
                return 0;
            }
        } else if (!strcmp(a, "--config")) o->config = v;
        else if (!strcmp(a, "--set")) {
            if (o->n_sets == MAX_SETS) {
                fprintf(stderr, "mrcnn bench scaling: more than %d --set\n", MAX_SETS);
                return 0;
            }
            o->sets[o->n_sets++] = v;
        } else if (!strcmp(a, "--steps")) o->steps = atoi(v);
        else if (!strcmp(a, "--warmup")) o->warmup = atoi(v);
        else if (!strcmp(a, "--per-rank-batch")) o->per_rank_batch = atoi(v);
        else if (!strcmp(a, "--launch")) o->launch = v;
        else if (!strcmp(a, "--gpus-per-node")) o->gpus_per_node = atoi(v);
        else if (!strcmp(a, "--bucket-mb")) o->bucket_mb = atof(v);
        else if (!strcmp(a, "--backward-ms")) o->backward_ms = atof(v);
        else if (!strcmp(a, "--out")) o->out = v;
        else {
            fprintf(stderr, "mrcnn bench scaling: unexpected argument '%s' (see --help)\n", a);
            return 0;
        }
    }
    if (o->warmup < 0 || o->steps <= o->warmup || o->per_rank_batch < 1 || o->gpus_per_node < 0 ||
        o->bucket_mb < 0) {
        fprintf(stderr, "mrcnn bench scaling: need --steps > --warmup >= 0, --per-rank-batch >= 1, "
                        "--gpus-per-node >= 0, --bucket-mb >= 0\n");
        return 0;
    }
    return 1;
}

static void common_args(char *cmd, size_t cap, const opts *o) {
    strncat(cmd, " --config", cap - strlen(cmd) - 1);
    shell_word(cmd, cap, o->config);
    for (int s = 0; s < o->n_sets; s++) {
        strncat(cmd, " --set", cap - strlen(cmd) - 1);
        shell_word(cmd, cap, o->sets[s]);
    }
}

/* The command line of one training run: `mrcnn train` under the launcher, the fixed
 * settings of a measurement, the global batch and output folder, output to log. */
static void train_command(char *cmd, size_t cap, const char *launch, const char *exe, const opts *o,
                          int global_batch, const char *dir, const char *log) {
    char buf[2048];
    snprintf(cmd, cap, "%s", launch);
    shell_word(cmd, cap, exe);
    strncat(cmd, " train", cap - strlen(cmd) - 1);
    common_args(cmd, cap, o);
    const char *fixed[] = {"SOLVER.REFERENCE_WORLD_SIZE=0", "LOG_PERIOD=1", "SOLVER.CHECKPOINT_PERIOD=0"};
    for (int s = 0; s < 3; s++) {
        strncat(cmd, " --set", cap - strlen(cmd) - 1);
        shell_word(cmd, cap, fixed[s]);
    }
    snprintf(buf, sizeof buf, "SOLVER.IMS_PER_BATCH=%d", global_batch);
    strncat(cmd, " --set", cap - strlen(cmd) - 1);
    shell_word(cmd, cap, buf);
    snprintf(buf, sizeof buf, "OUTPUT_DIR=%s", dir);
    strncat(cmd, " --set", cap - strlen(cmd) - 1);
    shell_word(cmd, cap, buf);
    snprintf(buf, sizeof buf, " --max-steps %d >", o->steps);
    strncat(cmd, buf, cap - strlen(cmd) - 1);
    shell_word(cmd, cap, log);
    strncat(cmd, " 2>&1", cap - strlen(cmd) - 1);
}

int bench_scaling_measure(int argc, char **argv) {
    opts o;
    if (!parse_opts(argc, argv, &o)) return 2;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        fprintf(stderr, "mrcnn bench scaling: cannot find the mrcnn binary (/proc/self/exe)\n");
        return 1;
    }
    exe[len] = 0;
    char cmd[16384], buf[2048], launch[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", o.out);
    if (system(cmd) != 0) {
        fprintf(stderr, "mrcnn bench scaling: cannot create %s\n", o.out);
        return 1;
    }
    row rows[MAX_RANK_COUNTS];
    for (int k = 0; k < o.n_ranks; k++) {
        row *r = &rows[k];
        memset(r, 0, sizeof *r);
        r->ranks = o.ranks[k];
        r->global_batch = o.per_rank_batch * r->ranks;
        int gpn = o.gpus_per_node > 0 ? o.gpus_per_node : r->ranks;
        expand_launch(launch, sizeof launch, o.launch, r->ranks, (r->ranks + gpn - 1) / gpn);
        char dir[1200], log[1300];
        snprintf(dir, sizeof dir, "%s/ranks%d", o.out, r->ranks);
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
        if (system(cmd) != 0) {
            fprintf(stderr, "mrcnn bench scaling: cannot recreate %s\n", dir);
            return 1;
        }
        /* The training run. */
        snprintf(log, sizeof log, "%s/train.log", dir);
        train_command(cmd, sizeof cmd, launch, exe, &o, r->global_batch, dir, log);
        printf("ranks %d: training %d steps, global batch %d ...\n", r->ranks, o.steps, r->global_batch);
        fflush(stdout);
        if (!run(cmd, log)) return 1;
        snprintf(buf, sizeof buf, "%s/metrics.json", dir);
        if (!read_metrics(buf, o.warmup, r)) return 1;
        /* The probe. Its synthetic backward defaults to half the first run's step. */
        double bwd = o.backward_ms >= 0 ? o.backward_ms : 0.5 * rows[0].step_ms;
        snprintf(log, sizeof log, "%s/probe.log", dir);
        snprintf(cmd, sizeof cmd, "%s", launch);
        shell_word(cmd, sizeof cmd, exe);
        strncat(cmd, " bench scaling --probe", sizeof cmd - strlen(cmd) - 1);
        common_args(cmd, sizeof cmd, &o);
        snprintf(buf, sizeof buf, " --bucket-mb %.6g --backward-ms %.6g --result", o.bucket_mb, bwd);
        strncat(cmd, buf, sizeof cmd - strlen(cmd) - 1);
        snprintf(buf, sizeof buf, "%s/probe.txt", dir);
        shell_word(cmd, sizeof cmd, buf);
        strncat(cmd, " >", sizeof cmd - strlen(cmd) - 1);
        shell_word(cmd, sizeof cmd, log);
        strncat(cmd, " 2>&1", sizeof cmd - strlen(cmd) - 1);
        if (!run(cmd, log)) return 1;
        snprintf(buf, sizeof buf, "%s/probe.txt", dir);
        if (!read_probe(buf, r)) return 1;
        r->hidden_share = r->allreduce_ms > 0 ? fmax(0.0, 1.0 - r->exposed_ms / r->allreduce_ms) : 1.0;
    }
    /* Weak-scaling efficiency: throughput per rank relative to the first (smallest) count. */
    const double base = rows[0].img_per_s / rows[0].ranks;
    char path[1300];
    snprintf(path, sizeof path, "%s/scaling.csv", o.out);
    FILE *csv = fopen(path, "w");
    if (!csv) {
        fprintf(stderr, "mrcnn bench scaling: cannot create %s\n", path);
        return 1;
    }
    fprintf(csv, "ranks,global_batch,timed_steps,img_per_s,step_ms,efficiency,allreduce_ms,exposed_ms,hidden_share,"
                 "exposed_source,probe_backward_ms\n");
    printf("%6s %7s %9s %9s %11s %13s %11s %7s  %s\n", "ranks", "batch", "img/s", "step_ms", "efficiency",
           "allreduce_ms", "exposed_ms", "hidden", "exposed from");
    double xs[MAX_RANK_COUNTS], ys[MAX_RANK_COUNTS], es[MAX_RANK_COUNTS];
    for (int k = 0; k < o.n_ranks; k++) {
        row *r = &rows[k];
        r->efficiency = r->img_per_s / r->ranks / base;
        const char *src = r->trainer_wait ? "trainer" : "probe";
        fprintf(csv, "%d,%d,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%s,%.4f\n", r->ranks, r->global_batch, r->timed_steps,
                r->img_per_s, r->step_ms, r->efficiency, r->allreduce_ms, r->exposed_ms, r->hidden_share, src,
                r->probe_backward_ms);
        printf("%6d %7d %9.2f %9.2f %10.1f%% %13.3f %11.3f %6.1f%%  %s\n", r->ranks, r->global_batch, r->img_per_s,
               r->step_ms, 100 * r->efficiency, r->allreduce_ms, r->exposed_ms, 100 * r->hidden_share,
               r->trainer_wait ? "trainer (allreduce_wait_ms)" : "probe (synthetic backward)");
        xs[k] = r->ranks;
        ys[k] = r->img_per_s;
        es[k] = r->efficiency;
    }
    if (fclose(csv) != 0) {
        fprintf(stderr, "mrcnn bench scaling: error writing %s\n", path);
        return 1;
    }
    printf("wrote %s\n", path);
    snprintf(path, sizeof path, "%s/scaling", o.out);
    char title[600];
    snprintf(title, sizeof title, "measured weak scaling: %s, batch %d per rank, %d timed steps", o.config,
             o.per_rank_batch, rows[0].timed_steps);
    if (bench_plot_scaling(path, title, "MPI ranks", xs, ys, es, o.n_ranks, 0)) printf("wrote %s.png\n", path);
    return 0;
}
