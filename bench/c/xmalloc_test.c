/* xmalloc_test: written from the published description of xmalloc-test
 * (Lever & Boreham, "malloc() Performance in a Multithreaded Linux
 * Environment", USENIX 2000; the version mimalloc-bench builds,
 * daanx/mimalloc-bench bench/xmalloc-test/xmalloc-test.c). Same logic:
 *
 *   xmalloc_test [-w WORKERS] [-t SECONDS] [-s SIZE] [-v] [-d]
 *   (defaults 4 workers, 5 s, 1024 B; mimalloc-bench "xmalloc-testN":
 *    -w <cpus> -t 5 -s 64)
 *
 * WORKERS allocator threads and WORKERS releaser threads (started in pairs,
 * releaser first) share one stack of batches under a mutex, with condition
 * variables for "not empty" and "not full" (at most 100 batches queued).
 * An allocator thread mallocs a batch of 4096 pointers, fills it with 4096
 * objects of SIZE bytes (SIZE -1: sizes drawn from 8, 12, 16, 24 ... 2048 —
 * powers of two and the halfway steps between them — with the lran2
 * generator seeded by the thread's number) and memsets the first
 * min(size, 128) bytes of each to its index, then pushes it. A releaser
 * pops a batch, frees its objects and the batch, and counts 4096 frees
 * (also on the turn where it found no batch, as the original does). Calls
 * go straight to malloc and free, unchecked, as the original's
 * `#define xmalloc malloc`. The done flag is a volatile int read with an
 * acquire (consume) load and set with a release store, the queue head and
 * count are volatile, as in the original; the per-releaser counters are
 * 64-byte aligned structs in an array from malloc — so, as in the
 * original, the array itself is only 16-byte aligned and two counters may
 * still share a line. The main thread polls every millisecond until
 * SECONDS have passed, raises the done flag, wakes everyone (without
 * taking the mutex, as the original), joins, prints "rtime: R, free/sec:
 * F M" where R = 100 / (millions of frees per second) as the original does
 * (lower is better), frees its id array, then the batches left in the
 * queue, the thread array and the counters. For our harness it also prints
 * `rtime R` and the peak RSS (`peak_kib`). */
#include "bench.h"
#include <errno.h>
#include <getopt.h>
#include <sys/time.h>

#define OBJECTS_PER_BATCH 4096
#define BATCH_LIMIT 100

struct batch {
    struct batch *next;
    void *objects[OBJECTS_PER_BATCH];
};

struct counter {
    long c __attribute__((aligned(64)));
};

#define LOAD(p) __atomic_load_n((p), __ATOMIC_CONSUME)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

static int num_workers = 4;
static double run_time = 5.0;
static int object_size = 1024;
static int verbose;
static pthread_t *tids;
static struct counter *counters;
static volatile int done_flag;
static struct timeval begin;

/* 8 to 2048: each power of two and the step half-way to the next. */
static const long sizes[] = {8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048};
static const int n_sizes = sizeof sizes / sizeof sizes[0];

static volatile struct batch *queue;
static volatile int queued;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;

/* The shuffled linear congruential generator (Numerical Recipes'
 * constants) the original takes from its random.h. */
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

static double elapsed(const struct timeval *t0) {
    struct timeval t;
    gettimeofday(&t, NULL);
    long sec = t.tv_sec - t0->tv_sec, usec = t.tv_usec - t0->tv_usec;
    if (usec < 0) sec--, usec += 1000000;
    return (double)sec + (double)usec / 1000000;
}

static void enqueue(struct batch *b) {
    pthread_mutex_lock(&lock);
    while (queued >= BATCH_LIMIT && !LOAD(&done_flag)) pthread_cond_wait(&not_full, &lock);
    b->next = (struct batch *)queue;
    queue = b;
    queued++;
    pthread_cond_signal(&not_empty);
    pthread_mutex_unlock(&lock);
}

static struct batch *dequeue(void) {
    pthread_mutex_lock(&lock);
    while (queue == NULL && !LOAD(&done_flag)) pthread_cond_wait(&not_empty, &lock);
    struct batch *b = (struct batch *)queue;
    if (b) {
        queue = b->next;
        queued--;
        pthread_cond_signal(&not_full);
    }
    pthread_mutex_unlock(&lock);
    return b;
}

static void *allocator(void *arg) {
    int id = *(int *)arg;
    struct lran2 r;
    lran2_init(&r, id);
    while (!LOAD(&done_flag)) {
        struct batch *b = malloc(sizeof *b);
        for (int i = 0; i < OBJECTS_PER_BATCH; i++) {
            size_t n = object_size > 0 ? (size_t)object_size : (size_t)sizes[lran2(&r) % n_sizes];
            b->objects[i] = malloc(n);
            memset(b->objects[i], i % 256, n > 128 ? 128 : n);
        }
        enqueue(b);
    }
    return NULL;
}

static void *releaser(void *arg) {
    int id = *(int *)arg;
    while (!LOAD(&done_flag)) {
        struct batch *b = dequeue();
        if (b) {
            for (int i = 0; i < OBJECTS_PER_BATCH; i++) free(b->objects[i]);
            free(b);
        }
        counters[id].c += OBJECTS_PER_BATCH;
    }
    return NULL;
}

static void run_test(void) {
    int *ids = malloc(sizeof(int) * num_workers);
    for (int i = 0; i < num_workers; i++) counters[i].c = 0;
    gettimeofday(&begin, NULL);
    for (int i = 0; i < num_workers; i++) {
        ids[i] = i;
        if (pthread_create(&tids[2 * i], NULL, releaser, &ids[i])) {
            perror("pthread_create releaser");
            exit(errno);
        }
        if (pthread_create(&tids[2 * i + 1], NULL, allocator, &ids[i])) {
            perror("pthread_create allocator");
            exit(errno);
        }
    }
    for (;;) {
        usleep(1000);
        if (elapsed(&begin) > run_time) {
            STORE(&done_flag, 1);
            pthread_cond_broadcast(&not_empty);
            pthread_cond_broadcast(&not_full);
            break;
        }
    }
    for (int i = 0; i < num_workers * 2; i++) pthread_join(tids[i], NULL);
    double t = elapsed(&begin);
    long total = 0;
    for (int i = 0; i < num_workers; i++) {
        if (verbose) printf("Thread %2d frees %ld blocks in %.2f seconds.\n", i, counters[i].c, t);
        total += counters[i].c;
    }
    double mfree = (double)total / t * 1e-6;
    double rtime = 100.0 / mfree;
    printf("rtime: %.3f, free/sec: %.3f M\n", rtime, mfree);
    printf("rtime %.4f\n", rtime);
    free(ids);
}

int main(int argc, char **argv) {
    int c;
    while ((c = getopt(argc, argv, "w:t:ds:v")) != -1) {
        switch (c) {
        case 'w': num_workers = atoi(optarg); break;
        case 't': run_time = atof(optarg); break;
        case 'd': break;
        case 's': object_size = atoi(optarg); break;
        case 'v': verbose++; break;
        default:
            fprintf(stderr, "usage: %s [-w workers] [-t seconds] [-s size, -1 for mixed] [-d] [-v]\n", argv[0]);
            return 1;
        }
    }
    tids = malloc(sizeof(pthread_t) * num_workers * 2);
    counters = malloc(sizeof(*counters) * num_workers);
    run_test();
    while (queue) {
        struct batch *b = (struct batch *)queue;
        queue = b->next;
        for (int i = 0; i < OBJECTS_PER_BATCH; i++) free(b->objects[i]);
        free(b);
    }
    free(tids);
    free(counters);
    report_peak();
    return 0;
}
