/* Shape rules: the `shapes` text of a backend_ops.def entry, compiled once into a few
 * integers per argument, then checked against the tensor headers of each call
 * (backend_validate.c generates the wrapper that collects the arguments). The language:
 *
 *   rule    := clause { clause }     clauses are checked in the rule's order
 *   clause  := names spec [dtype]    `,` `->` `+=` between clauses are for the reader
 *   names   := name[?] { , name[?] } each a tensor argument of the entry; `?`: NULL is
 *                                    allowed (then nothing of it is checked or bound)
 *   spec    := any                   any shape
 *            | like name             exactly the shape of an earlier, non-optional name
 *            | ( dim { , dim } )     this rank, each extent:
 *   dim     := 7                       that integer
 *            | N                       a symbol: bound by its first occurrence in rule
 *                                      order, equal at every later one
 *            | N>0                     a symbol whose extent must be positive here
 *            | 2H                      an integer times a symbol (bound as extent / 2,
 *                                      which must divide)
 *            | ...                     (first only) any number of leading dimensions
 *            | *in                     (last only) one or more dimensions, their
 *                                      product a symbol
 *   dtype   := float | fp32 | int32  float (the default): fp32, fp16 or bf16
 *
 * Every tensor argument of the entry must appear exactly once (so none goes unchecked),
 * and every one must be on the backend's device, contiguous, with data. A rule that
 * breaks the grammar fails when it is compiled (mrcnn_backend_validate), naming the
 * entry, the rule and the column. Private to src/backend (and its tests). */
#ifndef MRCNN_SHAPE_RULE_H
#define MRCNN_SHAPE_RULE_H

#include <stdint.h>

#include "mrcnn/backend.h"

#define MRCNN_SHAPE_RULE_MAX_ARGS 12
#define MRCNN_SHAPE_RULE_MAX_SYMS 16

enum { SR_ANY, SR_LIKE, SR_DIMS };

typedef struct {
    int8_t sym;   // -1: the literal lit
    int8_t pos;   // N>0: the extent must be positive
    int64_t lit;  // the literal, or the symbol's coefficient
} mrcnn_shape_dim;

typedef struct {
    int8_t arg;      // index into the entry's tensor arguments
    int8_t optional; // NULL allowed
    int8_t kind;     // SR_ANY, SR_LIKE, SR_DIMS
    int8_t like;     // SR_LIKE: the argument whose shape this one has
    int8_t n_dims;   // SR_DIMS: the fixed dims (without ... or *sym)
    int8_t lead;     // SR_DIMS: a leading ...
    int8_t star;     // SR_DIMS: the symbol of a trailing *sym, else -1
    int8_t dtype;    // -1: a float dtype, else that mrcnn_dtype
    int16_t at, len; // the clause's text in the rule, for messages
    mrcnn_shape_dim dims[MRCNN_MAX_DIMS];
} mrcnn_shape_clause;

typedef struct {
    const char *op;   // the entry's name, for messages
    const char *text; // the rule
    const char *names[MRCNN_SHAPE_RULE_MAX_ARGS];
    char sym_names[MRCNN_SHAPE_RULE_MAX_SYMS][16];
    int n_args, n_syms, n_clauses;
    mrcnn_shape_clause c[MRCNN_SHAPE_RULE_MAX_ARGS];
} mrcnn_shape_rule;

/* Compiles text for the entry op whose tensor arguments are names[0..n_names) (in the
 * order the wrapper passes them); fails naming what is wrong. op, text and names must
 * outlive r. */
void mrcnn_shape_rule_compile(mrcnn_shape_rule *r, const char *op, const char *text, const char *const *names,
                              int n_names);
/* Checks the call's tensors ts (in names' order, NULL for an absent one) against r on
 * be's device; fails naming the op, the argument, its shape and the expected one, and
 * which symbol or extent disagreed. No allocation, no formatting unless it fails. */
void mrcnn_shape_rule_check(const mrcnn_shape_rule *r, const mrcnn_backend *be, const mrcnn_tensor *const *ts);

#endif
