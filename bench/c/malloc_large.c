/* malloc-large (as mimalloc-bench runs it, after Leonid Stolyarov's report
 * in mimalloc issue #447): 2000 times, a buffer of 5-25 MiB replaces one of
 * 20 live ones at random, and is filled with zeros first (C++'s
 * make_unique<char[]>(n) value-initialises) — so every allocation writes
 * all its pages. An allocator that maps and unmaps each buffer pays the
 * page faults again each time; one that reuses freed memory does not.
 *
 *   malloc_large [ITERATIONS] */
#include "bench.h"

#define BUFFERS 20
#define MIN_SIZE (5u << 20)
#define MAX_SIZE (25u << 20)

/* Through a pointer the compiler cannot see through: it would otherwise
 * turn malloc + memset(0) into calloc, which a fresh mapping serves
 * without touching a page. */
static void *(*volatile fill)(void *, int, size_t) = memset;

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 2000;
    void *buf[BUFFERS] = {0};
    uint64_t seed = 42;
    for (long i = 0; i < iters; i++) {
        int k = (int)(rng_next(&seed) % BUFFERS);
        size_t n = rng_range(&seed, MIN_SIZE, MAX_SIZE);
        char *p = xmalloc(n);
        fill(p, 0, n);
        free(buf[k]); /* the old buffer goes after the new one is made */
        buf[k] = p;
    }
    for (int k = 0; k < BUFFERS; k++) free(buf[k]);
    report_peak();
    return 0;
}
