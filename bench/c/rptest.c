/* rptest: written from the published description of rptest (Mattias
 * Jansson's rpmalloc benchmark, as mimalloc-bench builds it:
 * daanx/mimalloc-bench bench/rptest/rptest.c with its benchmark.h
 * allocation wrapper, thread.c and timer.c). Same logic and arguments:
 *
 *   rptest THREADS MODE SIZE_MODE CROSS_RATE LOOPS ALLOCS OPS MIN MAX
 *   MODE 0 random sizes in [MIN, MAX], 1 fixed size MIN; SIZE_MODE 0 even,
 *   1 linear drop-off, 2 exponential drop-off; CROSS_RATE: every n-th loop
 *   hands a batch to another thread (0: never); 0 for LOOPS / ALLOCS / OPS
 *   means 800k / 10k / 1000.
 *   (mimalloc-bench "rptestN": <cpus> 0 1 2 500 1000 100 8 16000)
 *
 * Tables, as the original's: 2000 random sizes (uniform in [0, 100000),
 * scaled to [MIN, MAX]; derived linear and exponential drop-off tables from
 * three neighbouring entries), 311 alloc and 257 free op counts (uniform
 * 30-99 % of OPS, frees × 0.8). The original spells its random numbers
 * out; here they come from a fixed-seed generator with the same
 * distributions. The seed (131382) is the one of the first 200,000 whose
 * tables come closest to the published ones' statistics: mean alloc and
 * free percentages within 0.4 points; for 8-16000 B, the linear table's
 * mean size and the mean of its sizes above 8 KiB within 0.2 %, and its
 * shares of sizes up to 16, 32 ... 8192, 12288 B within 3 % (of the
 * smaller side) of the original's. Slots are
 * walked with prime strides: the first prime from 7 not dividing ALLOCS
 * for allocations, the next such prime for frees.
 *
 * Each thread keeps ALLOCS slots and runs two iterations of LOOPS loops;
 * a loop takes the batches other threads posted to it (a lock-free stack
 * whose head carries a 4-bit tag from a shared counter), frees a
 * table-given number of slots (stride walk), frees every block of the
 * posted batches, then replaces a table-given number of slots with blocks
 * whose sizes walk the size table from a per-thread start; every
 * CROSS_RATE-th loop (until some thread has finished its iteration) it
 * also allocates a batch of as many blocks and posts it to the next other
 * thread in turn. Every allocation goes through the original's wrapper:
 * memalign(8 or 16, alternating with no alignment for blocks under 4 KiB)
 * and a fill of 0xCD, or calloc — so all memory is written — unchecked,
 * and its first int, a byte per page and the last byte are written. After
 * each iteration a thread counts itself in and, until the main thread
 * resets the count, takes posted batches every millisecond; then frees all
 * its slots, sleeps 10 ms and frees (uncounted) what was posted since.
 * After both, it sleeps 1 s, meets the others once more the same way,
 * frees its slot array and exits with pthread_exit. The main thread runs
 * this twice with fresh threads (their arguments and handles in calloc'd
 * arrays): it starts them, sleeps 1 s, lets them go, and three times
 * waits for all to count in (polling each second), sleeps 1 s, samples
 * /proc/self/statm (the first two times) and resets the count, sleeping
 * 1 s before the next wait — the original's waits, about 14 s of idle
 * time per run, in which an allocator's time-based purging may act. It
 * prints the memory operations per second of the threads' own working
 * time (only the loops and their frees are timed, CLOCK_REALTIME) and the
 * peak RSS as the original does (which also writes the line to a file
 * benchmark-*.txt in the working directory; not done here). mimalloc-bench's
 * relative time is 2e6 / that rate, printed for our harness as
 * `rtime SECONDS` with the peak RSS (`peak_kib`). */
#include "bench.h"
#include <malloc.h>
#include <math.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <time.h>

#define RANDOM_SIZES 2000
#define ALLOC_OPS 311
#define FREE_OPS 257
#define TABLE_SEED 131382

struct pointers {
    void **pointers;
    size_t count;
    void *next;
    _Atomic int32_t *allocated;
};

/* Fields in the original's order (the threads' arguments are neighbours
 * in one array; `foreign` and `allocated` are written by other threads). */
struct arg {
    size_t numthreads, index, mode, size_mode, cross_rate, loop_count, alloc_count, min_size, max_size;
    size_t accumulator;
    uint64_t ticks, mops;
    _Alignas(8) _Atomic(uintptr_t) foreign;
    _Atomic int32_t allocated;
    int32_t peak_allocated;
    void *(*fn)(void *); /* the original's thread_arg */
    void *fn_arg;
    struct arg *args;
};

static volatile int benchmark_start;
static _Atomic int32_t threads_sync, cross_counter;
static size_t alloc_scatter, free_scatter;
static size_t random_size[RANDOM_SIZES], random_size_lin[RANDOM_SIZES], random_size_exp[RANDOM_SIZES];
static size_t *random_size_arr;
static size_t num_alloc_ops[ALLOC_OPS], num_free_ops[FREE_OPS];
static uint64_t time_freq;

/* The timer and thread helpers live in the original's timer.c and
 * thread.c: out-of-line calls there, and here (noinline); its allocation
 * wrapper and the loops are in the worker's own file and inlined there. */
#define OUT_OF_LINE __attribute__((noinline))
#define INLINE static inline __attribute__((always_inline))

OUT_OF_LINE static uint64_t timer_current(void) {
    struct timespec ts = {0, 0};
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

OUT_OF_LINE static double ticks_to_seconds(uint64_t ticks) { return (double)ticks / (double)time_freq; }

OUT_OF_LINE static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

OUT_OF_LINE static void fence(void) { __sync_synchronize(); }

/* The original's benchmark.h: every byte is written; no NULL test. */
INLINE void *bench_malloc(size_t alignment, size_t size) {
    if (alignment) {
        void *p = memalign(alignment, size);
        if (p) memset(p, 0xCD, size);
        return p;
    }
    return calloc(1, size);
}

/* Push with a fresh tag (the counter's value before the increment). */
INLINE void post(_Atomic(uintptr_t) *head, struct pointers *p) {
    uintptr_t prev, next;
    do {
        prev = atomic_load(head);
        p->next = (void *)(prev & ~(uintptr_t)0xF);
        next = (uintptr_t)p | ((uintptr_t)atomic_fetch_add(&cross_counter, 1) & 0xF);
    } while (!atomic_compare_exchange_strong(head, &prev, next));
}

/* Take the whole stack, leaving a fresh tag. */
INLINE struct pointers *take(_Atomic(uintptr_t) *head) {
    uintptr_t prev;
    struct pointers *cur;
    do {
        prev = atomic_load(head);
        cur = (struct pointers *)(prev & ~(uintptr_t)0xF);
    } while (cur && !atomic_compare_exchange_strong(
                        head, &prev, (uintptr_t)atomic_fetch_add(&cross_counter, 1) & 0xF));
    return cur;
}

/* Frees every block of the posted batches, counting them and giving the
 * bytes back to their poster's count. */
INLINE void free_posted(struct arg *a, struct pointers *f) {
    while (f) {
        int32_t fa = 0;
        for (size_t i = 0; i < f->count; i++) {
            fa -= *(int32_t *)f->pointers[i];
            free(f->pointers[i]);
            a->mops++;
        }
        void *next = f->next;
        fa -= (int32_t)(f->count * sizeof(void *) + sizeof(struct pointers));
        atomic_fetch_add(f->allocated, fa);
        free(f->pointers);
        free(f);
        a->mops += 2;
        f = next;
    }
}

/* A block: its size in its first int, a byte per page and its last byte
 * written. */
INLINE void *fill_block(size_t size, size_t align) {
    char *p = bench_malloc(align, size);
    *(int32_t *)p = (int32_t)size;
    size_t pages = (size - 1) / 4096;
    for (size_t page = 1; page < pages; page++) p[page * 4096] = 1;
    p[size - 1] = 1;
    return p;
}

/* Count in, then take posted batches every millisecond (timed) until the
 * main thread resets the count. */
INLINE void meet(struct arg *a) {
    atomic_fetch_add(&threads_sync, 1);
    do {
        struct pointers *f = take(&a->foreign);
        if (f) {
            uint64_t t0 = timer_current();
            free_posted(a, f);
            a->ticks += timer_current() - t0;
        }
        sleep_ms(1);
        fence();
    } while (atomic_load(&threads_sync));
}

static void *worker(void *argp) {
    struct arg *a = argp;
    const size_t alignment[3] = {0, 8, 16};
    size_t alloc_idx = 0, free_idx = 0, cross_index = 0;
    size_t psize = sizeof(void *) * a->alloc_count;
    void **ptrs = bench_malloc(16, psize);
    memset(ptrs, 0, psize);
    atomic_fetch_add(&a->allocated, (int32_t)psize);
    while (!benchmark_start) sleep_ms(10);
    a->ticks = 0;
    a->mops = 0;
    for (size_t iter = 0; iter < 2; iter++) {
        size_t size_index = ((a->index + 1) * ((iter + 1) * 37)) % RANDOM_SIZES;
        uint64_t iter_ticks = 0;
        int do_foreign = 1;
        for (size_t loop = 0; loop < a->loop_count; loop++) {
            struct pointers *foreign = take(&a->foreign);
            int32_t allocated = 0;
            uint64_t t0 = timer_current();
            const size_t nfree = num_free_ops[(iter + loop) % FREE_OPS];
            const size_t nalloc = num_alloc_ops[(iter + loop) % ALLOC_OPS];
            for (size_t i = 0; i < nfree; i++) {
                if (ptrs[free_idx]) {
                    allocated -= *(int32_t *)ptrs[free_idx];
                    free(ptrs[free_idx]);
                    a->mops++;
                    ptrs[free_idx] = NULL;
                }
                free_idx = (free_idx + free_scatter) % a->alloc_count;
            }
            free_posted(a, foreign);
            for (size_t i = 0; i < nalloc; i++) {
                if (ptrs[alloc_idx]) {
                    allocated -= *(int32_t *)ptrs[alloc_idx];
                    free(ptrs[alloc_idx]);
                    a->mops++;
                }
                size_t size = a->min_size;
                if (a->mode == 0) size = random_size_arr[(size_index + 2) % RANDOM_SIZES];
                ptrs[alloc_idx] = fill_block(size, size < 4096 ? alignment[(size_index + i) % 3] : 0);
                allocated += (int32_t)size;
                a->mops++;
                alloc_idx = (alloc_idx + alloc_scatter) % a->alloc_count;
                size_index = (size_index + 1) % RANDOM_SIZES;
            }
            foreign = NULL;
            if (a->cross_rate && loop % a->cross_rate == 0 && do_foreign > 0) {
                foreign = bench_malloc(16, sizeof(struct pointers));
                foreign->count = nalloc;
                foreign->pointers = bench_malloc(16, sizeof(void *) * nalloc);
                foreign->allocated = &a->allocated;
                allocated += (int32_t)(nalloc * sizeof(void *) + sizeof(struct pointers));
                a->mops += 2;
                for (size_t i = 0; i < nalloc; i++) {
                    size_t size = a->min_size;
                    if (a->mode == 0) size = random_size_arr[(size_index + 2) % RANDOM_SIZES];
                    foreign->pointers[i] = fill_block(size, size < 4096 ? alignment[(size_index + i) % 3] : 0);
                    allocated += (int32_t)size;
                    a->mops++;
                    size_index = (size_index + 1) % RANDOM_SIZES;
                }
            }
            uint64_t elapsed = timer_current() - t0;
            iter_ticks += elapsed;
            a->ticks += elapsed;
            /* the count before this loop's change, as the original keeps */
            int32_t cur = atomic_fetch_add(&a->allocated, allocated);
            if (a->peak_allocated < cur) a->peak_allocated = cur;
            if (foreign) {
                cross_index = (cross_index + 1) % a->numthreads;
                if (a->numthreads > 1 && cross_index == a->index) cross_index = (cross_index + 1) % a->numthreads;
                post(&a->args[cross_index].foreign, foreign);
            }
            if (atomic_load(&threads_sync) > 0) do_foreign = 0; /* one thread completed */
            if (ticks_to_seconds(iter_ticks) > 120) break;         /* the original's abort */
        }
        meet(a);
        int32_t allocated = 0;
        uint64_t t0 = timer_current();
        for (size_t i = 0; i < a->alloc_count; i++)
            if (ptrs[i]) {
                allocated -= *(int32_t *)ptrs[i];
                free(ptrs[i]);
                a->mops++;
                ptrs[i] = NULL;
            }
        uint64_t elapsed = timer_current() - t0;
        atomic_fetch_add(&a->allocated, allocated);
        iter_ticks += elapsed;
        a->ticks += elapsed;
        sleep_ms(10);
        /* what was posted since: freed, not counted */
        struct pointers *f = take(&a->foreign);
        while (f) {
            for (size_t i = 0; i < f->count; i++) free(f->pointers[i]);
            void *next = f->next;
            free(f->pointers);
            free(f);
            f = next;
        }
        printf(".");
        fflush(stdout);
    }
    sleep_ms(1000);
    fence();
    meet(a);
    free(ptrs);
    atomic_fetch_add(&a->allocated, -(int32_t)psize);
    a->accumulator += a->mops;
    pthread_exit(NULL);
}

/* Resident bytes from /proc/self/statm (the original's memory sample). */
static size_t statm_resident(void) {
    long rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    if (fscanf(f, "%*s%ld", &rss) != 1) rss = 0;
    fclose(f);
    return (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
}

int main(int argc, char **argv) {
    time_freq = 1000000000ull;
    if (argc < 9 || argc > 10) {
        printf("Usage: %s <threads> <mode> <size mode> <cross rate> <loops> <allocs> <op count> <min size> <max size>\n",
               argv[0]);
        return 3;
    }
    size_t threads = (size_t)strtol(argv[1], 0, 10), mode = (size_t)strtol(argv[2], 0, 10);
    size_t size_mode = (size_t)strtol(argv[3], 0, 10), cross_rate = (size_t)strtol(argv[4], 0, 10);
    size_t loops = (size_t)strtol(argv[5], 0, 10), allocs = (size_t)strtol(argv[6], 0, 10);
    size_t ops = (size_t)strtol(argv[7], 0, 10), min_size = (size_t)strtol(argv[8], 0, 10);
    size_t max_size = argc > 9 ? (size_t)strtol(argv[9], 0, 10) : 0;
    if (threads < 1 || threads > 1000 || mode > 1 || size_mode > 2) {
        printf("Invalid arguments\n");
        return 3;
    }
    if (!loops || loops > 0xFFFFFF) loops = 800 * 1024;
    if (!allocs || allocs > 0xFFFFFF) allocs = 10 * 1024;
    if (!ops || ops > 0xFFFFFF) ops = 1000;
    if ((mode == 0 && (!max_size || max_size < min_size)) || (mode == 1 && !min_size)) {
        printf("Invalid min/max size\n");
        return 3;
    }
    if (threads == 1) cross_rate = 0;

    /* prime strides from 7 up, not dividing the slot count */
    size_t primes[64], np = 0;
    for (size_t n = 7; np < 64; n++) {
        int prime = 1;
        for (size_t d = 2; d * d <= n; d++)
            if (n % d == 0) prime = 0;
        if (prime) primes[np++] = n;
    }
    size_t ip = 0;
    alloc_scatter = primes[ip];
    while (allocs % alloc_scatter == 0) alloc_scatter = primes[++ip];
    free_scatter = primes[++ip];
    while (allocs % free_scatter == 0) free_scatter = primes[++ip];

    /* the tables: raw draws, then scaled as the original scales its own */
    uint64_t seed = TABLE_SEED;
    for (size_t i = 0; i < RANDOM_SIZES; i++) random_size[i] = rng_next(&seed) % 100000;
    for (size_t i = 0; i < ALLOC_OPS; i++) num_alloc_ops[i] = rng_range(&seed, 30, 99);
    for (size_t i = 0; i < FREE_OPS; i++) num_free_ops[i] = rng_range(&seed, 30, 99);
    size_t range = max_size - min_size;
    for (size_t i = 0; i < RANDOM_SIZES; i++)
        random_size[i] = min_size + (size_t)round((double)range * ((double)random_size[i] / 100000.0));
    if (!range) range = 1;
    for (size_t i = 0; i < RANDOM_SIZES; i++) {
        double w0 = 1.0 - (double)(random_size[i] - min_size) / (double)range;
        double w1 = 1.0 - (double)(random_size[(i + 1) % RANDOM_SIZES] - min_size) / (double)range;
        double even = (double)(random_size[(i + 2) % RANDOM_SIZES] - min_size);
        random_size_lin[i] = min_size + (size_t)(even * fabs((w0 + w1) - 1.0));
        random_size_exp[i] = min_size + (size_t)(even * (w0 * w1));
    }
    for (size_t i = 0; i < ALLOC_OPS; i++) num_alloc_ops[i] = (size_t)((double)ops * ((double)num_alloc_ops[i] / 100.0));
    for (size_t i = 0; i < FREE_OPS; i++)
        num_free_ops[i] = (size_t)(0.8 * (double)ops * ((double)num_free_ops[i] / 100.0));
    random_size_arr = size_mode == 0 ? random_size : size_mode == 1 ? random_size_lin : random_size_exp;

    struct arg *args = bench_malloc(0, sizeof(struct arg) * threads);
    uintptr_t *handles = bench_malloc(0, sizeof(uintptr_t) * threads);
    benchmark_start = 0;
    if (mode == 0)
        printf("%-12s %u threads random %s size [%u,%u] %u loops %u allocs %u ops: ", "crt", (unsigned)threads,
               size_mode == 0 ? "even" : size_mode == 1 ? "linear" : "exp", (unsigned)min_size, (unsigned)max_size,
               (unsigned)loops, (unsigned)allocs, (unsigned)ops);
    else
        printf("%-12s %u threads fixed size [%u] %u loops %u allocs %u ops: ", "crt", (unsigned)threads,
               (unsigned)min_size, (unsigned)loops, (unsigned)allocs, (unsigned)ops);
    fflush(stdout);

    size_t memory_usage = 0, sample_allocated = 0;
    uint64_t mops = 0, ticks = 0;
    for (int iter = 0; iter < 2; iter++) {
        benchmark_start = 0;
        atomic_store(&threads_sync, 0);
        fence();
        for (size_t t = 0; t < threads; t++) {
            struct arg *a = &args[t];
            a->numthreads = threads;
            a->index = t;
            a->mode = mode;
            a->size_mode = size_mode;
            a->cross_rate = cross_rate;
            a->loop_count = loops;
            a->alloc_count = allocs;
            a->min_size = min_size;
            a->max_size = max_size;
            a->fn = worker;
            a->fn_arg = a;
            atomic_store(&a->foreign, 0);
            atomic_store(&a->allocated, 0);
            a->peak_allocated = 0;
            a->args = args;
            fence();
            pthread_t id = 0;
            handles[t] = pthread_create(&id, NULL, a->fn, a->fn_arg) ? 0 : (uintptr_t)id;
        }
        sleep_ms(1000);
        benchmark_start = 1;
        fence();
        /* three meetings: wait for all, sleep, sample (twice), release */
        for (int phase = 0; phase < 3; phase++) {
            if (phase > 0) sleep_ms(1000);
            while (atomic_load(&threads_sync) < (int32_t)threads) {
                sleep_ms(1000);
                fence();
            }
            sleep_ms(1000);
            fence();
            if (phase < 2) {
                size_t cur_allocated = 0;
                for (size_t t = 0; t < threads; t++) cur_allocated += (size_t)atomic_load(&args[t].allocated);
                size_t cur_usage = statm_resident();
                if (cur_allocated > sample_allocated || cur_usage > memory_usage) {
                    sample_allocated = cur_allocated;
                    memory_usage = cur_usage;
                }
            }
            atomic_store(&threads_sync, 0);
            fence();
        }
        for (size_t t = 0; t < threads; t++) {
            if (handles[t]) pthread_join((pthread_t)handles[t], NULL);
            ticks += args[t].ticks;
            mops += args[t].mops;
            if (!args[t].accumulator) exit(-1);
        }
    }
    if (!ticks) ticks = 1;
    free(handles);
    free(args);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    size_t peak = (size_t)ru.ru_maxrss * 1024;
    double rate = (double)mops / ticks_to_seconds(ticks);
    printf("%u memory ops/CPU second (%uMiB peak, %uMiB -> %uMiB bytes sample, %.0f%% overhead)\n", (unsigned)rate,
           (unsigned)(peak / (1024 * 1024)), (unsigned)(sample_allocated / (1024 * 1024)),
           (unsigned)(memory_usage / (1024 * 1024)),
           100.0 * ((double)memory_usage - (double)sample_allocated) / (double)sample_allocated);
    fflush(stdout);
    printf("rtime %.4f\n", 2000000.0 / rate);
    report_peak();
    return 0;
}
