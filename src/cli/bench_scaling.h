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
/* Writes x/y as a PNG line plot; returns 0 (with a warning) when it cannot. */
void bench_plot(const char *path, const double *x, const double *y, int n, const char *title);

#endif
