/* `mrcnn config`: loads a config with overrides exactly as `mrcnn train` does and
 * prints the result, so a config can be checked before a job is queued. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "mrcnn/config.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: mrcnn config [--config FILE.yaml] [--set KEY=VALUE]...\n"
            "Loads FILE (with its _BASE_ chain) over the defaults, applies each --set in order,\n"
            "and prints every key. Exits 1 naming the file:line and key on an unknown key,\n"
            "a wrong type, length or range, or malformed YAML; 2 on a bad command line\n"
            "(an unknown argument, a --set that is not KEY=VALUE).\n");
}

int mrcnn_cmd_config(int argc, char **argv) {
    mrcnn_config cfg;
    mrcnn_config_defaults(&cfg);
    char err[1024];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            if (!mrcnn_config_try_load(&cfg, argv[++i], err, sizeof err)) {
                fprintf(stderr, "mrcnn config: %s\n", err);
                return 1;
            }
        } else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            if (!strchr(argv[i + 1], '=')) {
                fprintf(stderr, "mrcnn config: --set '%s' is not KEY=VALUE\n", argv[i + 1]);
                usage(stderr);
                return 2;
            }
            if (!mrcnn_config_try_set(&cfg, argv[++i], "--set", err, sizeof err)) {
                fprintf(stderr, "mrcnn config: %s\n", err);
                return 1;
            }
        } else {
            fprintf(stderr, "mrcnn config: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    char *dump = mrcnn_config_dump(&cfg);
    fputs(dump, stdout);
    free(dump);
    return 0;
}
