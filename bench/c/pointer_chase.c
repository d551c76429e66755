/* Huge pages (issue 19), written from its description: MIB MiB of 64-byte
 * nodes, each its own malloc, linked in one random cycle and chased for
 * SECS seconds — TLB-bound, as a graph, an index or an interpreter heap
 * is. Prints the time per hop, the share of the process's anonymous memory
 * in transparent huge pages (smaps_rollup's AnonHugePages over Anonymous)
 * before and after the chase, and the peak RSS. Then frees 90% of the nodes
 * at random — printing how many 2 MiB pageblocks still hold a live one —
 * waits WAIT seconds and prints what stays resident and its
 * huge-page share, as a fragmentation figure.
 *
 *   pointer_chase [MIB] [SECS] [WAIT]      default 1024 MiB, 4 s, 2.5 s */
#include "bench.h"

struct node {
    struct node *next;
    char pad[56];
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 1024;
    double secs = argc > 2 ? atof(argv[2]) : 4.0;
    size_t n = (size_t)mib << 20 >> 6;
    struct node **nodes = xmalloc(n * sizeof *nodes);
    for (size_t i = 0; i < n; i++) {
        nodes[i] = xmalloc(sizeof(struct node));
        nodes[i]->next = NULL;
    }
    /* A random cycle: shuffle, then link in shuffled order. */
    uint64_t seed = 42;
    size_t *perm = xmalloc(n * sizeof *perm);
    for (size_t i = 0; i < n; i++) perm[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(rng_next(&seed) % (i + 1));
        size_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < n; i++) nodes[perm[i]]->next = nodes[perm[(i + 1) % n]];
    free(perm);
    long huge = rollup("AnonHugePages:"), anon = rollup("Anonymous:");
    struct node *p = nodes[0];
    long hops = 0;
    double t0 = now(), t1;
    do {
        for (int k = 0; k < 100000; k++) p = p->next;
        hops += 100000;
        t1 = now();
    } while (t1 - t0 < secs);
    printf("ns_per_hop %.2f\n", (t1 - t0) * 1e9 / (double)hops);
    long huge_end = rollup("AnonHugePages:"), anon_end = rollup("Anonymous:");
    printf("huge_share_end %.3f\n", anon_end > 0 ? (double)huge_end / (double)anon_end : 0.0);
    printf("huge_share %.3f\n", anon > 0 ? (double)huge / (double)anon : 0.0);
    printf("anon_kib %ld\n", anon);
    printf("anon_huge_kib %ld\n", huge);
    printf("end %p\n", (void *)p);
    /* Fragmentation: free 90% of the nodes at random, give the allocator
     * WAIT seconds (its idle-memory return), then see what is resident and
     * how much of it is still in huge pages: an allocator that returns the
     * freed memory 4 KiB at a time splits its huge pages. */
    double wait = argc > 3 ? atof(argv[3]) : 2.5;
    /* Pageblocks (2 MiB) holding a node before, and still holding a live
     * one after: the others could go back to the OS whole. */
    uintptr_t *pb = xmalloc(n * sizeof *pb);
    for (size_t i = 0; i < n; i++) pb[i] = (uintptr_t)nodes[i] >> 21;
    size_t blocks_before = count_distinct(pb, n);
    for (size_t i = 0; i < n; i++)
        if ((rng_next(&seed) % 10) != 0) {
            free(nodes[i]);
            nodes[i] = NULL;
        }
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (nodes[i]) pb[m++] = (uintptr_t)nodes[i] >> 21;
    size_t blocks_after = count_distinct(pb, m);
    free(pb);
    printf("pageblocks_before %zu\n", blocks_before);
    printf("pageblocks_live_after %zu\n", blocks_after);
    struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
    nanosleep(&ts, NULL);
    huge = rollup("AnonHugePages:");
    anon = rollup("Anonymous:");
    printf("after_free_anon_kib %ld\n", anon);
    printf("after_free_huge_share %.3f\n", anon > 0 ? (double)huge / (double)anon : 0.0);
    for (size_t i = 0; i < n; i++) free(nodes[i]);
    free(nodes);
    report_peak();
    return 0;
}
