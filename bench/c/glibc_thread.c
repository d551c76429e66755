/* glibc_thread: written from the published description of glibc's
 * benchtests/bench-malloc-thread.c (as mimalloc-bench builds it, timing
 * output removed: daanx/mimalloc-bench bench/glibc-bench/
 * bench-malloc-thread.c). Same logic:
 *
 *   glibc_thread [THREADS] [SECONDS]
 *   (THREADS defaults to 1; mimalloc-bench "glibc-thread": <cpus>. The
 *    original always runs 2 s; SECONDS is ours, default 2.)
 *
 * Tables made once from rand() (unseeded, as in the original): 8000 block
 * sizes of 4 B - 32 KiB from an inverse-square distribution (computed in
 * float, as the original does) and 4096 slot numbers of a 1024-entry
 * working set. Each thread (the main thread itself when THREADS is 1; the
 * threads' working sets, arguments and handles are arrays on the main
 * thread's stack, as in the original) walks both tables in turn — each
 * walk starts at its second entry — and, until the alarm fires, frees the
 * block in the next slot, mallocs one of the next size there and writes
 * every byte of it (an int index, as the original's loop). The working sets are
 * left allocated, as in the original. Prints "N iterations" as the original
 * does; mimalloc-bench's relative time is 1e9 / N, printed for our harness
 * as `rtime SECONDS` (scaled to a 2 s run) with the peak RSS (`peak_kib`). */
#include "bench.h"
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/time.h>

#define WORKING_SET_SIZE 1024
#define MIN_ALLOCATION_SIZE 4
#define MAX_ALLOCATION_SIZE 32768
#define NUM_BLOCK_SIZES 8000
#define NUM_OFFSETS (WORKING_SET_SIZE * 4)

static unsigned int block_sizes[NUM_BLOCK_SIZES];
static unsigned int offsets[NUM_OFFSETS];
static volatile bool timeout;

/* Inverse square: (r (max^-1 - min^-1) + min^-1)^-1, in float. */
static unsigned int block_size(unsigned int rand_data) {
    const float exponent = -2;
    float min_pow = powf(MIN_ALLOCATION_SIZE, exponent + 1);
    float max_pow = powf(MAX_ALLOCATION_SIZE, exponent + 1);
    float r = (float)rand_data / RAND_MAX;
    return (unsigned int)powf((max_pow - min_pow) * r + min_pow, 1 / (exponent + 1));
}

static unsigned int next_of(unsigned int *state, unsigned int n) {
    unsigned int i = *state >= n - 1 ? 0 : *state + 1;
    *state = i;
    return i;
}

static void on_alarm(int sig) {
    (void)sig;
    timeout = true;
}

static size_t bench_loop(void **ws) {
    unsigned int offset_state = 0, block_state = 0;
    size_t iters = 0;
    while (!timeout) {
        unsigned int k = offsets[next_of(&offset_state, NUM_OFFSETS)];
        unsigned int n = block_sizes[next_of(&block_state, NUM_BLOCK_SIZES)];
        free(ws[k]);
        char *p = ws[k] = malloc(n);
        for (int i = 0; i < n; i++) p[i] = (char)i; /* touch it all (int i, as the original) */
        iters++;
    }
    return iters;
}

struct thread_args {
    size_t iters;
    void **working_set;
    long elapsed; /* the original's timing_t, unused once its timing is removed */
};

static void *bench_thread(void *arg) {
    struct thread_args *a = arg;
    a->iters = bench_loop(a->working_set);
    return NULL;
}

int main(int argc, char **argv) {
    size_t threads = 1;
    if (argc > 1) {
        long l = strtol(argv[1], NULL, 10);
        if (l <= 0) {
            fprintf(stderr, "%s: <num_threads> [seconds]\n", argv[0]);
            return 1;
        }
        threads = (size_t)l;
    }
    double seconds = argc > 2 ? atof(argv[2]) : 2.0;
    for (size_t i = 0; i < NUM_BLOCK_SIZES; i++) block_sizes[i] = block_size((unsigned int)rand());
    for (size_t i = 0; i < NUM_OFFSETS; i++) offsets[i] = (unsigned int)(rand() % WORKING_SET_SIZE);
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_handler = on_alarm;
    sigaction(SIGALRM, &act, NULL);
    struct itimerval it = {{0, 0}, {(long)seconds, (long)((seconds - (long)seconds) * 1e6)}};
    setitimer(ITIMER_REAL, &it, NULL);
    size_t iters = 0;
    if (threads == 1) {
        void *ws[WORKING_SET_SIZE];
        memset(ws, 0, sizeof ws);
        iters = bench_loop(ws);
    } else {
        /* on the stack, as the original's */
        struct thread_args args[threads];
        void *sets[threads][WORKING_SET_SIZE];
        pthread_t t[threads];
        memset(sets, 0, sizeof sets);
        for (size_t i = 0; i < threads; i++) {
            args[i].working_set = sets[i];
            pthread_create(&t[i], NULL, bench_thread, &args[i]);
        }
        for (size_t i = 0; i < threads; i++) {
            pthread_join(t[i], NULL);
            iters += args[i].iters;
        }
    }
    printf("%zu iterations\n", iters);
    printf("rtime %.4f\n", 1e9 / (double)iters * seconds / 2.0);
    report_peak();
    return 0;
}
