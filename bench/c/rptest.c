/* rptest (rpmalloc's benchmark, as mimalloc-bench runs it: "rptest N 0 1 2
 * 500 1000 100 8 16000"), written here from its description: each thread
 * keeps 1000 slots of blocks of 8 B - 16000 B, sizes biased small (linear
 * drop-off), some requested with 16-byte alignment; in each of 500 loops
 * it frees some slots and allocates others (strided through the slots),
 * and every second loop it allocates a batch of blocks that it hands to
 * another thread, which frees them — cross-thread frees of small and
 * page-sized blocks. Every block is written in full (calloc, or memalign
 * and a fill, as the original's wrapper does). Two such rounds, each
 * ending with every thread freeing everything it holds. Fixed work, timed
 * from outside.
 *
 *   rptest [SCALE] [THREADS] */
#include "bench.h"
#include <malloc.h>
#include <stdatomic.h>

#define SLOTS 1000
#define LOOPS 500
#define OPS 100
#define MIN_SIZE 8
#define MAX_SIZE 16000
#define CROSS_RATE 2

struct batch {
    struct batch *next;
    int count;
    void **blocks;
};

struct worker {
    int index;
    _Atomic(struct batch *) inbox; /* batches other threads hand to us */
    pthread_t thread;
};

static struct worker *workers;
static int nthreads;
static long rounds;
static pthread_barrier_t barrier;

/* Linear drop-off: min + range * u * |v + w - 1|, most sizes small. */
static size_t pick_size(uint64_t *s) {
    double u = (rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
    double v = (rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
    double w = (rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
    double d = v + w - 1.0;
    return MIN_SIZE + (size_t)((MAX_SIZE - MIN_SIZE) * u * (d < 0 ? -d : d));
}

/* As the original's allocation wrapper: every byte is written — calloc,
 * or memalign(8 or 16) and a fill — so all memory is touched. */
static void *alloc_aligned(size_t align, size_t n) {
    void *p;
    if (align) {
        p = memalign(align, n);
        if (p) memset(p, 0xcd, n);
    } else {
        p = calloc(1, n);
    }
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static void *alloc_block(uint64_t *s, unsigned op) {
    static const size_t align[3] = {0, 8, 16};
    size_t n = pick_size(s);
    void *p = alloc_aligned(n < 4096 ? align[op % 3] : 0, n);
    *(int *)p = (int)n;
    return p;
}

static void free_inbox(struct worker *w) {
    struct batch *b = atomic_exchange(&w->inbox, NULL);
    while (b) {
        struct batch *next = b->next;
        for (int i = 0; i < b->count; i++) free(b->blocks[i]);
        free(b->blocks);
        free(b);
        b = next;
    }
}

static void post(struct worker *to, struct batch *b) {
    struct batch *head = atomic_load(&to->inbox);
    do {
        b->next = head;
    } while (!atomic_compare_exchange_weak(&to->inbox, &head, b));
}

static void *run(void *arg) {
    struct worker *w = arg;
    uint64_t s = 0x9e3779b97f4a7c15ull * (w->index + 1);
    void **slots = xmalloc(SLOTS * sizeof *slots);
    memset(slots, 0, SLOTS * sizeof *slots);
    size_t alloc_at = 0, free_at = 0, cross_to = w->index;
    for (long r = 0; r < rounds; r++) {
        for (int loop = 0; loop < LOOPS; loop++) {
            free_inbox(w);
            int nfree = (int)(0.8 * OPS * rng_range(&s, 30, 99) / 100);
            int nalloc = (int)(OPS * rng_range(&s, 30, 99) / 100);
            for (int i = 0; i < nfree; i++) {
                free(slots[free_at]);
                slots[free_at] = NULL;
                free_at = (free_at + 11) % SLOTS;
            }
            for (int i = 0; i < nalloc; i++) {
                free(slots[alloc_at]);
                slots[alloc_at] = alloc_block(&s, (unsigned)i);
                alloc_at = (alloc_at + 7) % SLOTS;
            }
            if (nthreads > 1 && loop % CROSS_RATE == 0) {
                struct batch *b = alloc_aligned(16, sizeof *b);
                b->count = nalloc;
                b->blocks = alloc_aligned(16, nalloc * sizeof(void *));
                for (int i = 0; i < nalloc; i++) b->blocks[i] = alloc_block(&s, (unsigned)i);
                cross_to = (cross_to + 1) % nthreads;
                if ((int)cross_to == w->index) cross_to = (cross_to + 1) % nthreads;
                post(&workers[cross_to], b);
            }
        }
        /* End of a round: everyone stops handing out, then frees all. */
        pthread_barrier_wait(&barrier);
        free_inbox(w);
        for (int i = 0; i < SLOTS; i++) {
            free(slots[i]);
            slots[i] = NULL;
        }
        pthread_barrier_wait(&barrier);
    }
    free(slots);
    return NULL;
}

int main(int argc, char **argv) {
    long scale = scale_arg(argc, argv);
    nthreads = argc > 2 ? atoi(argv[2]) : 2;
    rounds = 2 * scale;
    workers = xmalloc(nthreads * sizeof *workers);
    pthread_barrier_init(&barrier, NULL, (unsigned)nthreads);
    for (int i = 0; i < nthreads; i++) {
        workers[i].index = i;
        atomic_store(&workers[i].inbox, NULL);
    }
    for (int i = 0; i < nthreads; i++) pthread_create(&workers[i].thread, NULL, run, &workers[i]);
    for (int i = 0; i < nthreads; i++) pthread_join(workers[i].thread, NULL);
    report_peak();
    return 0;
}
