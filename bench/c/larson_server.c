/* larson_server: written from the published description of larson
 * (Larson & Krishnan, "Memory allocation for long-running server
 * applications", ISMM 1998; the program mimalloc-bench builds as "larson",
 * daanx/mimalloc-bench bench/larson/larson.cpp, compiled there as C++ with
 * CPP=1, i.e. new char[] / delete[]). Same logic, in C:
 *
 *   larson_server SECONDS MIN_SIZE MAX_SIZE BLOCKS_PER_THREAD ROUNDS SEED THREADS
 *   (mimalloc-bench "larsonN": 5 8 1000 5000 100 4141 <cpus>)
 *
 * The main thread seeds a 97-entry shuffled linear congruential generator
 * (Numerical Recipes' constants, so a seed gives the sizes the original
 * gives), allocates THREADS * BLOCKS_PER_THREAD blocks of sizes in
 * [MIN, MAX), shuffles them (with their recorded sizes) and replaces 4 ×
 * that many at random. Each of THREADS slots (in an array on the main
 * thread's stack, as the original's) then gets its slice of the block
 * array, a seed drawn from the main generator and a thread. A thread
 * replaces a random block of its slice ROUNDS × BLOCKS_PER_THREAD times
 * (delete[] the old, new char[] of a random size, record the size and
 * count, write the first byte, read it back into a volatile, write the
 * second, stop early once the stop flag is up), marks its slot finished
 * and, unless stopped, starts a fresh thread on the same slice and exits
 * with pthread_exit — threads are joinable and never joined, as in the
 * original, so most frees are of blocks an exited thread allocated. The
 * stop flag and the finished marks are plain volatile ints, as in the
 * original. The main thread sleeps SECONDS (whole seconds in the original;
 * fractions accepted here), raises the stop flag, waits (sched_yield) for
 * every slot to be finished, prints the throughput and the relative time
 * 1e9 / throughput as the original does (time from gettimeofday, taken
 * after the threads are started), then sleeps 2 s for the old threads to
 * die (the original's Sleep(2500), which its POSIX shim rounds down to
 * whole seconds) and returns without freeing the blocks. For our harness
 * it also prints `rtime SECONDS` and the peak RSS (`peak_kib`).
 *
 * new[] / delete[] are the C++ operators the program would call: the
 * preloaded allocator's, else libstdc++'s, through one-jump stubs like PLT
 * entries, with the NULL test g++ puts before delete[] (cxx_new.h).
 * larson.c builds this file with LARSON_SIZED: larson-sized, which
 * mimalloc-bench builds from the same larson.cpp with SIZED=1 and
 * -fsized-deallocation, where every free is an explicit
 * operator delete[](p, size) call (no NULL test). The older
 * bench/larson_sized/larson.cpp's `delete[] p, size;` is a plain delete[]
 * followed by a comma expression, not a sized delete; the published build
 * does not use that file. */
#include "bench.h"
#include "cxx_new.h"
#include <sys/time.h>
#include <time.h>

#define MAX_THREADS 100
#define MAX_BLOCKS 1000000

/* The generator: x' = (1366 x + 150889) mod 714025 fills a 97-slot table;
 * each draw returns the slot picked by the previous output and refills it. */
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

/* One slot, handed from thread to thread; fields in the original's order. */
struct slot {
    int threadno;
    int ops; /* replacements per thread: ROUNDS * BLOCKS_PER_THREAD */
    int seed;
    int min_size, max_size;
    char **array;    /* its slice of blocks[] */
    size_t *blksize; /* and of sizes[] */
    int asize;       /* BLOCKS_PER_THREAD */
    long allocs, frees, threads, bytes;
    volatile int finished;
    struct lran2 rgen;
};

static volatile int stopflag;
static char *blocks[MAX_BLOCKS];
static size_t sizes[MAX_BLOCKS];
static struct lran2 rgen;
static int min_size = 10, max_size = 500;

#ifdef LARSON_SIZED
#define RELEASE(p, n) cxx_delete_array_sized((p), (n))
#else
#define RELEASE(p, n) cxx_delete_array(p)
#endif

static void *exercise(void *arg);

/* As the original's _beginthread: a joinable, system-scope thread whose
 * handle and attributes are dropped; a failure goes unnoticed. */
static void begin_thread(struct slot *s) {
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setscope(&a, PTHREAD_SCOPE_SYSTEM);
    pthread_create(&t, &a, exercise, s);
}

static void *exercise(void *arg) {
    if (stopflag) return NULL;
    struct slot *s = arg;
    s->finished = 0;
    s->threads++;
    int range = s->max_size - s->min_size;
    for (int i = 0; i < s->ops; i++) {
        int victim = (int)(lran2(&s->rgen) % s->asize);
        RELEASE(s->array[victim], s->blksize[victim]);
        s->frees++;
        size_t n = range == 0 ? (size_t)s->min_size : (size_t)(s->min_size + lran2(&s->rgen) % range);
        s->array[victim] = cxx_new_array(n);
        s->blksize[victim] = n;
        s->allocs++;
        /* write something: two bytes, the first read back in between */
        volatile char *c = s->array[victim];
        *c++ = 'a';
        volatile char ch __attribute__((unused)) = *s->array[victim];
        *c = 'b';
        if (stopflag) break;
    }
    s->finished = 1;
    if (!stopflag) begin_thread(s);
    pthread_exit(NULL);
}

/* Allocate n blocks, shuffle them, then replace 4n at random. */
static void warmup(char **blkp, size_t *blksz, int n) {
    for (int i = 0; i < n; i++) {
        size_t sz = min_size == max_size ? (size_t)min_size
                                         : (size_t)(min_size + lran2(&rgen) % (max_size - min_size));
        blkp[i] = cxx_new_array(sz);
        blksz[i] = sz;
    }
    for (int i = n; i > 0; i--) {
        int v = (int)(lran2(&rgen) % i);
        char *tp = blkp[v];
        size_t ts = blksz[v];
        blkp[v] = blkp[i - 1];
        blksz[v] = blksz[i - 1];
        blkp[i - 1] = tp;
        blksz[i - 1] = ts;
    }
    for (int i = 0; i < 4 * n; i++) {
        int v = (int)(lran2(&rgen) % n);
        RELEASE(blkp[v], blksz[v]);
        size_t sz = max_size == min_size ? (size_t)min_size
                                         : (size_t)(min_size + lran2(&rgen) % (max_size - min_size));
        blkp[v] = cxx_new_array(sz);
        blksz[v] = sz;
    }
}

/* The original's QueryPerformanceCounter shim: gettimeofday in µs. */
static long ticks_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec * 1000000L + tv.tv_usec;
}

static void sleep_seconds(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* The original's runthreads with min_threads = max_threads: one round. */
static void runthreads(double seconds, int threads, int per_thread, int rounds) {
    struct slot slots[MAX_THREADS];
    memset(&slots[0], 0, sizeof slots[0]);
    warmup(blocks, sizes, threads * per_thread);
    stopflag = 0;
    for (int i = 0; i < threads; i++) {
        struct slot *s = &slots[i];
        s->threadno = i + 1;
        s->ops = rounds * per_thread;
        s->array = &blocks[i * per_thread];
        s->blksize = &sizes[i * per_thread];
        s->asize = per_thread;
        s->min_size = min_size;
        s->max_size = max_size;
        s->seed = (int)lran2(&rgen);
        s->finished = 0;
        s->allocs = s->frees = s->threads = 0;
        lran2_init(&s->rgen, s->seed);
        begin_thread(s);
    }
    long start = ticks_us();
    sleep_seconds(seconds);
    stopflag = 1;
    for (int i = 0; i < threads; i++)
        while (!slots[i].finished) sched_yield();
    long end = ticks_us();
    long allocs = 0;
    for (int i = 0; i < threads; i++) allocs += slots[i].allocs;
    double duration = (double)(end - start) / 1e6;
    for (int i = 0; i < threads; i++)
        if (!slots[i].finished) printf("Thread at %d not finished\n", i);
    double throughput = (double)allocs / duration;
    double rtime = 1e9 / throughput;
    printf("Throughput = %8.0f operations per second, relative time: %.3fs.\n", throughput, rtime);
    printf("rtime %.4f\n", rtime);
    sleep(2); /* the original's Sleep(2500): wait for old threads to die */
    printf("Done sleeping...\n");
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: %s SECONDS MIN MAX BLOCKS_PER_THREAD ROUNDS SEED THREADS\n", argv[0]);
        return 2;
    }
    cxx_init();
    double seconds = atof(argv[1]);
    min_size = atoi(argv[2]);
    max_size = atoi(argv[3]);
    int per_thread = atoi(argv[4]);
    int rounds = atoi(argv[5]);
    unsigned seed = (unsigned)atoi(argv[6]);
    int threads = atoi(argv[7]);
    if (threads < 1 || threads > MAX_THREADS || (long)threads * per_thread > MAX_BLOCKS) {
        printf("Max %d chunks - exiting\n", MAX_BLOCKS);
        return 1;
    }
    lran2_init(&rgen, seed);
    runthreads(seconds, threads, per_thread, rounds);
    report_peak();
    return 0;
}
