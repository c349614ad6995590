/* The comm watchdog: a thread that watches the one blocking collective wait the
 * main thread may be in. A collective that has not completed after the timeout
 * means a peer died or is stopped; MPI gives no error then (the others simply
 * wait), so the watchdog names the wait, then MPI_Abort(3) takes every rank down
 * (mrcnn_fatal_exit: if the abort itself hangs, an alarm ends this process with 3
 * and mpirun/srun end the rest). */
#include "mrcnn/dist.h"
#include "mrcnn/check.h"
#include "mrcnn/log.h"

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_t g_thread;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_running = 0;
static double g_timeout_s = 0;
static const char *g_what = NULL; // armed wait, NULL when none
static double g_since = 0;

static void *watchdog_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_mu);
    while (g_running) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec += 1;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g_cv, &g_mu, &ts);
        if (!g_running || !g_what) continue;
        double waited = mrcnn_time_now() - g_since;
        if (waited < g_timeout_s) continue;
        const char *what = g_what;
        pthread_mutex_unlock(&g_mu);
        char msg[512];
        snprintf(msg, sizeof msg,
                 "mrcnn error [rank %d] comm timeout: '%s' has not completed after %.1f s "
                 "(--comm-timeout %.1f): another rank died or hangs; aborting the job",
                 mrcnn_log_rank(), what, waited, g_timeout_s);
        /* The one fatal path (check.h): MPI_Abort with exit code 3, backed by an alarm
         * that ends this process with 3 if the abort itself hangs. */
        mrcnn_fatal_exit(MRCNN_EXIT_COMM_TIMEOUT, msg);
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

void mrcnn_watchdog_start(double timeout_s) {
    pthread_mutex_lock(&g_mu);
    g_timeout_s = timeout_s;
    int start = !g_running && timeout_s > 0;
    if (start) g_running = 1;
    pthread_mutex_unlock(&g_mu);
    if (start && pthread_create(&g_thread, NULL, watchdog_main, NULL) != 0) {
        g_running = 0;
        mrcnn_warn("could not start the comm watchdog thread; hangs will not time out");
    }
}

void mrcnn_watchdog_stop(void) {
    pthread_mutex_lock(&g_mu);
    int was = g_running;
    g_running = 0;
    g_what = NULL;
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
    if (was) pthread_join(g_thread, NULL);
}

void mrcnn_watchdog_arm(const char *what) {
    pthread_mutex_lock(&g_mu);
    g_what = what ? what : "collective";
    g_since = mrcnn_time_now();
    pthread_mutex_unlock(&g_mu);
}

void mrcnn_watchdog_disarm(void) {
    pthread_mutex_lock(&g_mu);
    g_what = NULL;
    pthread_mutex_unlock(&g_mu);
}
