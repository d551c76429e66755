/* Issue 17, row 4: argv[1] threads (2,000), created in waves of 20 and
 * joined, each allocating a little; their pthread key destructors allocate
 * and free, and set the key again, so they run in every destructor round —
 * after the allocator's own thread-exit hook has run. Afterwards the
 * number of thread heaps must stay small (pcpalloc_stat("heaps") <= 64) and
 * VmRSS must not grow by more than 16 MiB. */
#include "issue_common.h"

#define WAVE 20

static pthread_key_t key;
static _Atomic long dtor_calls;

static void dtor(void *v) {
    dtor_calls++;
    char *p = malloc(48);
    CHECK(p);
    memset(p, 1, 48);
    keep(p);
    char *q = malloc(5000);
    CHECK(q);
    memset(q, 2, 5000);
    keep(q);
    free(p);
    free(q);
    pthread_setspecific(key, v); /* run again next round */
}

static void *worker(void *arg) {
    (void)arg;
    void *v[16];
    for (int i = 0; i < 16; i++) {
        size_t n = (size_t)16 << (i % 11);
        v[i] = malloc(n);
        CHECK(v[i]);
        memset(v[i], 3, n);
        keep(v[i]);
    }
    for (int i = 0; i < 16; i++) free(v[i]);
    pthread_setspecific(key, (void *)1);
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    start_up();
    CHECK(pthread_key_create(&key, dtor) == 0);
    uint64_t rss0 = vm_rss();
    for (int done = 0; done < n; done += WAVE) {
        pthread_t t[WAVE];
        for (int i = 0; i < WAVE; i++) CHECK(pthread_create(&t[i], NULL, worker, NULL) == 0);
        for (int i = 0; i < WAVE; i++) CHECK(pthread_join(t[i], NULL) == 0);
    }
    uint64_t rss = vm_rss();
    int bad = 0;
    printf("%d threads, %ld destructor calls: VmRSS %.1f MiB -> %.1f MiB (+%.1f MiB)\n", n,
           (long)dtor_calls, (double)rss0 / MiB, (double)rss / MiB,
           ((double)rss - (double)rss0) / MiB);
    if (pcp_stat_fn()) {
        uint64_t heaps = pcp_stat("heaps");
        printf("heaps %llu, heaps_active %llu, heaps_abandoned %llu\n", (unsigned long long)heaps,
               (unsigned long long)pcp_stat("heaps_active"),
               (unsigned long long)pcp_stat("heaps_abandoned"));
        if (heaps > 64) {
            printf("FAIL: %llu thread heaps after %d threads have exited (at most 64)\n",
                   (unsigned long long)heaps, n);
            bad = 1;
        }
    }
    if (rss > rss0 + 16 * MiB) {
        printf("FAIL: VmRSS grew by %.1f MiB (at most 16 MiB)\n", (double)(rss - rss0) / MiB);
        bad = 1;
    }
    if (bad) return 1;
    printf("lc_key_dtors ok\n");
    return 0;
}
