/* Issue 16, row 4: under PCPALLOC_MEMORY_LIMIT (argv[1], in MiB), 4
 * threads fill the heap with 1 MiB blocks until NULL, free everything,
 * then fill with 8 MiB blocks until NULL: round 2 must get at least 7/8 of
 * round 1's bytes (memory freed as 1 MiB blocks must serve 8 MiB ones). */
#include "issue_common.h"

#define THREADS 4
#define CAP 4096

static size_t limit;
static pthread_barrier_t bar;
static _Atomic size_t round_bytes[2];
static const size_t sizes[2] = {1 * MiB, 8 * MiB};
static _Atomic int bad_errno;

static void *worker(void *arg) {
    (void)arg;
    static _Thread_local void *v[CAP];
    for (int r = 0; r < 2; r++) {
        size_t n = sizes[r];
        int k = 0;
        pthread_barrier_wait(&bar);
        for (;;) {
            errno = 0;
            void *p = malloc(n);
            if (!p) {
                if (errno != ENOMEM) bad_errno = errno ? errno : -1;
                break;
            }
            ((char *)p)[0] = 1;
            ((char *)p)[n - 1] = 1;
            keep(p);
            v[k++] = p;
            round_bytes[r] += n;
            /* Not limited at all (no pcpalloc, or the limit ignored). */
            if (round_bytes[r] > 4 * limit || k == CAP) break;
        }
        pthread_barrier_wait(&bar);
        for (int i = 0; i < k; i++) free(v[i]);
    }
    return NULL;
}

int main(int argc, char **argv) {
    require_pcpalloc();
    limit = (size_t)atol(argc > 1 ? argv[1] : "64") * MiB;
    pthread_barrier_init(&bar, NULL, THREADS);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) CHECK(pthread_create(&t[i], NULL, worker, NULL) == 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    size_t a = round_bytes[0], b = round_bytes[1];
    printf("round 1 (1 MiB blocks): %zu MiB; round 2 (8 MiB blocks): %zu MiB\n", a / MiB,
           b / MiB);
    int bad = 0;
    if (bad_errno) {
        printf("FAIL: a NULL came with errno %d, not ENOMEM\n", bad_errno);
        bad = 1;
    }
    if (a > 4 * limit) {
        printf("FAIL: the limit of %zu MiB was not enforced\n", limit / MiB);
        bad = 1;
    }
    if (a == 0 || b * 8 < a * 7) {
        printf("FAIL: round 2 got %zu MiB, less than 7/8 of round 1's %zu MiB\n", b / MiB,
               a / MiB);
        bad = 1;
    }
    if (bad) return 1;
    printf("budget_fill_shift ok\n");
    return 0;
}
