/* sh8bench: written from the published description of sh8bench
 * (MicroQuill's SmartHeap benchmark SH8BENCH, as mimalloc-bench patches
 * and builds it: daanx/mimalloc-bench bench/shbench/sh8bench.patch,
 * BENCH=1 SYS_MULTI_THREAD=1). Same logic:
 *
 *   sh8bench [THREADS [ITERATIONS [HEAP_BLOCKS [FOREIGN_ALLOCS]]]]
 *   (defaults: the number of CPUs, 700000 (mimalloc-bench's patch; the
 *    original's default is 100000), 1000000, 10000000; mimalloc-bench
 *    "sh8benchN": 2 × <cpus> and the defaults. The three optional counts
 *    are ours, to shorten a run; the patched program reads them from its
 *    prompts, which read nothing there.)
 *
 * FOREIGN_ALLOCS is rounded down to a multiple of THREADS²; an array of
 * that many pointers (malloc, then memset to zero: its pages are written,
 * as in the original, whose volatile pointers keep the compiler from
 * turning the pair into calloc) is split into one slot per thread. The
 * threads start, then the main thread mallocs FOREIGN_ALLOCS blocks of 8
 * bytes, one after another in array order, each holding the address of its
 * array entry, storing through volatile pointers as the original does,
 * while the threads run (which read the entries with plain loads). Each thread keeps a pointer array of
 * HEAP_BLOCKS / THREADS entries and runs ITERATIONS / THREADS iterations:
 * first it frees foreign blocks — the main thread's, from its own share of
 * every slot (slot / THREADS entries at offset index × that in each slot,
 * slot after slot) — until it reaches one the main thread has not made
 * yet; then it takes the next size of a fixed histogram (8 B × 1000,
 * 16 × 5000, 48 × 1000, 72 × 100, 148 × 100, 200 × 100, 520 × 10,
 * 1056 × 5, 4096 × 3, 9162, 34562, 168524; starting from the second) and
 * allocates that many blocks of it into its array, writing their first and
 * last byte (the patch), skipping the fifth of the array that still holds
 * the previous pass's blocks; when the array is full, that step frees the
 * blocks below the kept part in allocation order and those above it in
 * reverse order instead of allocating (here the skip test comes first, so
 * no kept block is overwritten). Threads exit without freeing what
 * they hold (the original leaves it to thread-exclusive pools). Prints the
 * elapsed and CPU time as the original does, and the peak RSS (`peak_kib`)
 * for our harness, which times the process. */
#include "bench.h"
#include <sys/sysinfo.h>
#include <time.h>

struct size_count {
    unsigned long size;
    unsigned count;
};

static const struct size_count histogram[] = {
    {8, 1000},  {16, 5000},  {48, 1000},  {72, 100},    {148, 100},    {200, 100},
    {520, 10},  {1056, 5},   {4096, 3},   {9162, 1},    {34562, 1},    {168524, 1},
};
#define SIZES ((int)(sizeof histogram / sizeof histogram[0]))

static unsigned long iterations_total = 700000;
static unsigned long heap_total = 1000000;
static unsigned long foreign_total = 10000000;
static unsigned long nthreads;

/* Where each thread frees the main thread's blocks from. */
struct inter_thread {
    void ***buf;
    long index;
};

static void *bench_thread(void *arg) {
    struct inter_thread *it = arg;
    const long slot_size = (long)(foreign_total / nthreads);
    const long per_thread_reset = slot_size / (long)nthreads;
    long frees_left = it ? slot_size : 0;
    long per_thread = per_thread_reset;
    void ***foreign = it ? it->buf + per_thread * it->index : NULL;
    unsigned long iterations = iterations_total / nthreads;
    unsigned long heap = heap_total / nthreads;
    char **memory = malloc(heap * sizeof(char *));
    if (!memory) {
        printf("\nout of memory");
        return NULL;
    }
    char **mp = memory, **mpe = memory + heap;
    char **save_start = mpe, **save_end = mpe;
    int size_index = 0, count, size;
    while (iterations--) {
        /* free the main thread's blocks made so far, spread over all slots */
        /* (plain loads of what the main thread stores through volatile
         * pointers, as in the original) */
        while (frees_left) {
            if (!*foreign) break;
            free(*foreign++);
            frees_left--;
            if (--per_thread == 0) {
                per_thread = per_thread_reset;
                foreign += slot_size - per_thread;
            }
        }
        if (++size_index == SIZES) size_index = 0;
        count = (int)histogram[size_index].count;
        size = (int)histogram[size_index].size;
        while (count--) {
            /* skip the part still holding the last pass's blocks */
            if (mp == save_start) mp = save_end;
            if (mp >= mpe) {
                mp = memory;
                save_start = save_end;
                if (save_start >= mpe) save_start = mp;
                save_end = save_start + heap / 5;
                if (save_end > mpe) save_end = mpe;
                while (mp < save_start) free(*mp++);
                mp = mpe;
                while (mp > save_end) free(*--mp);
                mp = memory;
            } else {
                if (!(*mp++ = malloc(size))) {
                    printf("Out of memory\n");
                    _exit(1);
                }
                char *p = mp[-1];
                p[0] = 0;
                p[size - 1] = 0;
            }
        }
    }
    /* what is left, and the array, stay allocated, as in the original */
    return NULL;
}

int main(int argc, char **argv) {
    nthreads = (unsigned long)get_nprocs();
    if (argc >= 2) {
        long l = strtol(argv[1], NULL, 10);
        if (l != 0) nthreads = (unsigned long)l;
    }
    if (argc >= 3) iterations_total = strtoul(argv[2], NULL, 10);
    if (argc >= 4) heap_total = strtoul(argv[3], NULL, 10);
    if (argc >= 5) foreign_total = strtoul(argv[4], NULL, 10);
    if (nthreads < 1) nthreads = 1;
    foreign_total /= nthreads * nthreads;
    foreign_total *= nthreads * nthreads;

    setbuf(stdout, NULL);
    pthread_t *tids = malloc(sizeof(pthread_t) * nthreads);
    /* volatile, as the original's: malloc + memset stay what they are
     * (the compiler would otherwise fold them into calloc, which need not
     * touch the pages) */
    void *volatile *volatile *volatile inter = NULL;
    struct inter_thread *bufs = NULL;
    if (!tids) goto oom;
    if (foreign_total) {
        inter = malloc(sizeof(void *) * foreign_total);
        bufs = malloc(sizeof(struct inter_thread) * nthreads);
        if (!inter || !bufs) goto oom;
        memset((void *)inter, 0, sizeof(void *) * foreign_total);
    }
    clock_t cpu0 = clock();
    time_t t0 = time(NULL);
    for (unsigned long t = 0; t < nthreads; t++) {
        void *arg = NULL;
        if (foreign_total) {
            bufs[t].index = (long)t;
            bufs[t].buf = (void ***)inter;
            arg = &bufs[t];
        }
        if (pthread_create(&tids[t], NULL, bench_thread, arg) != 0) {
            printf("\nfailed to start thread #%lu", t);
            nthreads = t;
            break;
        }
    }
    /* the blocks other threads free: all one size, to maximise collisions */
    if (foreign_total) {
        void *volatile *volatile *volatile next = inter;
        for (int i = 0; i < (int)foreign_total; i++) {
            void *volatile *volatile p = malloc(histogram[0].size);
            if (p) *p = (void *)next;
            *next++ = (void *)p;
        }
    }
    for (unsigned long t = nthreads; t--;) pthread_join(tids[t], NULL);
    free(tids);
    free((void *)inter);
    free(bufs);
    double elapsed = difftime(time(NULL), t0);
    double cpu = (double)(clock() - cpu0) / CLOCKS_PER_SEC;
    printf("\nTotal elapsed time for %lu threads: %.2f (%.4f CPU)\n", nthreads, elapsed, cpu);
    report_peak();
    return 0;
oom:
    printf("\nout of memory");
    return 1;
}
