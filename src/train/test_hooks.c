/* Hooks that only tests switch on, through the environment; unset, each returns at once.
 *
 * MRCNN_TEST_HOLD_AT_STEP=N: the ranks finishing step N wait, before they compare their
 * preemption flags, until SIGUSR1 or SIGTERM has arrived or, with MRCNN_TEST_HOLD_UNTIL=FILE,
 * until FILE exists. A test acts on the job (signals it, kills a host) once it holds, so
 * the job cannot end by itself first, on a machine of any speed (a tiny step takes ~15 ms:
 * a run of 60 steps could finish before a signal sent after step 3 got there). A run
 * resumed past step N never holds; one that redoes step N after FILE exists goes on. */
#include "mrcnn/train.h"
#include "mrcnn/log.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int released(const char *file) { return mrcnn_signals_pending() || (file && access(file, F_OK) == 0); }

void mrcnn_signals_test_hold(int64_t step) {
    static long long hold_at = -2; // -2: not read yet; -1: off
    if (hold_at == -2) {
        const char *s = getenv("MRCNN_TEST_HOLD_AT_STEP");
        hold_at = s && *s ? strtoll(s, NULL, 10) : -1;
    }
    if (hold_at < 0 || step != hold_at) return;
    const char *file = getenv("MRCNN_TEST_HOLD_UNTIL");
    if (file && !*file) file = NULL;
    if (released(file)) return;
    mrcnn_info("test hold (MRCNN_TEST_HOLD_AT_STEP): step %lld waits for %s%s", (long long)step,
               file ? "a preemption signal or " : "a preemption signal", file ? file : "");
    /* Bounded, so a test that never releases it ends on the job's own limits, not here. */
    const struct timespec tick = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 60 * 100 && !released(file); i++) nanosleep(&tick, NULL);
    if (!released(file)) mrcnn_warn("test hold: not released within 60 s; going on");
}
