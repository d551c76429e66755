/* xmalloc-test (Lever & Boreham, as in mimalloc-bench): producer threads
 * allocate small objects in batches and hand them to consumer threads,
 * which free them. */
#include "bench.h"
#include <stdatomic.h>

#define BATCH 4096
struct batch {
    struct batch *next;
    void *obj[BATCH];
};
static _Atomic(struct batch *) full;
static _Atomic long produced;
static long target;
static _Atomic int done;

static void *producer(void *arg) {
    uint64_t s = (uintptr_t)arg | 1;
    while (atomic_fetch_add(&produced, BATCH) < target) {
        struct batch *b = xmalloc(sizeof *b);
        for (int i = 0; i < BATCH; i++) {
            size_t n = rng_range(&s, 8, 256);
            b->obj[i] = xmalloc(n);
            memset(b->obj[i], 1, n < 16 ? n : 16);
        }
        b->next = atomic_load(&full);
        while (!atomic_compare_exchange_weak(&full, &b->next, b)) {
        }
    }
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    for (;;) {
        struct batch *b = atomic_load(&full);
        while (b && !atomic_compare_exchange_weak(&full, &b, b->next)) {
        }
        if (!b) {
            if (atomic_load(&done)) return NULL;
            sched_yield();
            continue;
        }
        for (int i = 0; i < BATCH; i++) free(b->obj[i]);
        free(b);
    }
}

int main(int argc, char **argv) {
    long scale = scale_arg(argc, argv);
    target = 4000000L * scale;
    pthread_t p[2], c[2];
    for (long i = 0; i < 2; i++) pthread_create(&p[i], NULL, producer, (void *)(i + 1));
    for (long i = 0; i < 2; i++) pthread_create(&c[i], NULL, consumer, NULL);
    for (int i = 0; i < 2; i++) pthread_join(p[i], NULL);
    atomic_store(&done, 1);
    for (int i = 0; i < 2; i++) pthread_join(c[i], NULL);
    report_peak();
    return 0;
}
