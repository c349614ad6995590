/* Shared pieces of the libFuzzer harnesses (tests/fuzz/README.md).
 *
 * Failures: the project's check family calls a fail handler that normally prints and
 * exits; here it longjmps back into the harness (FUZZ_RUN), so a clean rejection of a
 * bad input is not a crash. What the rejected call had allocated or opened (malloc'ed
 * memory, FILE*, DIR*, file descriptors, HDF5 ids) is released by the trackers below:
 * the library is linked with those calls renamed to fuzz_track_* (tracked.syms), so
 * the rejection path neither leaks nor runs out of descriptors.
 *
 * A failure is NOT a clean rejection (the harness aborts, libFuzzer reports a crash) when
 *  - it comes from a precondition that readers promise to check first (fuzz_fatal_sites,
 *    e.g. "rle.c:" for the rasterizer: a loader let a bad number through), or
 *  - it happens inside an OpenMP parallel region (a longjmp out of it is undefined). */
#ifndef MRCNN_FUZZ_COMMON_H
#define MRCNN_FUZZ_COMMON_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

extern jmp_buf fuzz_jmp;
extern char fuzz_msg[2048]; // the last failure's message

/* MPI_Init (singleton), the fail handler, HDF5 error printing off, a scratch folder. */
void fuzz_init(void);
/* The scratch folder of this process (under $MRCNN_FUZZ_TMP, else /dev/shm), removed at exit. */
const char *fuzz_tmpdir(void);
/* tmpdir/name into buf. */
void fuzz_path(char *buf, size_t len, const char *name);
void fuzz_write_file(const char *path, const void *data, size_t len);
/* NULL-terminated list of substrings of a failure message ("rle.c:") that mark a
 * precondition failure: those abort instead of counting as a rejection. */
void fuzz_set_fatal_sites(const char *const *sites);
/* Prints and aborts (a finding): for the harnesses' own oracles. */
_Noreturn void fuzz_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void fuzz_begin(void);
void fuzz_end_ok(void);
void fuzz_end_failed(void);
/* Runs body; 1 when it completed, 0 when it failed through the check family (everything
 * it had allocated or opened is released). Locals the body sets and the caller reads
 * afterwards must be static or volatile. */
#define FUZZ_RUN(body)                                   \
    __extension__({                                      \
        int fz_ok_ = 0;                                  \
        fuzz_begin();                                    \
        if (setjmp(fuzz_jmp) == 0) {                     \
            body;                                        \
            fuzz_end_ok();                               \
            fz_ok_ = 1;                                  \
        } else {                                         \
            fuzz_end_failed();                           \
        }                                                \
        fz_ok_;                                          \
    })

/* A little reader over the fuzz input (the structure-aware targets). */
typedef struct {
    const uint8_t *p;
    size_t n;
} fuzz_bytes;
static inline int fuzz_more(const fuzz_bytes *b) { return b->n > 0; }
static inline uint8_t fuzz_u8(fuzz_bytes *b) {
    if (!b->n) return 0;
    b->n--;
    return *b->p++;
}
static inline uint16_t fuzz_u16(fuzz_bytes *b) { return (uint16_t)(fuzz_u8(b) | fuzz_u8(b) << 8); }
static inline uint32_t fuzz_u32(fuzz_bytes *b) { return (uint32_t)fuzz_u16(b) | (uint32_t)fuzz_u16(b) << 16; }
static inline uint64_t fuzz_u64(fuzz_bytes *b) { return (uint64_t)fuzz_u32(b) | (uint64_t)fuzz_u32(b) << 32; }

#endif
