/* Training curves from metrics.json (plot.h): one figure of four panels (losses on a
 * log axis, learning rate, throughput and memory, fp16 loss scale and skipped steps),
 * one run or several overlaid (`mrcnn plot`). The series are read back from the file
 * the trainer appends, so a resumed run, a finished run and a run still going plot
 * the same way. */
#include "mrcnn/plot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/json.h"
#include "mrcnn/log.h"
#include "mrcnn/metrics.h"

#define MAX_COLS 32

typedef struct {
    char name[256];             // directory name, and the run id when metrics.json has one
    char cols[MAX_COLS][64];    // (n_cols) series names, metrics.json keys
    int n_cols;
    double *rows;               // (n, 1 + MAX_COLS): step, then the columns; NaN where absent
    int n, cap;
} run_table;

/* The keys worth a curve; everything else in metrics.json (timings, ids) is left out. */
static int wanted(const char *k) {
    static const char *const keep[] = {"total_loss", "lr",         "img_per_s", "mem_mb",
                                       "gpu_mem_mb", "loss_scale", "skipped"};
    if (!strncmp(k, "loss_", 5) && strcmp(k, "loss_scale")) return 1;
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (!strcmp(k, keep[i])) return 1;
    return 0;
}

/* Column order: total, the loss terms as logged, then the rest in keep's order. */
static int rank_of(const char *k) {
    if (!strcmp(k, "total_loss")) return 0;
    if (!strncmp(k, "loss_", 5) && strcmp(k, "loss_scale")) return 1;
    static const char *const tail[] = {"lr", "img_per_s", "mem_mb", "gpu_mem_mb", "loss_scale", "skipped"};
    for (int i = 0; i < 6; i++)
        if (!strcmp(k, tail[i])) return 2 + i;
    return 99;
}

static int col_index(run_table *t, const char *k) {
    for (int c = 0; c < t->n_cols; c++)
        if (!strcmp(t->cols[c], k)) return c;
    if (t->n_cols == MAX_COLS) return -1;
    snprintf(t->cols[t->n_cols], sizeof t->cols[0], "%s", k);
    return t->n_cols++;
}

static double *row_at(run_table *t, int i) { return t->rows + (size_t)i * (1 + MAX_COLS); }

/* One metrics.json line; eval lines (no total_loss) and lines that do not parse are
 * skipped, unknown keys ignored, so fields added later do not break old readers. */
static void read_line(run_table *t, const char *line, char *run_id, size_t run_id_cap) {
    mrcnn_json *j = mrcnn_json_open_mem(line, strlen(line));
    if (!j) return;
    double vals[MAX_COLS];
    int idx[MAX_COLS], nv = 0, have_step = 0, have_total = 0;
    double step = 0;
    char key[64] = "";
    mrcnn_json_token tok = mrcnn_json_next(j);
    if (tok != MRCNN_JSON_OBJECT_BEGIN) goto done;
    while ((tok = mrcnn_json_next(j)) == MRCNN_JSON_KEY) {
        snprintf(key, sizeof key, "%s", mrcnn_json_text(j, NULL));
        tok = mrcnn_json_next(j);
        if (tok == MRCNN_JSON_NUMBER || tok == MRCNN_JSON_NULL) {
            double v = tok == MRCNN_JSON_NUMBER ? mrcnn_json_double(j) : NAN;
            if (!strcmp(key, "step")) {
                step = v;
                have_step = isfinite(v);
            } else if (wanted(key) && nv < MAX_COLS) {
                int c = col_index(t, key);
                if (c >= 0) {
                    idx[nv] = c;
                    vals[nv++] = v;
                }
                have_total |= !strcmp(key, "total_loss");
            }
        } else if (tok == MRCNN_JSON_STRING) {
            if (!strcmp(key, "run_id") && run_id[0] == 0) snprintf(run_id, run_id_cap, "%s", mrcnn_json_text(j, NULL));
        } else if (tok == MRCNN_JSON_OBJECT_BEGIN || tok == MRCNN_JSON_ARRAY_BEGIN) {
            if (!mrcnn_json_skip(j)) goto done;
        } else if (tok != MRCNN_JSON_TRUE && tok != MRCNN_JSON_FALSE) {
            goto done;
        }
    }
    if (!have_step || !have_total) goto done;
    /* A resumed run repeats the steps after its checkpoint: the later lines win. */
    while (t->n > 0 && row_at(t, t->n - 1)[0] >= step) t->n--;
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 256;
        t->rows = MRCNN_REALLOC(t->rows, sizeof(double) * (1 + MAX_COLS) * t->cap, "training plot rows");
    }
    double *r = row_at(t, t->n++);
    r[0] = step;
    for (int c = 1; c <= MAX_COLS; c++) r[c] = NAN;
    for (int k = 0; k < nv; k++) r[1 + idx[k]] = vals[k];
done:
    mrcnn_json_close(j);
}

static int read_run(const char *dir, run_table *t) {
    memset(t, 0, sizeof *t);
    char path[1100];
    snprintf(path, sizeof path, "%s/metrics.json", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        mrcnn_warn("plot: cannot open %s", path);
        return 0;
    }
    char run_id[128] = "";
    size_t cap = 1 << 16;
    char *line = MRCNN_MALLOC(cap, "metrics line");
    while (fgets(line, (int)cap, f)) read_line(t, line, run_id, sizeof run_id);
    free(line);
    fclose(f);
    /* Stable order whatever order the keys were first seen in: insertion sort by rank. */
    int perm[MAX_COLS];
    for (int c = 0; c < t->n_cols; c++) perm[c] = c;
    for (int a = 1; a < t->n_cols; a++)
        for (int b = a; b > 0 && rank_of(t->cols[perm[b]]) < rank_of(t->cols[perm[b - 1]]); b--) {
            int x = perm[b];
            perm[b] = perm[b - 1];
            perm[b - 1] = x;
        }
    char cols[MAX_COLS][64];
    memcpy(cols, t->cols, sizeof cols);
    for (int c = 0; c < t->n_cols; c++) memcpy(t->cols[c], cols[perm[c]], sizeof cols[0]);
    double tmp[MAX_COLS];
    for (int i = 0; i < t->n; i++) {
        double *r = row_at(t, i);
        for (int c = 0; c < t->n_cols; c++) tmp[c] = r[1 + perm[c]];
        memcpy(r + 1, tmp, sizeof(double) * t->n_cols);
    }
    /* The run's name: its directory's, and the run id metrics.json may carry. */
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    size_t s = len;
    while (s > 0 && dir[s - 1] != '/') s--;
    snprintf(t->name, sizeof t->name, "%.*s%s%s%s", (int)(len - s), dir + s, run_id[0] ? " (" : "", run_id,
             run_id[0] ? ")" : "");
    return t->n;
}

static int col_of(const run_table *t, const char *k) {
    for (int c = 0; c < t->n_cols; c++)
        if (!strcmp(t->cols[c], k)) return c;
    return -1;
}

/* True when some value of the column is finite and, for the loss scale, not 1 (fp32
 * and bf16 runs log a constant 1 or 0: no panel for them). */
static int col_shows(const run_table *t, int c, int scale) {
    if (c < 0) return 0;
    for (int i = 0; i < t->n; i++) {
        double v = row_at((run_table *)t, i)[1 + c];
        if (isfinite(v) && (!scale || (v != 1 && v != 0))) return 1;
    }
    return 0;
}

static int write_csv(const char *path, const run_table *t, const char *config) {
    FILE *f = fopen(path, "w");
    if (!f) {
        mrcnn_warn("plot: cannot write %s", path);
        return 0;
    }
    fprintf(f, "# run: %s\n# config: %s\nstep", t->name, config ? config : "");
    for (int c = 0; c < t->n_cols; c++) fprintf(f, ",%s", t->cols[c]);
    fputc('\n', f);
    for (int i = 0; i < t->n; i++) {
        const double *r = row_at((run_table *)t, i);
        fprintf(f, "%.17g", r[0]);
        for (int c = 0; c < t->n_cols; c++) {
            if (isfinite(r[1 + c])) fprintf(f, ",%.17g", r[1 + c]);
            else fputc(',', f); // an empty field is missing to gnuplot
        }
        fputc('\n', f);
    }
    return fclose(f) == 0;
}

/* The config line an earlier plot of this run recorded (the trainer knows the config,
 * `mrcnn plot` does not). */
static void config_from_csv(const char *path, char *out, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f) && line[0] == '#')
        if (!strncmp(line, "# config: ", 10)) {
            line[strcspn(line, "\n")] = 0;
            snprintf(out, cap, "%s", line + 10);
        }
    fclose(f);
}

/* series: a metrics.json key; the runs' colour is the series' (by its global index), the
 * run tells itself by its dash pattern. */
static void plot_series(mrcnn_plot_buf *b, const run_table *runs, char (*csv)[1300], int n_runs, const char *key,
                        int color, const char *axes, int *first) {
    for (int r = 0; r < n_runs; r++) {
        int c = col_of(&runs[r], key);
        if (c < 0 || !col_shows(&runs[r], c, 0)) continue;
        char q[2700], title[400];
        mrcnn_plot_quote(q, sizeof q, csv[r]);
        if (n_runs > 1) snprintf(title, sizeof title, "%s: %s", runs[r].name, key);
        else snprintf(title, sizeof title, "%s", key);
        char qt[900];
        mrcnn_plot_quote(qt, sizeof qt, title);
        mrcnn_plot_buf_printf(b, "%s %s using 1:%d axes %s with lines lw %d dt %d lc rgb '%s' title %s",
                              *first ? "plot" : ", \\\n    ", q, c + 2, axes, strcmp(key, "total_loss") ? 2 : 3,
                              1 + r % 5, mrcnn_plot_color(color), qt);
        *first = 0;
    }
}

/* The picture's title: the run and its config line, or the runs compared with their dash styles. */
static void run_title(char *title, size_t len, const run_table *runs, int n_runs, const char *cfg_line) {
    if (n_runs == 1) {
        snprintf(title, len, "training: run %s%s%s", runs[0].name, cfg_line[0] ? " - " : "", cfg_line);
        return;
    }
    int n = snprintf(title, len, "training: runs");
    for (int r = 0; r < n_runs && n < (int)len; r++)
        n += snprintf(title + n, len - n, "%s %s (%s)", r ? " vs" : "", runs[r].name,
                      r == 0 ? "solid" : r % 5 == 1 ? "dashed" : "dash pattern ");
}

int mrcnn_plot_training(const char *const *run_dirs, int n_runs, const char *out_dir, const char *config) {
    if (n_runs < 1 || !mrcnn_plot_enabled()) return 0;
    run_table *runs = MRCNN_CALLOC((size_t)n_runs, sizeof *runs, "plot runs");
    char(*csv)[1300] = MRCNN_CALLOC((size_t)n_runs, sizeof *csv, "plot csv paths");
    const char *stem = n_runs == 1 ? "training" : "compare";
    int steps = 0, ok = 1;
    char cfg_line[512] = "";
    if (config) snprintf(cfg_line, sizeof cfg_line, "%s", config);
    if (!mrcnn_mkdir_p(out_dir)) {
        mrcnn_warn("plot: cannot create %s", out_dir);
        ok = 0;
    }
    for (int r = 0; ok && r < n_runs; r++) {
        if (read_run(run_dirs[r], &runs[r]) == 0) {
            mrcnn_warn("plot: no training steps in %s/metrics.json", run_dirs[r]);
            ok = 0;
            break;
        }
        steps += runs[r].n;
        if (n_runs == 1) snprintf(csv[r], sizeof csv[r], "%s/%s.csv", out_dir, stem);
        else snprintf(csv[r], sizeof csv[r], "%s/%s_%d.csv", out_dir, stem, r + 1);
        if (!config && n_runs == 1) {
            char prev[1200];
            snprintf(prev, sizeof prev, "%s/plots/training.csv", run_dirs[r]);
            config_from_csv(prev, cfg_line, sizeof cfg_line);
            if (!cfg_line[0]) config_from_csv(csv[r], cfg_line, sizeof cfg_line);
        }
        ok = write_csv(csv[r], &runs[r], cfg_line);
    }
    if (!ok) goto out;

    /* Global colour of each series: its first place over all runs. */
    char keys[2 * MAX_COLS][64];
    int n_keys = 0, fp16 = 0;
    for (int r = 0; r < n_runs; r++) {
        for (int c = 0; c < runs[r].n_cols; c++) {
            int k = 0;
            while (k < n_keys && strcmp(keys[k], runs[r].cols[c])) k++;
            if (k == n_keys && n_keys < 2 * MAX_COLS) snprintf(keys[n_keys++], sizeof keys[0], "%s", runs[r].cols[c]);
        }
        fp16 |= col_shows(&runs[r], col_of(&runs[r], "loss_scale"), 1) ||
                col_shows(&runs[r], col_of(&runs[r], "skipped"), 1);
    }
    char title[1400], q[2900];
    run_title(title, sizeof title, runs, n_runs, cfg_line);
    mrcnn_plot_quote(q, sizeof q, title);
    mrcnn_plot_buf b = {0};
    mrcnn_plot_buf_printf(&b,
                          "set datafile separator ','\nset grid\nset key top right font ',8'\n"
                          "set multiplot layout 2,2 title %s font ',12'\nset xlabel 'step (iterations)'\n",
                          q);
    /* 1: the losses, log y: the terms span decades */
    mrcnn_plot_buf_printf(&b, "set title 'losses'\nset ylabel 'loss (log scale)'\nset logscale y\nset key bottom left\n");
    int first = 1;
    for (int k = 0; k < n_keys; k++)
        if (rank_of(keys[k]) <= 1) plot_series(&b, runs, csv, n_runs, keys[k], k, "x1y1", &first);
    mrcnn_plot_buf_printf(&b, "\nunset logscale y\nset key top right\n");
    /* 2: learning rate */
    mrcnn_plot_buf_printf(&b, "set title 'learning rate'\nset ylabel 'learning rate'\n");
    first = 1;
    for (int k = 0; k < n_keys; k++)
        if (!strcmp(keys[k], "lr")) plot_series(&b, runs, csv, n_runs, keys[k], k, "x1y1", &first);
    mrcnn_plot_buf_printf(&b, "%s\n", first ? "set label 1 'no learning rate logged' at graph 0.5,0.5 center\nplot [0:1][0:1] -1 notitle\nunset label 1" : "");
    /* 3: throughput (left axis) and memory (right axis) */
    mrcnn_plot_buf_printf(&b, "set title 'throughput and memory'\nset ylabel 'throughput (images/s, all ranks)'\n"
                              "set y2label 'memory on rank 0 (MiB)'\nset ytics nomirror\nset y2tics\n"
                              "set yrange [0:*]\nset y2range [0:*]\n");
    first = 1;
    for (int k = 0; k < n_keys; k++) {
        if (!strcmp(keys[k], "img_per_s")) plot_series(&b, runs, csv, n_runs, keys[k], k, "x1y1", &first);
        if (!strcmp(keys[k], "mem_mb") || !strcmp(keys[k], "gpu_mem_mb"))
            plot_series(&b, runs, csv, n_runs, keys[k], k, "x1y2", &first);
    }
    mrcnn_plot_buf_printf(&b, "%s\n", first ? "set label 1 'no throughput or memory logged' at graph 0.5,0.5 center\nplot [0:1][0:1] -1 notitle\nunset label 1" : "");
    /* 4: fp16's dynamic loss scale (log2 steps) and the steps it skipped */
    if (fp16) {
        mrcnn_plot_buf_printf(&b, "set title 'fp16 loss scaling'\nset autoscale y\nset autoscale y2\n"
                                  "set ylabel 'loss scale (log scale)'\n"
                                  "set logscale y 2\nset y2label 'skipped steps (cumulative)'\n");
        first = 1;
        for (int k = 0; k < n_keys; k++) {
            if (!strcmp(keys[k], "loss_scale")) plot_series(&b, runs, csv, n_runs, keys[k], k, "x1y1", &first);
            if (!strcmp(keys[k], "skipped")) plot_series(&b, runs, csv, n_runs, keys[k], k, "x1y2", &first);
        }
        mrcnn_plot_buf_printf(&b, "%s\nunset logscale y\n", first ? "unset logscale y\nset label 1 'no loss scale logged' at graph 0.5,0.5 center\nplot [0:1][0:1] -1 notitle\nunset label 1" : "");
    }
    mrcnn_plot_buf_printf(&b, "unset multiplot\n");
    char base[1200];
    snprintf(base, sizeof base, "%s/%s", out_dir, stem);
    ok = mrcnn_plot_render(base, 1400, 900, b.s);
    mrcnn_plot_buf_free(&b);
out:
    for (int r = 0; r < n_runs; r++) free(runs[r].rows);
    free(runs);
    free(csv);
    return ok ? steps : 0;
}

void mrcnn_plot_run(const mrcnn_config *cfg, int at_end) {
    static double last_done = -1, last_cost = 0;
    const double t0 = mrcnn_time_now();
    if (!at_end && last_done >= 0 && t0 - last_done < 20 * last_cost) return;
    char dir[1100], config[512];
    snprintf(dir, sizeof dir, "%s/plots", cfg->output_dir);
    snprintf(config, sizeof config, "%s, %s, batch %d, base lr %g, %s, %d iterations", cfg->backbone_name,
             cfg->solver_precision, cfg->solver_ims_per_batch, cfg->solver_base_lr, cfg->solver_lr_scheduler,
             cfg->solver_max_iter);
    const char *runs[1] = {cfg->output_dir};
    if (mrcnn_plot_training(runs, 1, dir, config) > 0) mrcnn_info("training curves: %s/training.png", dir);
    last_done = mrcnn_time_now();
    last_cost = last_done - t0;
}
