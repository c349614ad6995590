/* Private to src/core/config*.c: the YAML reader of config files (config_yaml.c), apart
 * from the schema that gives the keys their meaning (config.c, config_keys.c). */
#ifndef MRCNN_CONFIG_YAML_H
#define MRCNN_CONFIG_YAML_H

#include <stddef.h>

#define CFG_KEY_MAX 256 // bytes of a dotted key with its terminator

/* One value the file sets: key dotted (`SOLVER: {BASE_LR: x}` gives SOLVER.BASE_LR), text
 * a scalar, or text NULL and items[0, n) a list of scalars; where is "file:line".
 * Returns 1, or 0 with the error (naming where) in err. */
typedef int (*cfg_yaml_set_fn)(void *ctx, const char *key, const char *text, char items[][64], int n,
                               const char *where, char *err, size_t err_len);

/* Reads the YAML file at path (and the files its _BASE_ keys name, first) and calls set
 * once per value, aliases and merge keys expanded. Returns 1, or 0 with the error (naming
 * file:line) in err. */
int cfg_yaml_load(const char *path, cfg_yaml_set_fn set, void *ctx, char *err, size_t err_len);

#endif
