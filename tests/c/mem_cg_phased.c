/* Issue 43, item 4: a phased program that fits in a memory cgroup under
 * glibc. CYCLES (argv[1], default 8) times, each of THREADS threads
 * (argv[3], default 1) builds up its share of LIVE MiB (argv[2], default
 * 200) of mixed blocks — small objects (16 B - 1 KiB), page-granular blocks
 * (8 KiB - 4 MiB) and huge blocks (5 - 40 MiB), interleaved, every byte
 * written — then CHURN (argv[4], default 0) times frees a random quarter
 * and allocates as much again, then frees everything: in the reverse order
 * of allocation (ORDER, argv[5], "lifo", the default: a phase's structures
 * torn down as they were built) or in random order ("random"). Each cycle
 * splits the bytes between the three kinds differently (a program's
 * phases: mostly huge blocks, then mostly small and page-granular ones), so
 * what one cycle freed is not what the next asks for. The threads start
 * each cycle together. OTHER (argv[6], default 0) MiB of the program's own
 * memory (an mmap, every page written) stays resident throughout, as a
 * program's data, a JIT or another library's memory would. Prints each
 * cycle's VmHWM and, at the end, the peak RSS and the time; the cgroup's
 * counters (peak usage, OOM kills) are the test's to read. */
#include "issue_common.h"

#include <sys/mman.h>

/* Bytes per kind, in percent of LIVE, for each cycle (small, pages, huge). */
static const int MIX[][3] = {
    {10, 10, 80}, {40, 55, 5}, {5, 15, 80}, {30, 65, 5},
    {10, 20, 70}, {20, 75, 5}, {5, 5, 90}, {50, 45, 5},
};
#define NMIX (int)(sizeof MIX / sizeof MIX[0])
#define CAP ((size_t)1 << 20)

static int cycles, threads, churn, lifo;
static size_t live_max;
static pthread_barrier_t bar;

static size_t pick(uint64_t *s, int kind) {
    switch (kind) {
    case 0: return rng_size(s, 16, 1024);
    case 1: return rng_size(s, 8 * KiB, 4 * MiB);
    default: return rng_size(s, 5 * MiB, 40 * MiB);
    }
}

static int kind_of(size_t sz) { return sz <= 1024 ? 0 : sz <= 4 * MiB ? 1 : 2; }

/* Allocates blocks of the kinds' quotas (bytes), a kind chosen in
 * proportion to what is left of its quota so that the kinds interleave;
 * appends them to v[*n]. Returns the bytes, or 0 on a NULL. */
static size_t build(void **v, size_t *sz, size_t *n, size_t quota[3], uint64_t *seed) {
    size_t bytes = 0;
    for (;;) {
        size_t left = quota[0] + quota[1] + quota[2];
        if (left == 0 || *n == CAP) break;
        uint64_t r = rng_next(seed) % left;
        int k = r < quota[0] ? 0 : r < quota[0] + quota[1] ? 1 : 2;
        size_t s = pick(seed, k);
        if (s > quota[k]) s = quota[k];
        quota[k] -= s;
        /* A remainder below its kind's least size keeps its kind. */
        if (k == 1 && s < 8 * KiB) s = 8 * KiB;
        if (k == 2 && s <= 4 * MiB) s = 5 * MiB;
        if (s < 16) s = 16;
        char *p = malloc(s);
        if (!p) {
            printf("FAIL: malloc(%zu) returned NULL\n", s);
            return 0;
        }
        memset(p, (int)(*n & 0xff) | 1, s);
        keep(p);
        v[*n] = p;
        sz[*n] = s;
        ++*n;
        bytes += s;
    }
    return bytes;
}

static void *worker(void *arg) {
    int me = (int)(intptr_t)arg;
    void **v = mmap(NULL, CAP * sizeof *v, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                    -1, 0);
    size_t *sz = mmap(NULL, CAP * sizeof *sz, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(v != MAP_FAILED && sz != MAP_FAILED);
    uint64_t seed = 0x9E3779B97F4A7C15ULL * (uint64_t)(me + 1);
    size_t share = live_max / (size_t)threads;
    for (int c = 0; c < cycles; c++) {
        pthread_barrier_wait(&bar);
        const int *mix = MIX[c % NMIX];
        size_t quota[3], n = 0;
        for (int k = 0; k < 3; k++) quota[k] = share / 100 * (size_t)mix[k];
        if (!build(v, sz, &n, quota, &seed)) exit(1);
        for (int r = 0; r < churn; r++) {
            size_t again[3] = {0, 0, 0}, m = 0;
            for (size_t i = 0; i < n; i++) {
                if (rng_next(&seed) % 4 == 0) {
                    again[kind_of(sz[i])] += sz[i];
                    free(v[i]);
                } else {
                    v[m] = v[i];
                    sz[m++] = sz[i];
                }
            }
            n = m;
            if (!build(v, sz, &n, again, &seed)) exit(1);
        }
        if (!lifo) {
            for (size_t i = n; i > 1; i--) {
                size_t j = rng_next(&seed) % i;
                void *t = v[i - 1];
                v[i - 1] = v[j];
                v[j] = t;
            }
        }
        for (size_t i = n; i > 0; i--) free(v[i - 1]);
        pthread_barrier_wait(&bar);
        if (me == 0) {
            printf("cycle %d (%d/%d/%d%%): VmHWM %.1f MiB, VmRSS after %.1f MiB\n", c, mix[0],
                   mix[1], mix[2], (double)vm_hwm() / MiB, (double)vm_rss() / MiB);
            fflush(stdout);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    cycles = argc > 1 ? atoi(argv[1]) : 8;
    live_max = (size_t)(argc > 2 ? atol(argv[2]) : 200) * MiB;
    threads = argc > 3 ? atoi(argv[3]) : 1;
    churn = argc > 4 ? atoi(argv[4]) : 0;
    lifo = argc > 5 ? strcmp(argv[5], "random") != 0 : 1;
    size_t other = (size_t)(argc > 6 ? atol(argv[6]) : 0) * MiB;
    CHECK(threads >= 1 && threads <= 64);
    start_up();
    if (other) {
        char *o = mmap(NULL, other, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(o != MAP_FAILED);
        memset(o, 7, other);
    }
    pthread_barrier_init(&bar, NULL, (unsigned)threads);
    double t0 = now_s();
    pthread_t t[64];
    for (int i = 1; i < threads; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0);
    worker(0);
    for (int i = 1; i < threads; i++) pthread_join(t[i], NULL);
    double secs = now_s() - t0;
    printf("%d cycles of %zu MiB, %d thread(s), churn %d, %s frees: %.2f s, peak RSS %.1f MiB\n",
           cycles, live_max / MiB, threads, churn, lifo ? "lifo" : "random", secs,
           (double)vm_hwm() / MiB);
    printf("mem_cg_phased ok\n");
    return 0;
}
