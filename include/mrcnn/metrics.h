/* Training metrics on rank 0: the periodic log line, metrics.json (one JSON object
 * per logged step, appended), TensorBoard event files (written here in C: TFRecord
 * framing with masked CRC32C around hand-encoded Event protos). The pictures drawn
 * from metrics.json: plot.h. */
#ifndef MRCNN_METRICS_H
#define MRCNN_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mrcnn/config.h"
#include "mrcnn/fs.h" // mrcnn_mkdir_p, which the training files take from here

#ifdef __cplusplus
extern "C" {
#endif

#define MRCNN_MAX_LOSS_TERMS 16

/* ---- TensorBoard event file ---- */
typedef struct mrcnn_tb_writer {
    FILE *f;
    char path[1024];
} mrcnn_tb_writer;

/* Creates logdir/events.out.tfevents.<unix time>.<host>.<pid> with the
 * file_version record. Returns 0 and warns when the file cannot be created. */
int mrcnn_tb_open(mrcnn_tb_writer *w, const char *logdir);
void mrcnn_tb_scalar(mrcnn_tb_writer *w, const char *tag, int64_t step, float value, double wall_time);
void mrcnn_tb_flush(mrcnn_tb_writer *w);
void mrcnn_tb_close(mrcnn_tb_writer *w);
/* CRC-32C (Castagnoli), and TFRecord's masked form. */
uint32_t mrcnn_crc32c(const void *data, size_t n);
uint32_t mrcnn_crc32c_masked(const void *data, size_t n);

/* ---- one logged step ---- */
typedef struct mrcnn_step_metrics {
    int64_t step;       // optimizer steps done
    int64_t max_step;
    int n_losses;
    const char *const *loss_names; // (n_losses)
    double losses[MRCNN_MAX_LOSS_TERMS]; // averaged over ranks and the log window
    double total_loss;
    double lr;
    double img_per_s;   // global images per second
    double data_ms;     // mean loader wait per step
    double step_ms;     // mean wall time per step
    double mem_mb;      // resident memory of rank 0 (host RSS)
    double gpu_mem_mb;  // device memory in use on rank 0's GPU (0: CPU run)
    double eta_s;
    double loss_scale;
    int64_t skipped;    // steps skipped (non-finite), in total
    double reads_per_step; // device -> host reads the host waited for, per step of the window
    double syncs_per_step; // host waits for the device (reads included), per step (mrcnn_backend_stats)
} mrcnn_step_metrics;

typedef struct mrcnn_metrics {
    int enabled;        // rank 0
    char json_path[1024];
    mrcnn_tb_writer tb;
} mrcnn_metrics;

/* On rank 0 (enabled): output_dir/metrics.json (appended: a resumed run continues
 * it) and an event file in output_dir. */
void mrcnn_metrics_open(mrcnn_metrics *m, const char *output_dir, int enabled);
/* Prints the log line, appends the JSON line and the TensorBoard scalars. */
void mrcnn_metrics_log(mrcnn_metrics *m, const mrcnn_step_metrics *s);
/* One periodic evaluation (TEST.EVAL_PERIOD) of the weights after `step`: COCO AP
 * (IoU .50:.95) and AP50 as pycocotools gives them (0..1). */
typedef struct mrcnn_eval_metrics {
    int64_t step;
    double bbox_ap, bbox_ap50, segm_ap, segm_ap50;
    int64_t images;
    double seconds; // inference + evaluation
} mrcnn_eval_metrics;
/* Prints the eval line, appends {"step", "eval/bbox_AP", "eval/bbox_AP50",
 * "eval/segm_AP", "eval/segm_AP50", ...} to metrics.json and the same scalars to the
 * event file. */
void mrcnn_metrics_log_eval(mrcnn_metrics *m, const mrcnn_eval_metrics *e);
void mrcnn_metrics_close(mrcnn_metrics *m);
/* Resident set size of this process in MiB (/proc/self/statm). */
double mrcnn_rss_mb(void);

/* Training curves drawn by gnuplot (src/train/plot.c on mrcnn/plot.h). */
/* Reads each run_dirs[i]/metrics.json and draws out_dir/training.png (+ .csv per run,
 * .gp): total and each loss term on a log axis, the learning rate, img/s and memory,
 * and, for fp16 runs, the loss scale and skipped steps. config: a one-line description
 * for the title (NULL: read from the run's earlier plots/training.csv, if any).
 * Returns the number of training steps drawn (0: nothing to plot or plots off). */
int mrcnn_plot_training(const char *const *run_dirs, int n_runs, const char *out_dir, const char *config);

/* The trainer's call (rank 0, at each checkpoint and at the end): OUTPUT_DIR/plots/
 * training.png of OUTPUT_DIR/metrics.json, titled with the config's main settings.
 * At a checkpoint it is skipped when the last drawing is more recent than 20 times
 * what that drawing took (checkpoints seconds apart would spend more than 5% of the
 * run drawing); at_end always draws. */
void mrcnn_plot_run(const mrcnn_config *cfg, int at_end);


#ifdef __cplusplus
}
#endif
#endif
