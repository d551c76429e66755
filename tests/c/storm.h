/* The thread storm shared by lc_thread_storm.c (its memory afterwards) and
 * inv_storm_cost.c (its cost): argv[1] (5,000) short threads in waves of
 * argv[2] (20) alive at once (a barrier), each allocating 40 blocks of 64 B
 * to 1 MiB written in their first argv[3] (16) KiB and last byte, leaving
 * 4 small blocks (of different size classes) for a later thread to free —
 * so an exited thread's heap still has objects another thread frees — and
 * freeing the rest. */
#ifndef STORM_H
#define STORM_H

#include "issue_common.h"

#define WAVE_MAX 256
#define SLOTS 64
#define LEFT 4

static _Atomic(void *) slots[SLOTS];
static _Atomic unsigned long seq;
static pthread_barrier_t bar;
static size_t touch = 16 * KiB;

static void *storm_worker(void *arg) {
    uint64_t seed = 0x632BE59BD9B4E019ULL * ((uintptr_t)arg + 1);
    void *v[40];
    for (int i = 0; i < 40; i++) {
        size_t n = rng_size(&seed, 64, MiB);
        char *p = malloc(n);
        CHECK(p);
        memset(p, i, n < touch ? n : touch);
        p[n - 1] = 1;
        keep(p);
        v[i] = p;
    }
    static const size_t left_sizes[LEFT] = {24, 200, 1000, 6000};
    for (int k = 0; k < LEFT; k++) {
        char *mine = malloc(left_sizes[k]);
        CHECK(mine);
        memset(mine, k, left_sizes[k]);
        unsigned long s = seq++ % SLOTS;
        free(atomic_exchange(&slots[s], (void *)mine));
    }
    pthread_barrier_wait(&bar); /* the whole wave alive at once */
    for (int i = 0; i < 40; i++) free(v[i]);
    return NULL;
}

/* Reads the storm's arguments into *n and *wave (and the bytes touched)
 * and readies the barrier. */
static void storm_args(int argc, char **argv, int *n, int *wave) {
    *n = argc > 1 ? atoi(argv[1]) : 5000;
    *wave = argc > 2 ? atoi(argv[2]) : 20;
    if (argc > 3) touch = (size_t)atol(argv[3]) * KiB;
    CHECK(*wave > 0 && *wave <= WAVE_MAX && *n % *wave == 0);
    pthread_barrier_init(&bar, NULL, (unsigned)*wave);
}

/* Runs the storm: n threads, wave at a time. */
static void storm_run(int n, int wave) {
    for (int done = 0; done < n; done += wave) {
        pthread_t t[WAVE_MAX];
        for (int i = 0; i < wave; i++)
            CHECK(pthread_create(&t[i], NULL, storm_worker, (void *)(uintptr_t)(done + i)) == 0);
        for (int i = 0; i < wave; i++) CHECK(pthread_join(t[i], NULL) == 0);
    }
}

#endif
