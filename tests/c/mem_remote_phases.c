/* Frees from another thread must not stay pinned (issue 43, item 3).
 *
 * Ten phases; in each the main thread (the owner) allocates about 64 MiB of
 * one size class — a new class each phase, so nobody refills an old one —
 * frees every other object itself, then hands the others to a second
 * thread, which frees them. While the other thread frees, the owner keeps
 * allocating and freeing objects of other sizes. Nothing from a phase lives
 * on into the next. (Had the other thread freed first, its first free of
 * each full slab would have told the owner: the delayed notice.)
 *
 * Prints the resident size after each phase and the peak (VmHWM) at the
 * end: "peak_rss_kib N". Exits 2 if a malloc returns NULL (run it under
 * PCPALLOC_MEMORY_LIMIT=512M). Runs on glibc too, as the reference. */
#include "issue_common.h"

#include <sys/mman.h>

#define PHASES 10
#define PHASE_BYTES (64 * MiB)

/* Ten distinct size classes of pcpalloc (16-byte steps to 256, then
 * 32-byte ones), none of them the churn's sizes. */
static const size_t SIZES[PHASES] = {48, 80, 112, 144, 176, 208, 240, 272, 304, 336};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static void **work;    /* objects for the other thread to free */
static size_t work_n;  /* how many */
static int work_ready; /* set by the owner, cleared by the other thread */
static int stop;

static void *freer(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (!work_ready && !stop) pthread_cond_wait(&cv, &mu);
        if (stop) {
            pthread_mutex_unlock(&mu);
            return NULL;
        }
        void **w = work;
        size_t n = work_n;
        pthread_mutex_unlock(&mu);
        for (size_t i = 0; i < n; i++) free(w[i]);
        pthread_mutex_lock(&mu);
        work_ready = 0;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
}

static void fail_null(int phase, size_t i, size_t size) {
    printf("malloc(%zu) returned NULL in phase %d after %zu objects\n", size, phase, i);
    fflush(stdout);
    exit(2);
}

/* The owner's other work while the other thread frees: objects of sizes
 * no phase uses, more than a bin holds, so its slow paths run. */
static void churn(int phase) {
    static void *q[2048];
    for (size_t k = 0; k < 2048; k++) {
        size_t size = (k & 1) ? 24 : 3000;
        q[k] = malloc(size);
        if (!q[k]) fail_null(phase, k, size);
        *(volatile char *)q[k] = (char)k;
    }
    for (size_t k = 0; k < 2048; k++) free(q[k]);
}

/* Hands the odd-indexed objects to the other thread. */
static void hand_over(void **v, size_t n) {
    size_t m = 0;
    for (size_t i = 1; i < n; i += 2) work[m++] = v[i];
    pthread_mutex_lock(&mu);
    work_n = m;
    work_ready = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

/* Churns until the other thread is done. */
static void wait_freed(int phase) {
    for (;;) {
        pthread_mutex_lock(&mu);
        int busy = work_ready;
        pthread_mutex_unlock(&mu);
        if (!busy) return;
        churn(phase);
    }
}

int main(void) {
    start_up();
    size_t most = PHASE_BYTES / SIZES[0] + 1;
    /* Bookkeeping outside the allocator under test. */
    void **v = mmap(NULL, most * sizeof(void *), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    work = mmap(NULL, most * sizeof(void *), PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(v != MAP_FAILED && work != MAP_FAILED);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, freer, NULL) == 0);
    for (int phase = 0; phase < PHASES; phase++) {
        size_t size = SIZES[phase], n = PHASE_BYTES / size;
        for (size_t i = 0; i < n; i++) {
            v[i] = malloc(size);
            if (!v[i]) fail_null(phase, i, size);
            *(size_t *)v[i] = i;
        }
        for (size_t i = 0; i < n; i += 2) free(v[i]);
        hand_over(v, n);
        wait_freed(phase);
        churn(phase);
        printf("phase %d size %zu rss_kib %llu\n", phase, size,
               (unsigned long long)(vm_rss() / 1024));
    }
    pthread_mutex_lock(&mu);
    stop = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(t, NULL);
    printf("peak_rss_kib %llu\n", (unsigned long long)(vm_hwm() / 1024));
    printf("mem_remote_phases ok\n");
    return 0;
}
