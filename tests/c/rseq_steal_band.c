/* The page-granular band (bench/c/page_band.c) with its two threads pinned
 * to two CPUs, so that every run has the cross-CPU traffic the band has on
 * a quiet machine: each thread keeps 64 live blocks of log-uniform random
 * size in [8 KiB, 256 KiB]; each operation frees one — a quarter handed to
 * the other thread, which frees it there — and allocates one in its place,
 * touching its first and last byte. A miss on one CPU's class lists is
 * then served by blocks the other CPU's lists hold (tests/rseq_steal.rs).
 *
 *   rseq_steal_band OPS     prints "rseq_steal_band ok OPS", or "skip" with
 *                           fewer than two CPUs to run on */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"

#define THREADS 2
#define LIVE 64
#define LO (8 << 10)
#define HI (256 << 10)

static struct ring rings[THREADS];
static long ops_per_thread;
static int cpus[THREADS];


/* About log-uniform in [LO, HI): a power-of-two octave, then uniform in
 * it (no libm). */
static size_t size_of_draw(uint64_t *s) {
    size_t base = (size_t)LO << (next(s) % 5);
    return base + (size_t)(next(s) % base);
}

static void *alloc_touch(size_t n) {
    char *p = malloc(n);
    if (!p) {
        fprintf(stderr, "malloc(%zu) failed\n", n);
        exit(1);
    }
    p[0] = 1;
    p[n - 1] = 1;
    return p;
}

static void *worker(void *arg) {
    int me = (int)(intptr_t)arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[me], &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
        fprintf(stderr, "cannot pin thread %d to CPU %d\n", me, cpus[me]);
        exit(1);
    }
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(me + 1);
    void *live[LIVE];
    for (int i = 0; i < LIVE; i++) live[i] = alloc_touch(size_of_draw(&s));
    for (long i = 0; i < ops_per_thread; i++) {
        ring_drain(&rings[me], free);
        int k = (int)(next(&s) % LIVE);
        if (next(&s) % 4 == 0)
            ring_hand_over(&rings[1 - me], live[k], free);
        else
            free(live[k]);
        live[k] = alloc_touch(size_of_draw(&s));
    }
    for (int i = 0; i < LIVE; i++) free(live[i]);
    return NULL;
}

int main(int argc, char **argv) {
    long ops = argc > 1 ? atol(argv[1]) : 400000;
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 1;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < THREADS; c++)
        if (CPU_ISSET(c, &allowed)) cpus[n++] = c;
    if (n < THREADS) {
        printf("rseq_steal_band skip: fewer than two CPUs\n");
        return 0;
    }
    ops_per_thread = ops / THREADS;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++) ring_drain(&rings[i], free);
    printf("rseq_steal_band ok %ld\n", ops_per_thread * THREADS);
    return 0;
}
