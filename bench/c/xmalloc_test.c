/* xmalloc_test: written from the published description of xmalloc-test
 * (Lever & Boreham, "malloc() Performance in a Multithreaded Linux
 * Environment", USENIX 2000; the version mimalloc-bench builds,
 * daanx/mimalloc-bench bench/xmalloc-test/xmalloc-test.c). Same logic:
 *
 *   xmalloc_test [-w WORKERS] [-t SECONDS] [-s SIZE] [-v] [-d]
 *   (defaults 4 workers, 5 s, 1024 B; mimalloc-bench "xmalloc-testN":
 *    -w <cpus> -t 5 -s 64)
 *
 * WORKERS allocator threads and WORKERS releaser threads share one queue
 * of batches under a mutex, with condition variables for "not empty" and
 * "not full" (at most 100 batches queued). An allocator thread mallocs a
 * batch of 4096 pointers, fills it with 4096 objects of SIZE bytes (SIZE
 * -1: sizes drawn from 8, 12, 16, 24 ... 2048 — powers of two and the
 * halfway steps between them — with the lran2 generator seeded by the
 * thread's number) and writes the first min(size, 128) bytes of each, then
 * queues it. A releaser dequeues a batch, frees its objects and the batch,
 * and counts 4096 frees (also on the turn where it found no batch, as the
 * original does). The main thread polls every millisecond until SECONDS
 * have passed, raises the done flag and wakes everyone, joins, prints
 * "rtime: R, free/sec: F M" where R = 100 / (millions of frees per second)
 * as the original does (lower is better), then frees the batches left in
 * the queue. For our harness it also prints `rtime R` and the peak RSS
 * (`peak_kib`). */
#include "bench.h"
#include <getopt.h>
#include <stdatomic.h>
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

static int num_workers = 4;
static double run_time = 5.0;
static int object_size = 1024;
static int verbose;
static struct counter *counters;
static atomic_int done_flag;
static struct timeval begin;

static long sizes[32];
static int n_sizes;

static struct batch *queue;
static int queued;
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
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_usec - t0->tv_usec) * 1e-6;
}

static void enqueue(struct batch *b) {
    pthread_mutex_lock(&lock);
    while (queued >= BATCH_LIMIT && !atomic_load(&done_flag)) pthread_cond_wait(&not_full, &lock);
    b->next = queue;
    queue = b;
    queued++;
    pthread_cond_signal(&not_empty);
    pthread_mutex_unlock(&lock);
}

static struct batch *dequeue(void) {
    pthread_mutex_lock(&lock);
    while (!queue && !atomic_load(&done_flag)) pthread_cond_wait(&not_empty, &lock);
    struct batch *b = queue;
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
    while (!atomic_load(&done_flag)) {
        struct batch *b = xmalloc(sizeof *b);
        for (int i = 0; i < OBJECTS_PER_BATCH; i++) {
            size_t n = object_size > 0 ? (size_t)object_size : (size_t)sizes[lran2(&r) % n_sizes];
            b->objects[i] = xmalloc(n);
            memset(b->objects[i], i % 256, n > 128 ? 128 : n);
        }
        enqueue(b);
    }
    return NULL;
}

static void *releaser(void *arg) {
    int id = *(int *)arg;
    while (!atomic_load(&done_flag)) {
        struct batch *b = dequeue();
        if (b) {
            for (int i = 0; i < OBJECTS_PER_BATCH; i++) free(b->objects[i]);
            free(b);
        }
        counters[id].c += OBJECTS_PER_BATCH;
    }
    return NULL;
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
    if (num_workers < 1) num_workers = 1;
    for (long s = 8; s <= 2048; s *= 2) {
        sizes[n_sizes++] = s;
        if (s < 2048) sizes[n_sizes++] = s * 3 / 2;
    }
    pthread_t *tids = xmalloc(sizeof(pthread_t) * num_workers * 2);
    counters = xmalloc(sizeof(*counters) * num_workers);
    int *ids = xmalloc(sizeof(int) * num_workers);
    for (int i = 0; i < num_workers; i++) counters[i].c = 0;

    gettimeofday(&begin, NULL);
    for (int i = 0; i < num_workers; i++) {
        ids[i] = i;
        if (pthread_create(&tids[2 * i], NULL, releaser, &ids[i]) ||
            pthread_create(&tids[2 * i + 1], NULL, allocator, &ids[i])) {
            perror("pthread_create");
            return 1;
        }
    }
    for (;;) {
        usleep(1000);
        if (elapsed(&begin) > run_time) {
            atomic_store(&done_flag, 1);
            pthread_mutex_lock(&lock);
            pthread_cond_broadcast(&not_empty);
            pthread_cond_broadcast(&not_full);
            pthread_mutex_unlock(&lock);
            break;
        }
    }
    for (int i = 0; i < num_workers * 2; i++) pthread_join(tids[i], NULL);
    double t = elapsed(&begin);
    long total = 0;
    for (int i = 0; i < num_workers; i++) {
        total += counters[i].c;
        if (verbose) printf("Thread %2d frees %ld blocks in %.2f seconds.\n", i, counters[i].c, t);
    }
    double mfree = (double)total / t * 1e-6;
    double rtime = 100.0 / mfree;
    printf("rtime: %.3f, free/sec: %.3f M\n", rtime, mfree);
    printf("rtime %.4f\n", rtime);
    free(ids);
    while (queue) {
        struct batch *b = queue;
        queue = b->next;
        for (int i = 0; i < OBJECTS_PER_BATCH; i++) free(b->objects[i]);
        free(b);
    }
    free(tids);
    free(counters);
    report_peak();
    return 0;
}
