/* The page band's blocks (8–256 KiB, sizes spread evenly over the
 * doublings) through the large bins, every block's contents checked.
 *
 *   band_free one OPS    one thread keeps LIVE blocks, frees one at random
 *                        and allocates one in its place, OPS times;
 *   band_free pair OPS   two threads do so, each handing every fourth block
 *                        it frees to the other (through a ring), which frees
 *                        it there — the page band's cross-thread frees.
 *
 * Each block holds its size and a pattern in its first and last 64 bytes,
 * checked before it is freed. Prints, under pcpalloc, the bins' requests,
 * hits and spilled pages (pcpalloc_stat), then "band_free ok". */
#include "common.h"

#include "ring.h"

#include <dlfcn.h>

#define LIVE 64
#define EDGE 64

static long ops;

static struct ring rings[2];

/* 8 KiB << k plus up to as much again, k in 0..4: even over the doublings. */
static size_t pick(uint64_t *s) {
    size_t base = (size_t)8192 << (next(s) % 5);
    size_t n = base + next(s) % base;
    return n > (256 << 10) ? 256 << 10 : n;
}

static void mark(char *p, size_t n) {
    *(size_t *)p = n;
    fill(p + sizeof(size_t), EDGE, (unsigned)n);
    fill(p + n - EDGE, EDGE, (unsigned)n + 1);
}

static void verify_and_free(void *block) {
    char *p = block;
    size_t n = *(size_t *)p;
    CHECK(n >= 8192 && n <= (256 << 10));
    CHECK(check(p + sizeof(size_t), EDGE, (unsigned)n));
    CHECK(check(p + n - EDGE, EDGE, (unsigned)n + 1));
    free(p);
}

static char *new_block(uint64_t *s) {
    size_t n = pick(s);
    char *p = malloc(n);
    CHECK(p != NULL);
    mark(p, n);
    return p;
}

struct worker {
    int me, hand;
};

static void *work(void *arg) {
    struct worker *w = arg;
    uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(w->me + 1);
    char *live[LIVE];
    for (int i = 0; i < LIVE; i++) live[i] = new_block(&seed);
    for (long i = 0; i < ops; i++) {
        if (w->hand) ring_drain(&rings[w->me], verify_and_free);
        int k = (int)(next(&seed) % LIVE);
        if (w->hand && (next(&seed) & 3) == 0)
            ring_hand_over(&rings[1 - w->me], live[k], verify_and_free);
        else
            verify_and_free(live[k]);
        live[k] = new_block(&seed);
    }
    for (int i = 0; i < LIVE; i++) verify_and_free(live[i]);
    return NULL;
}

static void print_stat(int (*stat)(const char *, uint64_t *), const char *name) {
    uint64_t v = 0;
    if (stat && stat(name, &v) == 0) printf("%s %llu\n", name, (unsigned long long)v);
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    int pair = strcmp(argv[1], "pair") == 0;
    CHECK(pair || strcmp(argv[1], "one") == 0);
    ops = atol(argv[2]);
    if (pair) {
        struct worker w[2] = {{0, 1}, {1, 1}};
        pthread_t t[2];
        for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, work, &w[i]) == 0);
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        for (int i = 0; i < 2; i++) ring_drain(&rings[i], verify_and_free);
    } else {
        struct worker w = {0, 0};
        work(&w);
    }
    int (*stat)(const char *, uint64_t *) =
        (int (*)(const char *, uint64_t *))dlsym(RTLD_DEFAULT, "pcpalloc_stat");
    print_stat(stat, "large_bin_allocs");
    print_stat(stat, "large_bin_hits");
    print_stat(stat, "large_bin_spilled_pages");
    printf("band_free ok\n");
    return 0;
}
