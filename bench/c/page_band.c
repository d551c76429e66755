/* The page-granular band (issue 18), written from its description: 2
 * threads, each keeping 64 live blocks of log-uniform random size in
 * [LO, HI]; each operation frees one block — a quarter of them handed to
 * the other thread, which frees it there — and allocates one in its place,
 * touching its first and last byte. OPS operations in all. Prints the
 * throughput (Mops/s) and the time it took (rtime), the most bytes the
 * program held at once, the peak RSS and — under pcpalloc — the zone-lock
 * acquisitions per 1000 operations.
 *
 *   page_band LO_KIB HI_KIB [OPS]      e.g. page_band 8 256 800000 */
#include "bench.h"

#include <dlfcn.h>
#include <math.h>
#include <stdatomic.h>

#define THREADS 2
#define LIVE 64
#define RING 16 /* handed-over blocks in flight, per receiving thread */

static size_t lo, hi;
static long ops_per_thread;

/* Bytes each thread holds (its live blocks; a block handed over leaves
 * its producer's count), and the most each ever held: their sum bounds
 * what any allocator must hold at once, give or take RING blocks in
 * flight. Kept per thread, so counting shares no cache line. */
static _Thread_local long my_live, my_peak;
static long peak_of[THREADS];

static void note_live(long delta) {
    my_live += delta;
    if (my_live > my_peak) my_peak = my_live;
}

/* One single-producer single-consumer ring per receiving thread. */
struct ring {
    _Atomic size_t head; /* written by the producer */
    char pad[56];
    _Atomic size_t tail; /* written by the consumer */
    char pad2[56];
    void *slot[RING];
};
static struct ring rings[THREADS];

static void drain(struct ring *r) {
    size_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
    size_t h = atomic_load_explicit(&r->head, memory_order_acquire);
    while (t != h) {
        free(r->slot[t % RING]);
        t++;
    }
    atomic_store_explicit(&r->tail, t, memory_order_release);
}

/* Hands p to the other thread; frees it here if its ring is full. */
static void hand_over(struct ring *r, void *p) {
    size_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (h - atomic_load_explicit(&r->tail, memory_order_acquire) >= RING) {
        free(p);
        return;
    }
    r->slot[h % RING] = p;
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
}

static size_t pick_size(uint64_t *s) {
    double u = (double)(rng_next(s) >> 11) / 9007199254740992.0; /* [0, 1) */
    size_t n = (size_t)exp(log((double)lo) + u * (log((double)hi) - log((double)lo)));
    return n < lo ? lo : n > hi ? hi : n;
}

/* A new block; its first bytes (touched) hold its size. */
static char *new_block(uint64_t *s) {
    size_t n = pick_size(s);
    char *p = xmalloc(n);
    *(size_t *)p = n;
    p[n - 1] = 1;
    note_live((long)n);
    return p;
}

static void *worker(void *arg) {
    int me = (int)(long)arg;
    uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(me + 1);
    char *live[LIVE];
    for (int i = 0; i < LIVE; i++) live[i] = new_block(&seed);
    for (long i = 0; i < ops_per_thread; i++) {
        drain(&rings[me]);
        int k = (int)(rng_next(&seed) % LIVE);
        note_live(-(long)*(size_t *)live[k]);
        if ((rng_next(&seed) & 3) == 0)
            hand_over(&rings[1 - me], live[k]);
        else
            free(live[k]);
        live[k] = new_block(&seed);
    }
    for (int i = 0; i < LIVE; i++) free(live[i]);
    peak_of[me] = my_peak;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: page_band LO_KIB HI_KIB [OPS]\n");
        return 2;
    }
    lo = (size_t)atol(argv[1]) << 10;
    hi = (size_t)atol(argv[2]) << 10;
    long ops = argc > 3 ? atol(argv[3]) : 800000;
    ops_per_thread = ops / THREADS;
    struct timeval t0, t1;
    gettimeofday(&t0, NULL);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++) drain(&rings[i]);
    gettimeofday(&t1, NULL);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_usec - t0.tv_usec) / 1e6;
    printf("mops %.3f\n", (double)ops / secs / 1e6);
    printf("rtime %.4f\n", secs);
    printf("held_kib %ld\n", (peak_of[0] + peak_of[1]) >> 10);
    /* pcpalloc's own counter, when it is the allocator. */
    int (*stat)(const char *, uint64_t *) =
        (int (*)(const char *, uint64_t *))dlsym(RTLD_DEFAULT, "pcpalloc_stat");
    uint64_t locks = 0;
    if (stat && stat("zone_lock_acquisitions", &locks) == 0)
        printf("zone_locks_per_1000 %.2f\n", (double)locks * 1000.0 / (double)ops);
    report_peak();
    return 0;
}
