/* Issue 17, row 10: resident_bytes means what RSS means. 4 threads make a
 * 300 MiB burst of mixed sizes (about log-uniform, 16 B to 4 MiB; every
 * other block written in full, the rest only in their first 4 KiB, as
 * buffers often are), free it all and exit; main then sleeps 1 s (the test
 * sets PCPALLOC_DECAY_MS=100) and pcpalloc_stat("resident_bytes") must
 * agree with the growth of VmRSS since the start: within 25% of it or 8
 * MiB, whichever is larger. The same is checked at the peak of the burst,
 * while every block is live. */
#include "issue_common.h"

#define THREADS 4
#define CAP 50000

static _Atomic size_t burst;
static pthread_barrier_t bar;

static void *worker(void *arg) {
    uint64_t seed = 0x1234567ULL * ((uintptr_t)arg + 1);
    char **v = calloc(CAP, sizeof *v);
    CHECK(v);
    size_t total = 0;
    int k = 0;
    while (total < 300 * MiB / THREADS && k < CAP) {
        size_t n = rng_size(&seed, 16, 4 * MiB);
        char *p = malloc(n);
        CHECK(p);
        memset(p, 1, (k % 2 == 0 || n < 4096) ? n : 4096);
        keep(p);
        v[k++] = p;
        total += n;
    }
    burst += total;
    pthread_barrier_wait(&bar); /* main samples the peak */
    pthread_barrier_wait(&bar);
    for (int i = 0; i < k; i++) free(v[i]);
    free(v);
    return NULL;
}

/* Compares resident_bytes with VmRSS growth since rss0; 1 if they differ. */
static int compare(const char *when, uint64_t rss0) {
    uint64_t rss = vm_rss();
    uint64_t res = pcp_stat("resident_bytes");
    double growth = (double)rss - (double)rss0;
    if (growth < 0) growth = 0;
    double slack = growth / 4 > 8.0 * MiB ? growth / 4 : 8.0 * MiB;
    double diff = (double)res - growth;
    printf("%s: VmRSS %.1f MiB at start, %.1f MiB now (growth %.1f MiB); resident_bytes %.1f "
           "MiB\n",
           when, (double)rss0 / MiB, (double)rss / MiB, growth / MiB, (double)res / MiB);
    if (diff > slack || -diff > slack) {
        printf("FAIL: %s: resident_bytes %.1f MiB vs VmRSS growth %.1f MiB: off by %.1f MiB (at "
               "most %.1f MiB)\n",
               when, (double)res / MiB, growth / MiB, diff / MiB, slack / MiB);
        return 1;
    }
    return 0;
}

int main(void) {
    start_up();
    uint64_t rss0 = vm_rss();
    pthread_barrier_init(&bar, NULL, THREADS + 1);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) == 0);
    pthread_barrier_wait(&bar);
    char what[64];
    snprintf(what, sizeof what, "burst of %.1f MiB live", (double)burst / MiB);
    int bad = compare(what, rss0);
    pthread_barrier_wait(&bar);
    for (int i = 0; i < THREADS; i++) CHECK(pthread_join(t[i], NULL) == 0);
    sleep_ms(1000);
    bad |= compare("burst freed, 1 s idle", rss0);
    if (bad) return 1;
    printf("lc_resident ok\n");
    return 0;
}
