/* sh6bench (MicroQuill SmartHeap, as in mimalloc-bench): per thread,
 * rounds of allocating arrays of blocks of growing sizes and freeing them
 * in alternating LIFO and FIFO order, plus some realloc. */
#include "bench.h"

#define MAXBLK 2500
static long rounds;

static void *worker(void *arg) {
    uint64_t s = (uintptr_t)arg | 1;
    void **v = xmalloc(MAXBLK * sizeof *v);
    for (long r = 0; r < rounds; r++) {
        size_t maxsz = 8u << (r % 8);
        int n = MAXBLK;
        for (int i = 0; i < n; i++) {
            size_t sz = rng_range(&s, 1, maxsz);
            v[i] = xmalloc(sz);
            ((char *)v[i])[0] = (char)i;
        }
        for (int i = 0; i < n; i += 7) v[i] = realloc(v[i], rng_range(&s, 1, maxsz * 2));
        if (r % 2 == 0)
            for (int i = n - 1; i >= 0; i--) free(v[i]);
        else
            for (int i = 0; i < n; i++) free(v[i]);
    }
    free(v);
    return NULL;
}

int main(int argc, char **argv) {
    long scale = scale_arg(argc, argv);
    rounds = 2000 * scale;
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    report_peak();
    return 0;
}
