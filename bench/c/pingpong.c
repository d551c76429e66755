/* pingpong: producer/consumer pairs pass 8-32 KiB buffers through a small
 * queue; producer and consumer pinned to different CPUs. */
#include "bench.h"
#include <stdatomic.h>

#define CAP 32
struct ring {
    _Atomic size_t head;
    char pad[56];
    _Atomic size_t tail;
    void *ptr[CAP];
    size_t len[CAP];
};
static long per_pair;

static void *producer(void *arg) {
    struct ring *r = arg;
    pin(0);
    uint64_t s = (uintptr_t)arg | 1;
    for (long i = 0; i < per_pair; i++) {
        size_t n = rng_range(&s, 8192, 32768) & ~63ul;
        char *p = xmalloc(n);
        memset(p, (int)i, n);
        size_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
        while (t - atomic_load_explicit(&r->head, memory_order_acquire) == CAP) sched_yield();
        r->ptr[t % CAP] = p;
        r->len[t % CAP] = n;
        atomic_store_explicit(&r->tail, t + 1, memory_order_release);
    }
    return NULL;
}

static void *consumer(void *arg) {
    struct ring *r = arg;
    pin(1);
    unsigned long sum = 0;
    for (long i = 0; i < per_pair; i++) {
        size_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
        while (atomic_load_explicit(&r->tail, memory_order_acquire) == h) sched_yield();
        char *p = r->ptr[h % CAP];
        size_t n = r->len[h % CAP];
        atomic_store_explicit(&r->head, h + 1, memory_order_release);
        for (size_t o = 0; o < n; o += 64) sum += (unsigned char)p[o];
        free(p);
    }
    return (void *)sum;
}

int main(int argc, char **argv) {
    long scale = scale_arg(argc, argv);
    int pairs = 2;
    per_pair = 200000 * scale;
    struct ring *r = calloc(pairs, sizeof *r);
    pthread_t t[2 * 2];
    for (int i = 0; i < pairs; i++) {
        pthread_create(&t[2 * i], NULL, producer, &r[i]);
        pthread_create(&t[2 * i + 1], NULL, consumer, &r[i]);
    }
    for (int i = 0; i < 2 * pairs; i++) pthread_join(t[i], NULL);
    free(r);
    report_peak();
    return 0;
}
