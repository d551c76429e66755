/* kbuild: workers run short jobs (small objects and page-sized buffers,
 * all freed at the end); every eighth job on a short-lived thread. */
#include "bench.h"

static long jobs_per_worker;

static void job(uint64_t *s) {
    static __thread void *small[1500];
    static __thread void *pages[24];
    int ns = rng_range(s, 300, 1500), np = rng_range(s, 4, 24);
    for (int i = 0; i < ns; i++) {
        size_t n = rng_next(s) % 8 == 0 ? rng_range(s, 256, 2048) : rng_range(s, 16, 192);
        small[i] = xmalloc(n);
        memset(small[i], 1, n < 64 ? n : 64);
    }
    for (int i = 0; i < np; i++) {
        size_t n = rng_range(s, 1, 16) * 4096;
        pages[i] = xmalloc(n);
        for (size_t o = 0; o < n; o += 4096) ((char *)pages[i])[o] = 2;
    }
    for (int i = 0; i < ns; i++) free(small[i]);
    for (int i = np - 1; i >= 0; i--) free(pages[i]);
}

static void *job_thread(void *arg) {
    uint64_t s = (uintptr_t)arg | 1;
    job(&s);
    return NULL;
}

static void *worker(void *arg) {
    uint64_t s = (uintptr_t)arg * 7 + 3;
    for (long n = 0; n < jobs_per_worker; n++) {
        if (n % 8 == 7) {
            pthread_t t;
            pthread_create(&t, NULL, job_thread, (void *)(uintptr_t)rng_next(&s));
            pthread_join(t, NULL);
        } else {
            job(&s);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    long scale = scale_arg(argc, argv);
    int workers = 4;
    jobs_per_worker = 10000 * scale;
    pthread_t t[4];
    for (long i = 0; i < workers; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < workers; i++) pthread_join(t[i], NULL);
    report_peak();
    return 0;
}
