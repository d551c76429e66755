/* Allocate and touch blocks until malloc fails (a memory limit of ours, or
 * the OS refusing memory): the failure must be NULL with ENOMEM, never a
 * crash. Then free everything, optionally wait (so the maintenance tick
 * runs), and allocate again: at least as much must fit. Also small objects
 * and calloc near the edge. argv: block size in KiB, seconds to wait, and
 * the block size of the second round (default: the same) — memory that
 * freed huge blocks hold in their cache must serve large ones at the limit.
 */
#include "common.h"

static int fill_up(void **v, int cap, size_t n) {
    int k = 0;
    for (;;) {
        errno = 0;
        void *p = malloc(n);
        if (!p) {
            CHECK(errno == ENOMEM);
            return k;
        }
        memset(p, 0x5A, n);
        CHECK(k < cap);
        v[k++] = p;
    }
}

int main(int argc, char **argv) {
    require_pcpalloc();
    size_t n = (argc > 1 ? atol(argv[1]) : 1024) * 1024;
    int wait = argc > 2 ? atoi(argv[2]) : 0;
    static void *v[1 << 20];
    int first = fill_up(v, 1 << 20, n);
    CHECK(first > 0);
    /* Small objects and calloc fail cleanly too once nothing is left. */
    int small = 0;
    void *s[4096];
    while (small < 4096 && (s[small] = calloc(1, 3000)) != NULL) small++;
    for (int i = 0; i < small; i++) free(s[i]);
    for (int i = 0; i < first; i++) {
        CHECK(((unsigned char *)v[i])[n - 1] == 0x5A);
        free(v[i]);
    }
    if (wait) sleep(wait);
    size_t n2 = (argc > 3 ? atol(argv[3]) : (long)(n / 1024)) * 1024;
    int second = fill_up(v, 1 << 20, n2);
    for (int i = 0; i < second; i++) free(v[i]);
    double got = (double)second * n2, had = (double)first * n;
    CHECK(got >= had - had / 10 - (double)n2);
    printf("limit ok %d %d\n", first, second);
    return 0;
}
