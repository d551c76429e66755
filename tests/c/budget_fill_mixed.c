/* Issue 16, row 5: under PCPALLOC_MEMORY_LIMIT (argv[1], in MiB), 4
 * threads fill the heap with blocks of mixed sizes (about log-uniform, 16 B
 * to 3 MiB) until malloc returns NULL; then every thread frees half of its
 * own blocks and half of another thread's (a remote free); then they fill
 * again, 4 rounds in all. Every later round must reach at least 7/8 of
 * round 0's bytes. Each thread stops a round at its first NULL. Every
 * round a thread asks for the same sequence of sizes (seeded by argv[2], the
 * run, and the thread), so that the rounds differ only in what the heap kept
 * from the rounds before. */
#include "issue_common.h"

#define THREADS 4
#define ROUNDS 4
#define CAP 65536

static size_t limit;
static pthread_barrier_t bar;
static _Atomic size_t round_bytes[ROUNDS];
static _Atomic size_t fail_size[ROUNDS][THREADS];
static void **blocks[THREADS];
static int counts[THREADS];
static _Atomic int bad_errno;
static int run;

static void *worker(void *arg) {
    int me = (int)(intptr_t)arg;
    void **v = blocks[me];
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t seed = 0x9E3779B97F4A7C15ULL * (uint64_t)(run * THREADS + me + 1);
        int k = 0;
        pthread_barrier_wait(&bar);
        for (;;) {
            size_t n = rng_size(&seed, 16, 3 * MiB);
            errno = 0;
            void *p = malloc(n);
            if (!p) {
                if (errno != ENOMEM) bad_errno = errno ? errno : -1;
                fail_size[r][me] = n;
                break;
            }
            ((char *)p)[0] = 1;
            ((char *)p)[n - 1] = 1;
            keep(p);
            v[k++] = p;
            round_bytes[r] += n;
            if (round_bytes[r] > 4 * limit || k == CAP) break;
        }
        counts[me] = k;
        pthread_barrier_wait(&bar);
        /* The even blocks of my own, the odd blocks of the next thread. */
        for (int i = 0; i < k; i += 2) free(v[i]);
        int o = (me + 1) % THREADS;
        for (int i = 1; i < counts[o]; i += 2) free(blocks[o][i]);
        pthread_barrier_wait(&bar);
    }
    return NULL;
}

int main(int argc, char **argv) {
    require_pcpalloc();
    limit = (size_t)atol(argc > 1 ? argv[1] : "64") * MiB;
    run = argc > 2 ? atoi(argv[2]) : 0;
    pthread_barrier_init(&bar, NULL, THREADS);
    for (int i = 0; i < THREADS; i++) {
        blocks[i] = calloc(CAP, sizeof(void *));
        CHECK(blocks[i]);
    }
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    int bad = 0;
    size_t r0 = round_bytes[0];
    for (int r = 0; r < ROUNDS; r++) {
        size_t b = round_bytes[r];
        printf("round %d: %.1f MiB (%.0f%% of round 0); first NULL per thread for", r,
               (double)b / MiB, r0 ? 100.0 * b / r0 : 0.0);
        for (int i = 0; i < THREADS; i++) printf(" %zu", (size_t)fail_size[r][i]);
        printf(" bytes\n");
        if (r > 0 && b * 8 < r0 * 7) {
            printf("FAIL: round %d reached %.1f MiB, less than 7/8 of round 0's %.1f MiB\n", r,
                   (double)b / MiB, (double)r0 / MiB);
            bad = 1;
        }
    }
    if (r0 == 0 || r0 > 4 * limit) {
        printf("FAIL: round 0 got %zu bytes under a limit of %zu MiB\n", r0, limit / MiB);
        bad = 1;
    }
    if (bad_errno) {
        printf("FAIL: a NULL came with errno %d, not ENOMEM\n", bad_errno);
        bad = 1;
    }
    if (bad) return 1;
    printf("budget_fill_mixed ok\n");
    return 0;
}
