/* Issue 16, row 9 (and the "gets it back within a tick" delivery): a
 * single-threaded program allocates and touches argv[2] MiB — argv[1]
 * "block": one block, "small": blocks of 64 KiB, "binned": blocks of
 * 200 KiB (a heap too small to start the background thread on its own,
 * freed through the thread's large bins) — frees it and then sleeps
 * without calling malloc. VmRSS must come back to within 8 MiB of its value
 * before the allocation within argv[3] milliseconds (the test sets
 * PCPALLOC_DECAY_MS=100). */
#include "issue_common.h"

int main(int argc, char **argv) {
    int small = argc > 1 && strcmp(argv[1], "small") == 0;
    int binned = argc > 1 && strcmp(argv[1], "binned") == 0;
    size_t total = (size_t)(argc > 2 ? atol(argv[2]) : 64) * MiB;
    long within_ms = argc > 3 ? atol(argv[3]) : 1000;
    size_t each = small ? 64 * KiB : binned ? 200 * KiB : total;
    int n = (int)(total / each);
    char **v = calloc((size_t)n, sizeof *v);
    CHECK(v);
    start_up();
    uint64_t rss0 = vm_rss();
    for (int i = 0; i < n; i++) {
        v[i] = malloc(each);
        CHECK(v[i]);
        memset(v[i], 1, each);
        keep(v[i]);
    }
    uint64_t rss1 = vm_rss();
    for (int i = 0; i < n; i++) free(v[i]);
    double t0 = now_s();
    uint64_t rss = vm_rss();
    while (rss > rss0 + 8 * MiB && (now_s() - t0) * 1000 < within_ms) {
        sleep_ms(20);
        rss = vm_rss();
    }
    double took = now_s() - t0;
    printf("%d x %zu KiB: VmRSS %.1f MiB before, %.1f MiB with them, %.1f MiB %.2f s after the "
           "free\n",
           n, each / KiB, (double)rss0 / MiB, (double)rss1 / MiB, (double)rss / MiB, took);
    if (rss > rss0 + 8 * MiB) {
        printf("FAIL: VmRSS still %.1f MiB above its value before the allocation after %ld ms "
               "of idling\n",
               (double)(rss - rss0) / MiB, within_ms);
        return 1;
    }
    printf("budget_idle_return ok\n");
    return 0;
}
