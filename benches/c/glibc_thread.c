/* glibc's benchtests/bench-malloc-thread: each thread keeps a working set
 * of 1000 blocks (sizes up to 4 KiB, biased small as in the original) and
 * replaces a random one per iteration. */
#include "bench.h"

#define WORKING_SET 1000
static long iters;

static size_t pick_size(uint64_t *s) {
    /* The original draws sizes from an inverse-square distribution up to
     * 4096 bytes: mostly small, a long tail. */
    double u = (double)((rng_next(s) >> 11) + 1) / (double)(1ull << 53);
    size_t n = (size_t)(4.0 / (u * u + 0.001));
    return n < 4 ? 4 : n > 4096 ? 4096 : n;
}

static void *worker(void *arg) {
    uint64_t s = (uintptr_t)arg | 1;
    void *ws[WORKING_SET] = {0};
    for (long i = 0; i < iters; i++) {
        int k = rng_next(&s) % WORKING_SET;
        free(ws[k]);
        ws[k] = xmalloc(pick_size(&s));
    }
    for (int k = 0; k < WORKING_SET; k++) free(ws[k]);
    return NULL;
}

int main(int argc, char **argv) {
    long scale = scale_arg(argc, argv);
    int threads = argc > 2 ? atoi(argv[2]) : 4;
    iters = scale ? 40000000L * scale / threads : 1000000;
    pthread_t t[64];
    for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    report_peak();
    return 0;
}
