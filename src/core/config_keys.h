/* Private to src/core/config*.c: the key table behind mrcnn_config. */
#ifndef MRCNN_CONFIG_KEYS_H
#define MRCNN_CONFIG_KEYS_H

#include "mrcnn/config.h"

typedef enum { CFG_INT, CFG_INT64, CFG_FLOAT, CFG_BOOL, CFG_STR, CFG_INT_LIST, CFG_FLOAT_LIST } mrcnn_config_type;

typedef struct mrcnn_config_key {
    const char *key;
    mrcnn_config_type type;
    size_t offset;
    size_t size; // strings only: capacity including the terminator
    const char *def;
} mrcnn_config_key;

extern const mrcnn_config_key mrcnn_config_keys[];
extern const int mrcnn_config_n_keys;

#endif
