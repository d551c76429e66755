/* Issue 42, item 2 (a): idle memory goes back with no thread of ours.
 *
 * argv[1] (1 or 4) threads allocate argv[2] (200) MiB in all, in mixed
 * sizes — by bytes a third small (16 B – 8 KiB), a third large
 * (8 KiB – 4 MiB), a third huge (4 – 24 MiB), interleaved, every page
 * written — then free it all: with several threads each frees the
 * blocks of its neighbour (remote frees, a heap freed by a thread that did
 * not allocate it). argv[3] says what the workers do then: "exit" (they
 * return and main joins them) or "stay" (they stay alive, blocked, as an
 * idle thread pool does; the 1-thread case is main itself and ignores it).
 * Then the program only sleeps, sampling VmRSS every 50 ms for at most
 * argv[4] (3000) ms, and passes once VmRSS is within argv[5] (4) MiB of its
 * value before the burst. At every step /proc/self/task must list exactly
 * the program's own threads. */
#include "issue_common.h"


#define MAX_THREADS 16

static int nthreads = 1;
static size_t per_thread;
static void **blocks[MAX_THREADS];
static size_t nblocks[MAX_THREADS];
static pthread_barrier_t bar;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int release_workers;
static int own;


/* Counts a failure (reported at the end, so the figures still show). */
static int extra_threads;

static void expect_tasks(int want, const char *when) {
    int n = task_count();
    if (n != want) {
        printf("FAIL: /proc/self/task lists %d threads %s, the program has %d\n", n, when,
               want);
        extra_threads = 1;
    }
}

/* Allocates per_thread bytes in mixed sizes into blocks[i], every page
 * written. */
static void allocate(int i) {
    uint64_t seed = 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1);
    size_t cap = 1 << 20, n = 0;
    void **v = malloc(cap * sizeof *v);
    CHECK(v);
    size_t done[3] = {0, 0, 0};
    size_t third = per_thread / 3;
    for (;;) {
        /* The kind furthest behind its third. */
        int k = 0;
        for (int j = 1; j < 3; j++)
            if (done[j] < done[k]) k = j;
        if (done[k] >= third) break;
        size_t sz = k == 0   ? rng_size(&seed, 16, 8 * KiB)
                    : k == 1 ? rng_size(&seed, 8 * KiB, 4 * MiB)
                             : rng_size(&seed, 4 * MiB, 24 * MiB);
        char *p = malloc(sz);
        CHECK(p);
        memset(p, (int)(n & 0xff) | 1, sz);
        keep(p);
        CHECK(n < cap);
        v[n++] = p;
        done[k] += sz;
    }
    blocks[i] = v;
    nblocks[i] = n;
}

static void free_all(int i) {
    for (size_t j = 0; j < nblocks[i]; j++) free(blocks[i][j]);
    free(blocks[i]);
    blocks[i] = NULL;
}

static void *worker(void *arg) {
    int i = (int)(uintptr_t)arg;
    allocate(i);
    pthread_barrier_wait(&bar); /* everything allocated */
    pthread_barrier_wait(&bar); /* main looked at the peak */
    free_all(own ? i : (i + 1) % nthreads);
    pthread_barrier_wait(&bar); /* everything freed */
    return NULL;
}

static void *staying_worker(void *arg) {
    worker(arg);
    pthread_mutex_lock(&mu);
    while (!release_workers) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return NULL;
}

int main(int argc, char **argv) {
    nthreads = argc > 1 ? atoi(argv[1]) : 1;
    size_t total = (argc > 2 ? (size_t)atol(argv[2]) : 200) * MiB;
    int stay = argc > 3 && strncmp(argv[3], "stay", 4) == 0;
    own = argc > 3 && strcmp(argv[3], "stay-own") == 0;
    long limit_ms = argc > 4 ? atol(argv[4]) : 3000;
    size_t slack = (argc > 5 ? (size_t)atol(argv[5]) : 4) * MiB;
    CHECK(nthreads >= 1 && nthreads <= MAX_THREADS);
    per_thread = total / (size_t)nthreads;
    start_up();
    expect_tasks(1, "at the start");
    uint64_t rss0 = vm_rss();
    uint64_t peak = 0;
    pthread_t t[MAX_THREADS];
    int alive = 1;
    if (nthreads == 1) {
        allocate(0);
        peak = vm_rss();
        expect_tasks(1, "at the peak");
        free_all(0);
    } else {
        CHECK(pthread_barrier_init(&bar, NULL, (unsigned)nthreads + 1) == 0);
        for (int i = 0; i < nthreads; i++)
            CHECK(pthread_create(&t[i], NULL, stay ? staying_worker : worker,
                                 (void *)(uintptr_t)i) == 0);
        pthread_barrier_wait(&bar);
        peak = vm_rss();
        expect_tasks(nthreads + 1, "at the peak");
        pthread_barrier_wait(&bar);
        pthread_barrier_wait(&bar);
        if (stay) {
            alive = nthreads + 1;
        } else {
            for (int i = 0; i < nthreads; i++) CHECK(pthread_join(t[i], NULL) == 0);
        }
    }
    /* From here on the program calls no allocator function until it has
     * its answer (opendir's buffer comes after the last sample). */
    double t0 = now_s();
    uint64_t rss = vm_rss(), first = rss;
    long waited = 0;
    while (rss > rss0 + slack && waited < limit_ms) {
        sleep_ms(50);
        waited += 50;
        rss = vm_rss();
    }
    double took = now_s() - t0;
    expect_tasks(alive, "after going idle");
    printf("%d thread(s) (%s): VmRSS %.1f MiB at the start, %.1f MiB at the peak, %.1f MiB "
           "right after the frees, %.1f MiB after %.2f s idle\n",
           nthreads, nthreads == 1 ? "main" : stay ? "stay" : "exit", (double)rss0 / MiB,
           (double)peak / MiB, (double)first / MiB, (double)rss / MiB, took);
    int ok = rss <= rss0 + slack;
    if (stay) {
        pthread_mutex_lock(&mu);
        release_workers = 1;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
        for (int i = 0; i < nthreads; i++) CHECK(pthread_join(t[i], NULL) == 0);
    }
    if (extra_threads) return 1;
    if (!ok) {
        printf("FAIL: VmRSS %.1f MiB above its start after %.2f s idle (at most %.0f MiB)\n",
               (double)(rss - rss0) / MiB, took, (double)slack / MiB);
        return 1;
    }
    printf("inv_thread_idle ok\n");
    return 0;
}
