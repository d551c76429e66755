/* Issue 42, item 2: what the thread storm of lc_thread_storm costs — the
 * same storm (argv[1] short threads in waves of argv[2], each allocating
 * 40 blocks of 64 B to 1 MiB written in their first argv[3] KiB and last
 * byte, leaving 4 small blocks for a later thread) — measured over the
 * storm alone: wall time, CPU time (user + system, every thread) and page
 * faults (minor and major) of the process; under pcpalloc also the slabs
 * it made. No idle wait: lc_thread_storm checks the memory. */
#include "issue_common.h"

#define WAVE_MAX 256
#define SLOTS 64
#define LEFT 4

static _Atomic(void *) slots[SLOTS];
static _Atomic unsigned long seq;
static pthread_barrier_t bar;
static size_t touch = 16 * KiB;

static void *worker(void *arg) {
    uint64_t seed = 0x632BE59BD9B4E019ULL * ((uintptr_t)arg + 1);
    void *v[40];
    for (int i = 0; i < 40; i++) {
        size_t n = rng_size(&seed, 64, MiB);
        char *p = malloc(n);
        CHECK(p);
        memset(p, i, n < touch ? n : touch);
        p[n - 1] = 1;
        keep(p);
        v[i] = p;
    }
    static const size_t left_sizes[LEFT] = {24, 200, 1000, 6000};
    for (int k = 0; k < LEFT; k++) {
        char *mine = malloc(left_sizes[k]);
        CHECK(mine);
        memset(mine, k, left_sizes[k]);
        unsigned long s = seq++ % SLOTS;
        free(atomic_exchange(&slots[s], (void *)mine));
    }
    pthread_barrier_wait(&bar);
    for (int i = 0; i < 40; i++) free(v[i]);
    return NULL;
}

static double cpu_s(const struct rusage *r) {
    return r->ru_utime.tv_sec + r->ru_utime.tv_usec * 1e-6 + r->ru_stime.tv_sec +
           r->ru_stime.tv_usec * 1e-6;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 5000;
    int wave = argc > 2 ? atoi(argv[2]) : 20;
    if (argc > 3) touch = (size_t)atol(argv[3]) * KiB;
    CHECK(wave > 0 && wave <= WAVE_MAX && n % wave == 0);
    pthread_barrier_init(&bar, NULL, (unsigned)wave);
    start_up();
    uint64_t slabs0 = 0, slabs1 = 0;
    const char *const names[] = {"slabs_created", NULL};
    int pcp = pcp_stat_first(names, &slabs0) != NULL;
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = now_s();
    for (int done = 0; done < n; done += wave) {
        pthread_t t[WAVE_MAX];
        for (int i = 0; i < wave; i++)
            CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(done + i)) == 0);
        for (int i = 0; i < wave; i++) CHECK(pthread_join(t[i], NULL) == 0);
    }
    double t1 = now_s();
    getrusage(RUSAGE_SELF, &r1);
    if (pcp) pcp_stat_first(names, &slabs1);
    printf("storm: wall %.3f cpu %.3f faults %ld slabs %lld\n", t1 - t0, cpu_s(&r1) - cpu_s(&r0),
           (r1.ru_minflt - r0.ru_minflt) + (r1.ru_majflt - r0.ru_majflt),
           pcp ? (long long)(slabs1 - slabs0) : -1LL);
    return 0;
}
