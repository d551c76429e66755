/* Issue 16, row 7: under PCPALLOC_MEMORY_LIMIT (argv[1], in MiB), 4
 * threads for argv[2] seconds replace random blocks (about log-uniform, 8 B
 * to 8 MiB, first and last byte touched), keeping the live bytes (a shared
 * counter of requested bytes) at most 300 MiB. A malloc that fails while
 * live + request <= 7/8 of the limit is a failure that must not happen. */
#include "issue_common.h"

#define THREADS 4
#define SLOTS 96
#define LIVE_MAX (300 * MiB)

static size_t limit;
static double seconds;
static _Atomic size_t live;
static _Atomic long mallocs, fails, fitting_fails, max_fit_live;
static _Atomic size_t worst_req;
static _Atomic size_t live_peak;

static void *worker(void *arg) {
    int me = (int)(intptr_t)arg;
    uint64_t seed = 0xD1B54A32D192ED03ULL * (uint64_t)(me + 1);
    char *v[SLOTS] = {0};
    size_t sz[SLOTS] = {0};
    double end = now_s() + seconds;
    long iter = 0;
    while ((iter++ & 63) || now_s() < end) {
        int j = (int)(rng_next(&seed) % SLOTS);
        if (v[j]) {
            free(v[j]);
            live -= sz[j];
            v[j] = NULL;
        }
        size_t n = rng_size(&seed, 8, 8 * MiB);
        if (live + n > LIVE_MAX) continue;
        mallocs++;
        char *p = malloc(n);
        if (!p) {
            size_t l = live;
            fails++;
            if (l + n <= limit / 8 * 7) {
                fitting_fails++;
                if ((long)l > max_fit_live) max_fit_live = (long)l;
                if (n > worst_req) worst_req = n;
            }
            continue;
        }
        p[0] = 1;
        p[n - 1] = 1;
        keep(p);
        v[j] = p;
        sz[j] = n;
        size_t l = (live += n);
        if (l > live_peak) live_peak = l;
    }
    for (int j = 0; j < SLOTS; j++)
        if (v[j]) {
            free(v[j]);
            live -= sz[j];
        }
    return NULL;
}

int main(int argc, char **argv) {
    require_pcpalloc();
    limit = (size_t)atol(argc > 1 ? argv[1] : "512") * MiB;
    seconds = argc > 2 ? atof(argv[2]) : 6;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    printf("%ld mallocs, %ld NULL, %ld NULL that would have fit (live + request <= 7/8 of "
           "%zu MiB; largest request %zu, live up to %.1f MiB then); live peaked at %.1f MiB\n",
           (long)mallocs, (long)fails, (long)fitting_fails, limit / MiB, (size_t)worst_req,
           (double)max_fit_live / MiB, (double)live_peak / MiB);
    if (fitting_fails) {
        printf("FAIL: %ld mallocs returned NULL although they fitted in the limit\n",
               (long)fitting_fails);
        return 1;
    }
    printf("budget_replace ok\n");
    return 0;
}
