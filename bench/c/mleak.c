/* mleak: written from the published description of mleak (Daan Leijen's
 * test in mimalloc-bench: daanx/mimalloc-bench bench/mleak/mleak.c). Same
 * logic and argument:
 *
 *   mleak [N]
 *   (default 10; mimalloc-bench "mleak10": 5, "mleak100": 50)
 *
 * N × 100 times, 10 threads are started and joined (their handles in a
 * calloc'd array, also memset to zero as the original does, freed after). Each thread callocs an object of 16 words
 * and swaps it into one of 1000 shared transfer slots picked by rand()
 * (seeded 0x1ce4e5b9), freeing what was there — usually an object of a
 * thread that has already exited. At the end the slots are freed. An
 * allocator that keeps a heap, a cache or pages per exited thread "leaks"
 * here. Prints the thread and iteration counts as the original does, and
 * the peak RSS (`peak_kib`) for our harness, which times the process. */
#include "bench.h"
#include <stdatomic.h>

#define THREADS 10
#define BASEITER 100
#define ALLOC_WORDS 16
#define TRANSFERS (THREADS * BASEITER)

static int iter = 10;
static _Atomic(void *) transfer[TRANSFERS];

static void *leak(void *arg) {
    (void)arg;
    intptr_t *p = calloc(ALLOC_WORDS, sizeof(void *));
    int i = rand() % TRANSFERS;
    void *q = atomic_exchange(&transfer[i], (void *)p);
    free(q);
    return NULL;
}

static void run_threads(size_t n) {
    pthread_t *t = calloc(n, sizeof(pthread_t));
    memset(t, 0, sizeof(pthread_t) * n); /* as the original, after calloc */
    for (uintptr_t i = 0; i < n; i++) pthread_create(&t[i], NULL, leak, (void *)i);
    for (size_t i = 0; i < n; i++) pthread_join(t[i], NULL);
    free(t);
}

int main(int argc, char **argv) {
    if (argc >= 2) {
        long n = strtol(argv[1], NULL, 10);
        if (n > 0) iter = (int)n;
    }
    printf("Using %d threads with %d*%d iterations\n", THREADS, BASEITER, iter);
    srand(0x1ce4e5b9);
    for (int n = 0; n < iter * BASEITER; n++) run_threads(THREADS);
    for (int i = 0; i < TRANSFERS; i++) free(atomic_load(&transfer[i]));
    report_peak();
    return 0;
}
