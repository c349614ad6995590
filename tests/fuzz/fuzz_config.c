/* YAML config (src/core/config.c): mrcnn_config_try_load of the input as a file, then
 * mrcnn_config_try_set of each line after a "#--set" line, as `--set KEY=VALUE` does.
 * The scratch folder holds base.yaml (a valid config) so `_BASE_: base.yaml` resolves, and
 * the input may name itself (cycles). Oracle: a config that loaded is dumped
 * (mrcnn_config_dump, what checkpoints store), the dump is loaded over the defaults and
 * dumped again, and the two dumps must be equal (the dump must be valid YAML that means
 * the same config). Set MRCNN_FUZZ_NO_ROUNDTRIP=1 to fuzz for crashes only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "mrcnn/config.h"

static const char k_base[] =
    "MODEL:\n  BACKBONE:\n    NAME: tiny\n  TINY:\n    CHANNELS: [16, 32, 64, 128]\n  ROI_HEADS:\n    NUM_CLASSES: 3\n"
    "SOLVER:\n  IMS_PER_BATCH: 2\n  STEPS: [150]\n  BASE_LR: 0.01\nINPUT:\n  MIN_SIZE_TRAIN: [128]\n";

static int g_roundtrip = 1;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_init();
    char p[600];
    fuzz_path(p, sizeof p, "base.yaml");
    fuzz_write_file(p, k_base, sizeof k_base - 1);
    const char *e = getenv("MRCNN_FUZZ_NO_ROUNDTRIP");
    g_roundtrip = !(e && e[0] == '1');
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[600], dump_path[600];
    if (!path[0]) {
        fuzz_path(path, sizeof path, "config.yaml");
        fuzz_path(dump_path, sizeof dump_path, "dump.yaml");
    }
    /* Split at "#--set\n": YAML before, one assignment a line after. */
    const char *marker = "#--set\n";
    size_t yaml_len = size;
    for (size_t i = 0; i + 7 <= size; i++)
        if (!memcmp(data + i, marker, 7)) {
            yaml_len = i;
            break;
        }
    fuzz_write_file(path, data, yaml_len);
    static mrcnn_config cfg;
    static char err[1024];
    static int loaded;
    mrcnn_config_defaults(&cfg);
    loaded = 0;
    FUZZ_RUN(loaded = mrcnn_config_try_load(&cfg, path, err, sizeof err));
    if (loaded) {
        const uint8_t *p = data + yaml_len, *end = data + size;
        if (yaml_len < size) p += 7;
        while (p < end) {
            const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
            size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
            char *line = malloc(len + 1);
            memcpy(line, p, len);
            line[len] = 0;
            FUZZ_RUN(mrcnn_config_try_set(&cfg, line, "--set", err, sizeof err));
            free(line);
            p += len + 1;
        }
    }
    if (loaded && g_roundtrip) {
        char *d1 = mrcnn_config_dump(&cfg);
        fuzz_write_file(dump_path, d1, strlen(d1));
        static mrcnn_config back;
        mrcnn_config_defaults(&back);
        static int ok;
        ok = 0;
        FUZZ_RUN(ok = mrcnn_config_try_load(&back, dump_path, err, sizeof err));
        if (!ok) fuzz_die("config: the dump of a loaded config does not load: %s\n--- dump ---\n%s", err, d1);
        char *d2 = mrcnn_config_dump(&back);
        if (strcmp(d1, d2)) {
            const char *a = d1, *b = d2;
            while (*a && *a == *b) a++, b++;
            while (a > d1 && a[-1] != '\n') a--, b--;
            fuzz_die("config: dump -> load -> dump changes the config at:\n  %.120s\nvs\n  %.120s", a, b);
        }
        free(d2);
        free(d1);
    }
    return 0;
}
