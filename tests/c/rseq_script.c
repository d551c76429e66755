/* A scripted single-thread sequence through the pagesets (issue 45): the
 * same operations in the same order on every run — blocks of 8 KiB-256 KiB
 * (the large lists) from a fixed seed, and bursts of small objects (slabs
 * made and emptied: the order lists) — so that the pagesets' heuristics
 * counters in the report at exit (PCPALLOC_STATS=1) can be compared
 * between entries. Run it pinned to one CPU (taskset).
 *
 *   rseq_script [OPS] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t s = 88172645463325252ull;
static uint64_t rnd(void) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
}

int main(int argc, char **argv) {
    long ops = argc > 1 ? atol(argv[1]) : 20000;
    static void *live[96];
    static void *small[3000];
    for (long i = 0; i < ops; i++) {
        int k = rnd() % 96;
        free(live[k]);
        size_t n = (size_t)8192 << (rnd() % 6);
        n += rnd() % n;
        if (n > 262144) n = 262144;
        live[k] = malloc(n);
        memset(live[k], 1, 64);
        if (i % 2000 == 1000) {
            size_t m = (size_t)64 << (i / 2000 % 7);
            for (int j = 0; j < 3000; j++) small[j] = malloc(m), memset(small[j], 2, 16);
            for (int j = 0; j < 3000; j++) free(small[j]);
        }
    }
    for (int k = 0; k < 96; k++) free(live[k]);
    printf("rseq_script ok\n");
    return 0;
}
