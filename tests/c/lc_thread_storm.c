/* Issue 17, row 9: a storm of argv[1] (5,000) short threads in waves of
 * argv[2] (20) alive at once (a barrier), each allocating a mix of sizes
 * (40 blocks of about 64 B to 1 MiB, a few MiB in all; the first argv[3]
 * (16) KiB and the last byte of each written), leaving 4 small blocks (of
 * different size classes) for a later thread to free — so an exited
 * thread's heap still has objects that another thread frees — and freeing
 * the rest. Then main sleeps 2 s without calling the allocator. With
 * PCPALLOC_BACKGROUND=0 and PCPALLOC_DECAY_MS=100 (set by the test) VmRSS
 * at the end must be within 16 MiB of its value before the storm. */
#include "issue_common.h"

#define WAVE_MAX 256
#define SLOTS 64
#define LEFT 4

static _Atomic(void *) slots[SLOTS];
static _Atomic unsigned long seq;
static pthread_barrier_t bar;
static size_t touch = 16 * KiB;
static int wave = 20;

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
    pthread_barrier_wait(&bar); /* the whole wave alive at once */
    for (int i = 0; i < 40; i++) free(v[i]);
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 5000;
    if (argc > 2) wave = atoi(argv[2]);
    if (argc > 3) touch = (size_t)atol(argv[3]) * KiB;
    CHECK(wave > 0 && wave <= WAVE_MAX && n % wave == 0);
    pthread_barrier_init(&bar, NULL, (unsigned)wave);
    start_up();
    uint64_t rss0 = vm_rss();
    double t0 = now_s();
    for (int done = 0; done < n; done += wave) {
        pthread_t t[WAVE_MAX];
        for (int i = 0; i < wave; i++)
            CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(done + i)) == 0);
        for (int i = 0; i < wave; i++) CHECK(pthread_join(t[i], NULL) == 0);
    }
    double t1 = now_s();
    uint64_t rss1 = vm_rss();
    sleep_ms(2000);
    uint64_t rss = vm_rss();
    printf("%d threads in %.2f s: VmRSS %.1f MiB before, %.1f MiB after the storm, %.1f MiB after "
           "2 s idle\n",
           n, t1 - t0, (double)rss0 / MiB, (double)rss1 / MiB, (double)rss / MiB);
    if (rss > rss0 + 16 * MiB) {
        printf("FAIL: VmRSS %.1f MiB above its value before the storm after 2 s idle (at most "
               "16 MiB)\n",
               (double)(rss - rss0) / MiB);
        return 1;
    }
    printf("lc_thread_storm ok\n");
    return 0;
}
