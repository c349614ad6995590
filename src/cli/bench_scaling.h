/* `mrcnn bench scaling`: the measured runs (bench_scaling.c), the all-reduce probe the
 * runs launch under MPI (bench_probe.c), and the model (cmd_bench.c). */
#ifndef MRCNN_BENCH_SCALING_H
#define MRCNN_BENCH_SCALING_H

/* Measured weak scaling over rank counts through a launcher (mpirun or srun). */
int bench_scaling_measure(int argc, char **argv);
/* One rank of the probe: all-reduce time of the trainer's gradient buckets, alone and
 * behind a synthetic backward. Runs under MPI. */
int bench_scaling_probe(int argc, char **argv);

/* "1,2,4" or "1-3" into up to cap positive ints; 0 on a malformed list. */
int bench_parse_int_list(const char *s, int *out, int cap);
/* base.png (+ base_plot.csv, the plotted series, and base.gp): img/s and weak-scaling efficiency against x (ranks or GPUs)
 * with the ideal line; modelled points are drawn open and dashed, measured ones filled.
 * Returns 0 when no picture was written (plots off, or a write failed). */
int bench_plot_scaling(const char *base, const char *title, const char *xlabel, const double *x,
                       const double *img_s, const double *eff, int n, int modelled);

#endif
