/* larson as published (Larson & Krishnan, "Memory allocation for
 * long-running server applications", ISMM 1998; the form mimalloc-bench
 * runs): written here from the paper's description and that program's
 * arguments, so our harness can run it with its published arguments
 *
 *   larson_server SECONDS MIN_SIZE MAX_SIZE BLOCKS_PER_THREAD ROUNDS SEED THREADS
 *   (mimalloc-bench: 5 8 1000 5000 100 4141 <cpus>)
 *
 * The main thread allocates THREADS * BLOCKS_PER_THREAD blocks of random
 * sizes in [MIN, MAX), shuffles them and replaces 4 × that many at random.
 * Then each worker owns a slice of BLOCKS_PER_THREAD slots: it frees a
 * random slot and allocates a new block of random size there, ROUNDS ×
 * BLOCKS_PER_THREAD times, writes two bytes into each new block, and then
 * hands its slice to a new thread and exits — so most frees are of blocks
 * another (often exited) thread allocated. After SECONDS the workers stop;
 * the program prints the allocation throughput and, as mimalloc-bench
 * reports it, the "relative time" 1e9 / throughput (lower is better), on a
 * line `rtime SECONDS` our harness reads.
 *
 * The pseudo-random generator is the one the original uses (a 97-entry
 * shuffled linear congruential generator with Numerical Recipes'
 * constants), so the same seed gives the same sizes. */
#include "bench.h"
#include <stdatomic.h>
#include <sys/time.h>

#define MAX_THREADS 100
#define MAX_BLOCKS 1000000

/* A shuffled LCG: m = 714025, a = 1366, c = 150889, 97-slot table. */
struct lran2 {
    long x, y, v[97];
};

static void lran2_init(struct lran2 *d, long seed) {
    long x = (150889L - seed) % 714025L;
    if (x < 0) x = -x;
    for (int j = 0; j < 97; j++) {
        x = (1366L * x + 150889L) % 714025L;
        d->v[j] = x;
    }
    d->x = (1366L * x + 150889L) % 714025L;
    d->y = d->x;
}

static long lran2(struct lran2 *d) {
    int j = (int)(d->y % 97);
    d->y = d->v[j];
    d->x = (1366L * d->x + 150889L) % 714025L;
    d->v[j] = d->x;
    return d->y;
}

struct slice {
    char **blocks;
    int nblocks; /* slots owned */
    int ops;     /* replacements per thread generation */
    int min_size, max_size;
    struct lran2 rng;
    long allocs;
    atomic_int finished;
};

static atomic_int stopflag;
static char *blocks[MAX_BLOCKS];

static size_t pick(struct lran2 *r, int min, int max) {
    return max == min ? (size_t)min : (size_t)(min + lran2(r) % (max - min));
}

static void *worker(void *arg);

static void spawn(struct slice *s) {
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, worker, s) != 0) {
        fprintf(stderr, "pthread_create failed\n");
        exit(1);
    }
    pthread_attr_destroy(&a);
}

static void *worker(void *arg) {
    struct slice *s = arg;
    if (atomic_load(&stopflag)) {
        atomic_store(&s->finished, 1);
        return NULL;
    }
    for (int i = 0; i < s->ops; i++) {
        int k = (int)(lran2(&s->rng) % s->nblocks);
        free(s->blocks[k]);
        size_t n = pick(&s->rng, s->min_size, s->max_size);
        char *p = malloc(n);
        if (!p) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        s->blocks[k] = p;
        s->allocs++;
        volatile char *c = p; /* write something */
        c[0] = 'a';
        (void)c[0];
        c[1] = 'b';
        if (atomic_load_explicit(&stopflag, memory_order_relaxed)) break;
    }
    if (!atomic_load(&stopflag)) {
        spawn(s); /* the next generation takes over the slice */
    } else {
        atomic_store(&s->finished, 1);
    }
    return NULL;
}

static double now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: %s SECONDS MIN MAX BLOCKS_PER_THREAD ROUNDS SEED THREADS\n", argv[0]);
        return 2;
    }
    double seconds = atof(argv[1]);
    int min_size = atoi(argv[2]), max_size = atoi(argv[3]);
    int per_thread = atoi(argv[4]), rounds = atoi(argv[5]);
    long seed = atol(argv[6]);
    int threads = atoi(argv[7]);
    if (threads < 1 || threads > MAX_THREADS || (long)threads * per_thread > MAX_BLOCKS) {
        fprintf(stderr, "too many threads or blocks\n");
        return 2;
    }
    int n = threads * per_thread;
    struct lran2 rng;
    lran2_init(&rng, seed);

    /* Warm up: allocate, shuffle, replace 4n blocks at random. */
    for (int i = 0; i < n; i++) blocks[i] = xmalloc(pick(&rng, min_size, max_size));
    for (int i = n; i > 0; i--) {
        int v = (int)(lran2(&rng) % i);
        char *t = blocks[v];
        blocks[v] = blocks[i - 1];
        blocks[i - 1] = t;
    }
    for (int i = 0; i < 4 * n; i++) {
        int v = (int)(lran2(&rng) % n);
        free(blocks[v]);
        blocks[v] = xmalloc(pick(&rng, min_size, max_size));
    }

    static struct slice slices[MAX_THREADS];
    for (int i = 0; i < threads; i++) {
        struct slice *s = &slices[i];
        s->blocks = &blocks[i * per_thread];
        s->nblocks = per_thread;
        s->ops = rounds * per_thread;
        s->min_size = min_size;
        s->max_size = max_size;
        lran2_init(&s->rng, lran2(&rng));
        s->allocs = 0;
        atomic_store(&s->finished, 0);
        spawn(s);
    }
    double t0 = now();
    usleep((useconds_t)(seconds * 1e6));
    atomic_store(&stopflag, 1);
    for (int i = 0; i < threads; i++)
        while (!atomic_load(&slices[i].finished)) sched_yield();
    double elapsed = now() - t0;
    long allocs = 0;
    for (int i = 0; i < threads; i++) allocs += slices[i].allocs;
    double throughput = allocs / elapsed;
    printf("throughput %.0f allocations/s\n", throughput);
    printf("rtime %.4f\n", 1e9 / throughput);
    report_peak();
    return 0;
}
