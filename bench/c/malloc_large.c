/* malloc_large: written from the published description of malloc-large
 * (Leonid Stolyarov's report in mimalloc issue #447, as mimalloc-bench
 * builds it: daanx/mimalloc-bench bench/malloc-large/malloc-large.cpp).
 * Same logic:
 *
 *   malloc_large [ITERATIONS]
 *   (the original: no arguments, 2000 iterations)
 *
 * 20 buffer slots; each iteration picks a slot and a size of 5-25 MiB
 * (uniform, from a generator seeded with 42 — the original uses mt19937,
 * here xorshift with the same distributions) and stores a new zero-filled
 * buffer there (C++ make_unique<char[]>(n): new char[n] and a fill), which
 * frees the slot's old buffer after the new one is made — so every
 * allocation writes all its pages, and an allocator that maps and unmaps
 * each buffer pays those page faults every time. The buffers left are
 * freed at exit. Prints the peak RSS (`peak_kib`) for our harness, which
 * times the process. new[] / delete[] are the C++ operators the program
 * would call: the preloaded allocator's, else libstdc++'s (cxx_new.h; the
 * compiler cannot turn new[] + memset into calloc). */
#include "bench.h"
#include "cxx_new.h"

#define BUFFERS 20
#define MIN_SIZE (5u << 20)
#define MAX_SIZE (25u << 20)

int main(int argc, char **argv) {
    cxx_init();
    long iters = argc > 1 ? atol(argv[1]) : 2000;
    char *buf[BUFFERS] = {0};
    uint64_t seed = 42;
    for (long i = 0; i < iters; i++) {
        int k = (int)rng_range(&seed, 0, BUFFERS - 1);
        size_t n = rng_range(&seed, MIN_SIZE, MAX_SIZE);
        char *p = cxx_new_array(n);
        memset(p, 0, n); /* the value-initialisation of new char[n]() */
        cxx_delete_array(buf[k]); /* the old buffer goes after the new one is made */
        buf[k] = p;
    }
    for (int k = 0; k < BUFFERS; k++) cxx_delete_array(buf[k]);
    report_peak();
    return 0;
}
