/* MRCNN_TEST_HOOK, written before the definition of an extern function (or before a
 * declaration of it), says: nothing in the library, the programs or the benchmarks calls
 * this; tests, fuzz targets or a person debugging do, and it stays in the library on
 * purpose, because it injects a fault or exposes state that only its own file can reach
 * (a file's statics), or because the fuzz targets, which link the library alone, need it.
 * Test scaffolding that needs neither lives in tests/common instead.
 *
 * The structure check (tests/common/structure_check.py) accepts exactly these as
 * functions without a caller outside tests/, and fails on a marked function that code
 * outside tests/ calls (the marker is stale) or that no test names. Expands to nothing. */
#ifndef MRCNN_TEST_HOOKS_H
#define MRCNN_TEST_HOOKS_H

#define MRCNN_TEST_HOOK

#endif
