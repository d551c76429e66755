/* glibc's benchtests/bench-malloc-thread (as mimalloc-bench runs it,
 * "glibc-thread N"), written here from its description: each thread keeps a
 * working set of 1024 blocks and, until the time is up, replaces the block
 * at a random slot with a new one of 4 B - 32 KiB drawn from an
 * inverse-square distribution (mostly small, a long tail), writing every
 * byte of it. Sizes and slots come from tables made once from a fixed seed
 * (8000 sizes, 4096 slots), walked in turn. Reports the iterations and, as
 * mimalloc-bench does, the relative time 1e9 / iterations on a line
 * `rtime SECONDS` our harness reads.
 *
 *   glibc_thread [THREADS] [SECONDS] */
#include "bench.h"
#include <math.h>
#include <signal.h>

#define WORKING_SET 1024
#define MIN_SIZE 4
#define MAX_SIZE 32768
#define NUM_SIZES 8000
#define NUM_OFFSETS (WORKING_SET * 4)

static unsigned sizes[NUM_SIZES];
static unsigned offsets[NUM_OFFSETS];
static volatile sig_atomic_t timeout;

/* Inverse square between MIN_SIZE and MAX_SIZE: x = (r (b^-1 - a^-1) + a^-1)^-1. */
static unsigned block_size(double r) {
    double a = 1.0 / MIN_SIZE, b = 1.0 / MAX_SIZE;
    return (unsigned)(1.0 / ((b - a) * r + a));
}

static void on_alarm(int sig) {
    (void)sig;
    timeout = 1;
}

static void *run(void *arg) {
    long *iters = arg;
    void *ws[WORKING_SET] = {0};
    unsigned size_at = 0, slot_at = 0;
    long n = 0;
    while (!timeout) {
        unsigned k = offsets[slot_at];
        slot_at = slot_at + 1 < NUM_OFFSETS ? slot_at + 1 : 0;
        unsigned sz = sizes[size_at];
        size_at = size_at + 1 < NUM_SIZES ? size_at + 1 : 0;
        free(ws[k]);
        char *p = ws[k] = xmalloc(sz);
        for (unsigned i = 0; i < sz; i++) p[i] = (char)i; /* touch it all */
        n++;
    }
    for (int k = 0; k < WORKING_SET; k++) free(ws[k]);
    *iters = n;
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    double seconds = argc > 2 ? atof(argv[2]) : 2.0;
    if (threads < 1 || threads > 64) threads = 1;
    uint64_t s = 88;
    for (int i = 0; i < NUM_SIZES; i++) sizes[i] = block_size((rng_next(&s) >> 11) * (1.0 / 9007199254740992.0));
    for (int i = 0; i < NUM_OFFSETS; i++) offsets[i] = (unsigned)(rng_next(&s) % WORKING_SET);
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_handler = on_alarm;
    sigaction(SIGALRM, &act, NULL);
    struct itimerval it = {{0, 0}, {(long)seconds, (long)((seconds - (long)seconds) * 1e6)}};
    setitimer(ITIMER_REAL, &it, NULL);
    pthread_t t[64];
    long iters[64] = {0};
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, run, &iters[i]);
    long total = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        total += iters[i];
    }
    printf("iterations %ld\n", total);
    printf("rtime %.4f\n", 1e9 / (double)total * seconds / 2.0);
    report_peak();
    return 0;
}
