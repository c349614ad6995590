/* `mrcnn-prep <command>`: one binary, one file per subcommand. */
#include <stdio.h>
#include <string.h>

#include "prep.h"

static const prep_command k_commands[] = {
    {"coco", prep_cmd_coco, "convert a COCO instances JSON + image folder into HDF5 shards (MPI)"},
    {"shapes", prep_cmd_shapes, "generate a synthetic COCO-format dataset of shapes (no download)"},
    {"inspect", prep_cmd_inspect, "summarize and check a shard set; render an image with its masks"},
    {"export", prep_cmd_export, "write a shard set back out as a COCO instances JSON"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: mrcnn-prep <command> [options]   (mrcnn-prep <command> --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        fprintf(out, "  %-8s %s\n", k_commands[i].name, k_commands[i].summary);
}

int main(int argc, char **argv) {
    if (argc < 2 || prep_is_help(argv[1])) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        if (!strcmp(argv[1], k_commands[i].name)) return k_commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "mrcnn-prep: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
