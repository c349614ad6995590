/* Preemption: Slurm sends SIGUSR1 (--signal=USR1@120) or SIGTERM before it kills a
 * job. The handler only records the signal; the trainer finishes the step in
 * flight, checkpoints, and exits with MRCNN_EXIT_REQUEUE. `mrcnn train` installs the
 * handlers as its very first statement, so a signal during start-up is not lost. */
#include "mrcnn/train.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t g_pending = 0;

static void on_signal(int sig) { g_pending = sig; }

void mrcnn_signals_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    /* A file size limit (ulimit -f) makes a write fail with EFBIG, reported as an error
     * naming the file, instead of killing the process (SIGXFSZ's default action). */
    signal(SIGXFSZ, SIG_IGN);
}

int mrcnn_signals_pending(void) { return (int)g_pending; }
