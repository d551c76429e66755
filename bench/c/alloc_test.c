/* alloc_test: written from the published description of alloc-test
 * (OLogN Technologies' memory allocator tester, as mimalloc-bench builds
 * it with BENCH=4 and its new/delete allocator: daanx/mimalloc-bench
 * bench/alloc-test/allocator_tester.cpp and allocator_tester.h). Same logic:
 *
 *   alloc_test [THREADS] [ITERATIONS]
 *   (THREADS defaults to 6; mimalloc-bench "alloc-test1": 1,
 *    "alloc-testN": <cpus> (at most 16). ITERATIONS per thread is ours, to
 *    shorten a run; the original's is 100,000,000.)
 *
 * Each thread (all with the same seed, 41) owns 2^18 / THREADS slots of
 * {pointer, size} in an array from new[]. Its generator is a 64-bit
 * xorshift whose output is the state times 0xd989bcacc137dcd5, high half
 * (as the original's). Setup: for every group of 32 slots one 32-bit draw
 * decides which are filled. The main loop, ITERATIONS steps in 32 rounds,
 * picks a slot with the original's "Pareto 80/20" six-level distribution
 * (the binomial weights of 0.8 / 0.2 over six levels: a few slots get most
 * of the picks) — an empty slot gets a new block, whose every byte is set
 * (memset), a full one has every word of its block read and summed, then
 * is freed. Sizes: a draw's low 7 bits pick a size class by their trailing
 * zeros (half of them 5-8 B, a quarter 9-16 B, ... up to 513-1024 B), its
 * next bits the size within the class. After each round, and after setup
 * and cleanup, the thread reads /proc/self/statm (the original's RSS
 * sample). At the end every block left is read and freed, then the array.
 * Prints "T threads made N alloc/dealloc operations in M ms" as the
 * original does, and the peak RSS (`peak_kib`) for our harness, which
 * times the process. Threads start as std::thread starts them: the main
 * thread allocates each thread's 24-byte state with operator new, the
 * thread deletes it (sized delete) when its function returns. new / new[]
 * / delete[] / delete are the C++ operators the program would call: the
 * preloaded allocator's, else libstdc++'s (cxx_new.h). */
#include "bench.h"
#include "cxx_new.h"
#include <math.h>
#include <time.h>

#define MAX_ITEM_SIZE_EXP 10 /* blocks up to 1 KiB */

struct prng {
    uint64_t s;
};

static inline uint32_t rng32(struct prng *r) {
    uint64_t ret = r->s * 0xd989bcacc137dcd5ull;
    r->s ^= r->s >> 11;
    r->s ^= r->s << 31;
    r->s ^= r->s >> 18;
    return (uint32_t)(ret >> 32);
}

static inline uint64_t rng64(struct prng *r) {
    uint64_t hi = rng32(r);
    return (hi << 32) + rng32(r);
}

static inline size_t size_of_draw(uint64_t rnd, size_t max_exp) {
    max_exp -= 3;
    uint32_t cls = (uint32_t)(rnd & ((1u << max_exp) - 1)) + 1;
    rnd >>= max_exp;
    unsigned idx = (unsigned)__builtin_ctz(cls) + 2;
    size_t mask = ((size_t)1 << idx) - 1;
    return (rnd & mask) + 1 + ((size_t)1 << idx);
}

/* Six levels with the binomial weights C(6,k) 0.8^(6-k) 0.2^k: level k of
 * the draw gets the slot range of weight 6-k. */
struct pareto {
    uint32_t ranges[6];
    uint32_t offsets[8];
};

static void pareto_init(struct pareto *d, uint32_t items) {
    double w[7];
    for (int k = 0; k <= 6; k++) {
        static const double binom[7] = {1, 6, 15, 20, 15, 6, 1};
        w[k] = binom[k] * pow(0.8, 6 - k) * pow(0.2, k);
    }
    d->ranges[0] = (uint32_t)(UINT32_MAX * w[0]);
    d->ranges[5] = (uint32_t)(UINT32_MAX * (1. - w[6]));
    for (int i = 1; i < 5; i++) d->ranges[i] = d->ranges[i - 1] + (uint32_t)(UINT32_MAX * w[i]);
    d->offsets[0] = 0;
    d->offsets[7] = items;
    for (int i = 0; i < 6; i++) d->offsets[i + 1] = d->offsets[i] + (uint32_t)(items * w[6 - i]);
}

static inline size_t pareto_pick(const struct pareto *d, uint32_t r1, uint32_t r2) {
    size_t idx = 6;
    for (size_t i = 0; i < 6; i++)
        if (r1 < d->ranges[i]) {
            idx = i;
            break;
        }
    uint32_t range = d->offsets[idx + 1] - d->offsets[idx];
    return d->offsets[idx] + r2 % range;
}

static size_t get_rss(void) {
    FILE *f = fopen("/proc/self/statm", "rb");
    if (!f) return 0;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    const char *p = buf;
    while (*p == ' ') p++;
    while (*p && *p != ' ') p++;
    return (size_t)atol(p);
}

static size_t now_ms(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (size_t)ts.tv_sec * 1000 + (size_t)ts.tv_nsec / 1000000;
}

struct slot {
    uint8_t *ptr;
    uint32_t sz;
    uint32_t reincarnation;
};

struct params {
    size_t id, iterations, items, seed;
};

static inline size_t read_all(const struct slot *s) {
    size_t sum = 0, i = 0;
    for (; i < s->sz / sizeof(size_t); i++) sum += ((const size_t *)s->ptr)[i];
    const uint8_t *tail = s->ptr + i * sizeof(size_t);
    for (i = 0; i < s->sz % sizeof(size_t); i++) sum += tail[i];
    return sum;
}

static void *run(void *arg) {
    struct params *pr = arg;
    size_t items = pr->items, dummy = 0, rss_max = 0, rss;
    printf("    running thread %zu with 'new-delete allocator' and maxItemSizeExp = %d, maxItems = %zu, "
           "iterCount = %zu, allocated memory access mode: full,  [rnd_seed = %zu] ...\n",
           pr->id, MAX_ITEM_SIZE_EXP, items, pr->iterations, pr->seed);
    struct pareto pd;
    pareto_init(&pd, (uint32_t)items);
    struct slot *base = (struct slot *)cxx_new_array(items * sizeof(struct slot));
    memset(base, 0, items * sizeof(struct slot));
    struct prng rng = {pr->seed};
    /* setup */
    for (size_t i = 0; i < items / 32; i++) {
        uint32_t bits = rng32(&rng);
        for (size_t j = 0; j < 32; j++)
            if ((bits >> j) & 1) {
                size_t sz = size_of_draw(rng64(&rng), MAX_ITEM_SIZE_EXP);
                struct slot *s = &base[i * 32 + j];
                s->sz = (uint32_t)sz;
                s->ptr = (uint8_t *)cxx_new_array(sz);
                memset(s->ptr, (uint8_t)sz, sz);
            }
    }
    if ((rss = get_rss()) > rss_max) rss_max = rss;
    /* main loop */
    for (size_t k = 0; k < 32; k++) {
        for (size_t j = 0; j < pr->iterations >> 5; j++) {
            uint32_t r1 = rng32(&rng), r2 = rng32(&rng);
            struct slot *s = &base[pareto_pick(&pd, r1, r2)];
            if (s->ptr) {
                dummy += read_all(s);
                cxx_delete_array(s->ptr);
                s->ptr = NULL;
            } else {
                size_t sz = size_of_draw(rng64(&rng), MAX_ITEM_SIZE_EXP);
                s->sz = (uint32_t)sz;
                s->ptr = (uint8_t *)cxx_new_array(sz);
                memset(s->ptr, (uint8_t)sz, sz);
            }
        }
        if ((rss = get_rss()) > rss_max) rss_max = rss;
    }
    /* exit */
    for (size_t i = 0; i < items; i++)
        if (base[i].ptr) {
            dummy += read_all(&base[i]);
            cxx_delete_array(base[i].ptr);
        }
    cxx_delete_array(base);
    if ((rss = get_rss()) > rss_max) rss_max = rss;
    printf("about to exit thread %zu (%zu operations performed) [ctr = %zu]...\n", pr->id, pr->iterations, dummy);
    return NULL;
}

/* std::thread's start: the creating thread allocates the thread's state
 * (operator new, 24 bytes: a vtable pointer, the function and its
 * argument); the new thread runs the function, then deletes the state
 * (sized operator delete, 24). */
#define THREAD_STATE_SIZE 24
struct thread_state {
    void *vtable;
    void *(*fn)(void *);
    void *arg;
};

static void *thread_start(void *p) {
    struct thread_state *st = p;
    st->fn(st->arg);
    cxx_delete_sized(st, THREAD_STATE_SIZE);
    return NULL;
}

int main(int argc, char **argv) {
    cxx_init();
    size_t threads = 6, iterations = 100000000;
    if (argc >= 2) {
        long l = strtol(argv[1], NULL, 10);
        if (l > 0) threads = (size_t)l;
    }
    if (argc >= 3) {
        long l = strtol(argv[2], NULL, 10);
        if (l > 0) iterations = (size_t)l;
    }
    if (threads > 32) threads = 32; /* the original's max_threads */
    fprintf(stderr, "threads: %zu\n", threads);
    struct params p[32];
    pthread_t t[32];
    size_t start = now_ms();
    for (size_t i = 0; i < threads; i++) {
        p[i] = (struct params){i, iterations, ((size_t)1 << 18) / threads, 41};
        printf("about to run thread %zu...\n", i);
        struct thread_state *st = cxx_new(THREAD_STATE_SIZE);
        *st = (struct thread_state){NULL, run, &p[i]};
        pthread_create(&t[i], NULL, thread_start, st);
        printf("    ...done\n");
    }
    for (size_t i = 0; i < threads; i++) {
        printf("joining thread %zu...\n", i);
        pthread_join(t[i], NULL);
        printf("    ...done\n");
    }
    size_t ms = now_ms() - start;
    printf("%zu threads made %zu alloc/dealloc operations in %zu ms (%zu ms per 1 million)\n", threads,
           iterations * threads, ms, ms * 1000000 / (iterations * threads));
    get_rss();
    report_peak();
    return 0;
}
