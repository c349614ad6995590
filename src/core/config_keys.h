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
    /* What a value may be (checked by config.c whenever one is set): */
    double min, max;      // numbers, and each item of a list: in [min, max], or (min, max] with min_open
    int min_open;
    int len_min, len_max; // lists: the number of items
    int empty_ok;         // lists: [] is allowed too (e.g. "no fixed size")
    const char *choices;  // strings: the allowed values, '|'-separated; NULL: any
} mrcnn_config_key;

extern const mrcnn_config_key mrcnn_config_keys[];
extern const int mrcnn_config_n_keys;

#endif
