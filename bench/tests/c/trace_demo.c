/* A small program to trace: four threads allocate and free small and
 * large blocks, hand some to the next thread to free, and the process
 * forks once (the child allocates too, and writes its own trace). It
 * prints how many allocations and frees each process made. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 4
#define ROUNDS 20000
#define SLOTS 256

static void *volatile handoff[THREADS][SLOTS];
static long allocs[THREADS], frees[THREADS];

static size_t size_for(unsigned x) {
    x = x * 2654435761u;
    if (x % 50 == 0) return 8192 + x % 100000; /* large */
    return 8 + x % 2000;
}

static void *worker(void *arg) {
    int me = (int)(intptr_t)arg;
    void *mine[SLOTS] = {0};
    for (unsigned i = 0; i < ROUNDS; i++) {
        unsigned s = i % SLOTS;
        if (mine[s]) {
            free(mine[s]);
            frees[me]++;
        }
        mine[s] = malloc(size_for(i + me * 7919));
        memset(mine[s], me, 16);
        allocs[me]++;
        if (i % 16 == 0) {
            /* Hand one to the next thread; free what the previous one left. */
            void *give = malloc(64 + i % 512);
            allocs[me]++;
            void *old = __atomic_exchange_n(&handoff[(me + 1) % THREADS][s], give, __ATOMIC_ACQ_REL);
            if (old) {
                free(old);
                frees[me]++;
            }
        }
    }
    for (unsigned s = 0; s < SLOTS; s++)
        if (mine[s]) {
            free(mine[s]);
            frees[me]++;
        }
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    long a = 0, f = 0;
    for (int i = 0; i < THREADS; i++) a += allocs[i], f += frees[i];
    pid_t pid = fork();
    if (pid == 0) {
        long ca = 0;
        for (int i = 0; i < 5000; i++) {
            char *p = malloc(32 + i % 300);
            ca++;
            p[0] = (char)i;
            handoff[0][0] = p; /* used: the compiler may not drop the pair */
            free(handoff[0][0]);
        }
        printf("child %d allocs %ld frees %ld\n", getpid(), ca, ca);
        fflush(stdout);
        exit(0);
    }
    waitpid(pid, NULL, 0);
    printf("parent %d allocs %ld frees %ld\n", getpid(), a, f);
    return 0;
}
