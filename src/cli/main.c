/* `mrcnn <command>`: one binary, one file per subcommand (cmd_*.c). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const mrcnn_command k_commands[] = {
    /* name, entry, one-line summary: each cmd_*.c adds its row here */
    {"version", mrcnn_cmd_version, "print the version and the build configuration"},
    {"eval", mrcnn_cmd_eval, "COCO bbox/segm AP (pycocotools numbers) of a results JSON, or of a model over shards"},
    {"config", mrcnn_cmd_config, "check a config file and print it with overrides applied"},
    {"bench", mrcnn_cmd_bench, "benchmarks: scaling (measured over ranks, or --model for N GPUs)"},
    {"train", mrcnn_cmd_train, "train Mask R-CNN data-parallel over MPI ranks (CPU or CUDA + NCCL)"},
    {"predict", mrcnn_cmd_predict, "detections on JPEG/PNG files: detections.json and PNG overlays"},
    {"plot", mrcnn_cmd_plot, "training curves of a run, or of several overlaid (gnuplot PNGs)"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: mrcnn <command> [options]   (mrcnn <command> --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        fprintf(out, "  %-10s %s\n", k_commands[i].name, k_commands[i].summary);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        if (!strcmp(argv[1], k_commands[i].name)) return k_commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "mrcnn: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
