/* `mrcnn bench train` (bench_train.c), dispatched from cmd_bench.c. */
#ifndef MRCNN_BENCH_TRAIN_H
#define MRCNN_BENCH_TRAIN_H

/* argv[0] is "train". Returns the exit code. */
int bench_train_main(int argc, char **argv);

#endif
