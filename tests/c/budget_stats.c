/* Issue 16, row 8: the statistics follow frees at once.
 * A: free a 20 MiB block: allocated_bytes (pcpalloc_stat) and mallinfo2's
 *    uordblks + hblkhd drop by 20 MiB (within 64 KiB) right after the free.
 * B: thread A allocates 10,000 x 64 B objects and hands them to thread B,
 *    which frees them all while A sleeps (an idle owner): allocated_bytes
 *    and mallinfo2 drop accordingly (within 64 KiB) before A wakes. */
#include "issue_common.h"

#define OBJS 10000

static size_t mi(void) {
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

static uint64_t allocated(void) {
    stat_fn f = pcp_stat_fn();
    uint64_t v = 0;
    if (f) CHECK(f("allocated_bytes", &v) == 0);
    return v;
}

static void *objs[OBJS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int stage;

static void wait_stage(int s) {
    pthread_mutex_lock(&mu);
    while (stage < s) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

static void set_stage(int s) {
    pthread_mutex_lock(&mu);
    stage = s;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void *owner(void *arg) {
    (void)arg;
    for (int i = 0; i < OBJS; i++) {
        objs[i] = malloc(64);
        CHECK(objs[i]);
        memset(objs[i], 7, 64);
        keep(objs[i]);
    }
    set_stage(1);
    wait_stage(3); /* idle until main has read the statistics */
    return NULL;
}

static void *freer(void *arg) {
    (void)arg;
    for (int i = 0; i < OBJS; i++) free(objs[i]);
    return NULL;
}

int main(void) {
    int pcp = pcp_stat_fn() != NULL;
    int bad = 0;

    /* A */
    char *p = malloc(20 * MiB);
    CHECK(p);
    memset(p, 1, 20 * MiB);
    keep(p);
    uint64_t a1 = allocated();
    size_t m1 = mi();
    free(p);
    uint64_t a2 = allocated();
    size_t m2 = mi();
    printf("20 MiB block: allocated_bytes %llu -> %llu, mallinfo2 uordblks+hblkhd %zu -> %zu\n",
           (unsigned long long)a1, (unsigned long long)a2, m1, m2);
    /* Within 64 KiB: freeing a big block may start the allocator's
     * maintenance thread, whose start allocates a little. */
    if (pcp && !(a1 + 64 * 1024 >= a2 + 20 * MiB)) {
        printf("FAIL: allocated_bytes dropped by %lld bytes after freeing 20 MiB\n",
               (long long)(a1 - a2));
        bad = 1;
    }
    if (!(m1 + 64 * 1024 >= m2 + 20 * MiB)) {
        printf("FAIL: mallinfo2 uordblks+hblkhd dropped by %lld bytes after freeing 20 MiB\n",
               (long long)(m1 - m2));
        bad = 1;
    }

    /* B */
    pthread_t a, b;
    CHECK(pthread_create(&a, NULL, owner, NULL) == 0);
    wait_stage(1);
    uint64_t b1 = allocated();
    size_t n1 = mi();
    CHECK(pthread_create(&b, NULL, freer, NULL) == 0);
    pthread_join(b, NULL);
    uint64_t b2 = allocated();
    size_t n2 = mi();
    long long want = (long long)OBJS * 64 - 64 * 1024;
    printf("10,000 x 64 B freed by another thread, owner idle: allocated_bytes %llu -> %llu, "
           "mallinfo2 %zu -> %zu\n",
           (unsigned long long)b1, (unsigned long long)b2, n1, n2);
    if (pcp && (long long)(b1 - b2) < want) {
        printf("FAIL: allocated_bytes dropped by %lld bytes, not 640,000 (within 64 KiB)\n",
               (long long)(b1 - b2));
        bad = 1;
    }
    if ((long long)(n1 - n2) < want) {
        printf("FAIL: mallinfo2 uordblks+hblkhd dropped by %lld bytes, not 640,000 (within 64 "
               "KiB)\n",
               (long long)(n1 - n2));
        bad = 1;
    }
    set_stage(3);
    pthread_join(a, NULL);
    if (bad) return 1;
    printf("budget_stats ok\n");
    return 0;
}
