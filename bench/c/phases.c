/* Phases of temporaries with a few objects that live on (issue 19's
 * mobility grouping): ROUNDS rounds; round r (1-based) builds r/ROUNDS of
 * MIB MiB of temporary objects of 128-511 bytes, keeping one object of
 * 16-95 bytes for every 16 temporaries, then frees the temporaries in
 * random order — a compiler's passes over the declarations it keeps, a
 * server's requests around the sessions it keeps. The kept objects land
 * wherever free memory is when they are made: among the temporaries, the
 * pageblocks those leave behind cannot go back to the OS whole.
 *
 * Prints how many 2 MiB pageblocks hold a kept object, then waits WAIT
 * seconds (the allocator's idle-memory return) and prints the anonymous
 * memory left resident and its huge-page share, and the peak RSS.
 *
 *   phases [ROUNDS] [MIB] [WAIT]     default 6 rounds, 256 MiB, 2.5 s */
#include "bench.h"
#include <time.h>

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 6;
    long mib = argc > 2 ? atol(argv[2]) : 256;
    double wait = argc > 3 ? atof(argv[3]) : 2.5;
    uint64_t seed = 7;
    /* Temporaries average 320 bytes. */
    size_t most = ((size_t)mib << 20) / 320;
    char **temps = xmalloc(most * sizeof *temps);
    char **kept = xmalloc((most / 16 + 1) * (size_t)rounds * sizeof *kept);
    size_t nkept = 0;
    for (long r = 1; r <= rounds; r++) {
        size_t n = most * (size_t)r / (size_t)rounds;
        for (size_t i = 0; i < n; i++) {
            size_t sz = (size_t)rng_range(&seed, 128, 511);
            temps[i] = xmalloc(sz);
            memset(temps[i], (int)i, sz);
            if (i % 16 == 0) {
                size_t k = (size_t)rng_range(&seed, 16, 95);
                kept[nkept] = xmalloc(k);
                memset(kept[nkept++], 1, k);
            }
        }
        for (size_t i = n ? n - 1 : 0; i > 0; i--) {
            size_t j = (size_t)(rng_next(&seed) % (i + 1));
            char *t = temps[i];
            temps[i] = temps[j];
            temps[j] = t;
        }
        for (size_t i = 0; i < n; i++) free(temps[i]);
    }
    uintptr_t *pb = xmalloc(nkept * sizeof *pb);
    for (size_t i = 0; i < nkept; i++) pb[i] = (uintptr_t)kept[i] >> 21;
    size_t blocks = count_distinct(pb, nkept);
    free(pb);
    printf("kept_kib %zu\n", nkept * 56 / 1024);
    printf("pageblocks_kept %zu\n", blocks);
    struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
    nanosleep(&ts, NULL);
    long huge = rollup("AnonHugePages:"), anon = rollup("Anonymous:");
    printf("after_anon_kib %ld\n", anon);
    printf("after_huge_share %.3f\n", anon > 0 ? (double)huge / (double)anon : 0.0);
    for (size_t i = 0; i < nkept; i++) free(kept[i]);
    free(kept);
    free(temps);
    report_peak();
    return 0;
}
