/* The non-blocking NCCL start-up (src/dist/nccl_start.c) driven by a stand-in
 * communicator and a fake clock (no GPU, no NCCL, no real sleep): an init call that
 * returns ncclInProgress is no error; in progress then ready; in progress then failed
 * (aborted); in progress for ever (a peer never joins): a timeout that aborts and names
 * the rank, the device and the seconds waited; the timeout's setting.
 * MRCNN_NCCL_START_OLD=1 drives the same cases through 0963c0b's logic (an in-progress
 * init is an error, the poll has no timeout, nothing is aborted): the test must then
 * fail, which is its self-check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "mrcnn/nccl_start.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NCCL_INTERNAL_ERROR = 3, NCCL_REMOTE_ERROR = 6, FOREVER = -1 };

/* The stand-in: poll i returns seq[i] as the communicator's state (the last one
 * repeats; FOREVER: in progress at every poll); the clock moves only in pause. */
typedef struct {
    int seq[16], n_seq;
    int poll_result; // what ncclCommGetAsyncError itself returns
    int polls, pauses, aborts;
    double clock, step_s;
} fake;

static int fk_poll(void *ctx, int *state) {
    fake *f = ctx;
    /* 0963c0b's loop has no timeout: a stand-in that never gets ready ends the test
     * instead of hanging it. */
    if (f->polls > 1000000) fail_msg("still polling after %d polls: the wait has no timeout", f->polls);
    const int i = f->polls < f->n_seq ? f->polls : f->n_seq - 1;
    f->polls++;
    *state = f->seq[i] == FOREVER ? MRCNN_NCCL_IN_PROGRESS : f->seq[i];
    return f->poll_result;
}
static double fk_now(void *ctx) { return ((fake *)ctx)->clock; }
static void fk_pause(void *ctx) {
    fake *f = ctx;
    f->pauses++;
    f->clock += f->step_s;
}
static void fk_abort(void *ctx) { ((fake *)ctx)->aborts++; }

/* 0963c0b's start-up: MRCNN_CHECK_NCCL(init) (anything but ncclSuccess stops the run),
 * then poll while in progress, without a timeout, and MRCNN_CHECK_NCCL(state). */
static mrcnn_nccl_start_result old_wait(const mrcnn_nccl_start *s, int init) {
    mrcnn_nccl_start_result r = {.status = MRCNN_NCCL_START_OK, .code = init};
    if (init != MRCNN_NCCL_SUCCESS) {
        r.status = MRCNN_NCCL_START_FAILED;
        r.stage = "ncclCommInitRankConfig";
        return r;
    }
    int state = MRCNN_NCCL_IN_PROGRESS;
    while (state == MRCNN_NCCL_IN_PROGRESS) {
        const int pr = s->poll(s->ctx, &state);
        r.polls++;
        if (pr != MRCNN_NCCL_SUCCESS) {
            r.status = MRCNN_NCCL_START_FAILED;
            r.code = pr;
            return r;
        }
        if (state == MRCNN_NCCL_IN_PROGRESS) s->pause(s->ctx);
    }
    if (state != MRCNN_NCCL_SUCCESS) {
        r.status = MRCNN_NCCL_START_FAILED;
        r.code = state;
    }
    return r;
}

static mrcnn_nccl_start_result run(fake *f, int init, double timeout_s) {
    const mrcnn_nccl_start s = {.poll = fk_poll, .now = fk_now, .pause = fk_pause, .abort = fk_abort, .ctx = f,
                                .timeout_s = timeout_s};
    const char *old = getenv("MRCNN_NCCL_START_OLD");
    return old && atoi(old) ? old_wait(&s, init) : mrcnn_nccl_start_wait(&s, init);
}

static fake make(double step_s, int n, const int *seq) {
    fake f;
    memset(&f, 0, sizeof f);
    f.step_s = step_s;
    f.n_seq = n;
    memcpy(f.seq, seq, (size_t)n * sizeof *seq);
    return f;
}

/* ncclCommInitRankConfig returns ncclInProgress (what a non-blocking init returns):
 * in progress for 5 polls, then ready. */
static void test_in_progress_then_ready(void **state) {
    const int P = MRCNN_NCCL_IN_PROGRESS;
    fake f = make(0.001, 6, (int[]){P, P, P, P, P, MRCNN_NCCL_SUCCESS});
    mrcnn_nccl_start_result r = run(&f, MRCNN_NCCL_IN_PROGRESS, 300);
    assert_int_equal(r.status, MRCNN_NCCL_START_OK);
    assert_int_equal(f.polls, 6);
    assert_int_equal(f.pauses, 5);
    assert_int_equal(f.aborts, 0);
    /* an init that already finished: one poll confirms it */
    f = make(0.001, 1, (int[]){MRCNN_NCCL_SUCCESS});
    r = run(&f, MRCNN_NCCL_SUCCESS, 300);
    assert_int_equal(r.status, MRCNN_NCCL_START_OK);
    assert_int_equal(f.aborts, 0);
}

/* In progress, then the communicator reports an error: failed, aborted, NCCL's code. */
static void test_in_progress_then_error(void **state) {
    fake f = make(0.001, 2, (int[]){MRCNN_NCCL_IN_PROGRESS, NCCL_REMOTE_ERROR});
    mrcnn_nccl_start_result r = run(&f, MRCNN_NCCL_IN_PROGRESS, 300);
    assert_int_equal(r.status, MRCNN_NCCL_START_FAILED);
    assert_int_equal(r.code, NCCL_REMOTE_ERROR);
    assert_int_equal(f.polls, 2);
    assert_int_equal(f.aborts, 1);
    char msg[512];
    mrcnn_nccl_start_describe(&r, 3, 1, 300, "remote process exited or there was a network error", "peer 2 closed",
                              msg, sizeof msg);
    printf("error: %s\n", msg);
    assert_non_null(strstr(msg, "rank 3, device 1"));
    assert_non_null(strstr(msg, "network error (peer 2 closed)"));
    /* the init call itself failing: no communicator, nothing polled or aborted */
    f = make(0.001, 1, (int[]){MRCNN_NCCL_SUCCESS});
    r = run(&f, NCCL_INTERNAL_ERROR, 300);
    assert_int_equal(r.status, MRCNN_NCCL_START_FAILED);
    assert_int_equal(r.code, NCCL_INTERNAL_ERROR);
    assert_int_equal(f.polls, 0);
    assert_int_equal(f.aborts, 0);
    /* the poll call failing: failed with its code, the communicator aborted */
    f = make(0.001, 1, (int[]){MRCNN_NCCL_IN_PROGRESS});
    f.poll_result = NCCL_INTERNAL_ERROR;
    r = run(&f, MRCNN_NCCL_IN_PROGRESS, 300);
    assert_int_equal(r.status, MRCNN_NCCL_START_FAILED);
    assert_int_equal(r.code, NCCL_INTERNAL_ERROR);
    assert_int_equal(f.aborts, 1);
}

/* A peer that never joins: in progress for ever. The fake clock moves 0.25 s a pause:
 * the wait ends at the first poll past the timeout, aborts, and says so. */
static void test_in_progress_forever_times_out(void **state) {
    /* an init that said ncclSuccess but whose communicator never gets ready (2 s) */
    fake f = make(0.25, 1, (int[]){FOREVER});
    mrcnn_nccl_start_result r = run(&f, MRCNN_NCCL_SUCCESS, 2);
    assert_int_equal(r.status, MRCNN_NCCL_START_TIMEOUT);
    assert_int_equal(f.polls, 10);
    assert_int_equal(f.aborts, 1);
    /* the usual start: in progress from the init call on (300 s) */
    f = make(0.25, 1, (int[]){FOREVER});
    r = run(&f, MRCNN_NCCL_IN_PROGRESS, 300);
    assert_int_equal(r.status, MRCNN_NCCL_START_TIMEOUT);
    assert_int_equal(f.aborts, 1);
    assert_true(r.waited_s > 300 && r.waited_s <= 300.25);
    assert_int_equal(f.polls, 1202); // t = 0, 0.25, ..., 300.25
    char msg[512];
    mrcnn_nccl_start_describe(&r, 1, 5, 300, "unused", NULL, msg, sizeof msg);
    printf("timeout: %s\n", msg);
    assert_non_null(strstr(msg, "rank 1, device 5"));
    assert_non_null(strstr(msg, "after 300.2 s"));
    assert_non_null(strstr(msg, "MRCNN_NCCL_INIT_TIMEOUT"));
    assert_non_null(strstr(msg, "aborted"));
}

static void test_timeout_setting(void **state) {
    double s = -1;
    assert_true(mrcnn_nccl_start_timeout(NULL, &s));
    assert_true(s == MRCNN_NCCL_INIT_TIMEOUT_DEFAULT);
    assert_true(mrcnn_nccl_start_timeout("", &s));
    assert_true(s == MRCNN_NCCL_INIT_TIMEOUT_DEFAULT);
    assert_true(mrcnn_nccl_start_timeout("12.5", &s));
    assert_true(s == 12.5);
    const char *bad[] = {"0", "-3", "abc", "5s", "nan", "inf"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (mrcnn_nccl_start_timeout(bad[i], &s)) fail_msg("MRCNN_NCCL_INIT_TIMEOUT='%s' accepted", bad[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_progress_then_ready),
        cmocka_unit_test(test_in_progress_then_error),
        cmocka_unit_test(test_in_progress_forever_times_out),
        cmocka_unit_test(test_timeout_setting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
