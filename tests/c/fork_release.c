/* fork() while threads give memory back to the OS: each thread allocates
 * bursts of 1 MiB and 4 MiB blocks and frees them (see burst), so many
 * frees pass the dirty limit and gives whole pageblocks back (isolating them off the
 * free lists while madvise runs without the zone lock), and the main
 * thread forks again and again. Each child, its only thread, must find
 * no block isolated (one would never be put back), and must itself give
 * memory back for the limit when it frees a burst (the releaser's flag
 * must not be left set by a thread that did not come along). One thread
 * also calls malloc_trim, whose shrink isolates whole blocks likewise. A
 * hung child dies of its alarm.
 *
 *   fork_release THREADS FORKS */
#include "issue_common.h"
#include <signal.h>
#include <sys/wait.h>

static volatile int stop;

static void *touched(size_t sz, size_t align) {
    char *p = align ? aligned_alloc(align, sz) : malloc(sz);
    CHECK(p);
    /* Resident, so there is something to give back. */
    for (size_t o = 0; o < sz; o += 4096) p[o] = 1;
    return p;
}

/* n blocks of 1 MiB and a page, aligned to 8 KiB (exact blocks of the
 * zone, of no size class: freed straight to the zone, not kept on a
 * pageset); every other one freed, leaving holes no 4 MiB block fits;
 * n/2 blocks of 4 MiB, so the zone's resident memory grows past its peak
 * use by the holes; those freed (whole free pageblocks), then the rest.
 * The dirty limit is judged against the recent peak of the use (a burst
 * freed whole is the peak's memory, which stays for the tick): the 4 MiB
 * blocks' frees pass it once the holes are more than its 8 MiB floor,
 * n > 16, and more than the ratio of the use (the test runs with
 * PCPALLOC_DIRTY_RATIO=20). */
static void burst(int n) {
    void *v[64], *w[32];
    for (int i = 0; i < n; i++) v[i] = touched(MiB + 4096, 8192);
    for (int i = 1; i < n; i += 2) free(v[i]);
    for (int i = 0; i < n / 2; i++) w[i] = touched(4 * MiB, 0);
    for (int i = 0; i < n / 2; i++) free(w[i]);
    for (int i = 0; i < n; i += 2) free(v[i]);
}

static void *worker(void *arg) {
    for (unsigned n = 0; !stop; n++) {
        burst(24);
        /* The first thread trims too: the zone shrinks, taking whole
         * blocks offline with the lock dropped. */
        if (n % 2 == 0 && (uintptr_t)arg == 1) malloc_trim(0);
    }
    return NULL;
}

static int child(void) {
    alarm(25);
    if (pcp_stat("nr_isolated_pages") != 0) {
        fprintf(stderr, "child: %llu pages isolated at the fork\n", (unsigned long long)pcp_stat("nr_isolated_pages"));
        return 2;
    }
    /* What the parent's threads left free goes back first, so the 4 MiB
     * blocks make the resident memory grow. */
    malloc_trim(0);
    uint64_t before = pcp_stat("balance_dirty");
    burst(64);
    if (pcp_stat("balance_dirty") == before) {
        fprintf(stderr, "child: freed 64 x 1 MiB and 32 x 4 MiB, no release for the dirty "
                        "limit\n");
        return 3;
    }
    /* The child's own background thread may be inside a release right
     * now: its isolated blocks must come back, not be none at this
     * instant (within 10 s: a loaded machine may not run that thread for
     * a while; the alarm above stops a hang). */
    for (int i = 0; i < 1000 && pcp_stat("nr_isolated_pages") != 0; i++)
        usleep(10000);
    CHECK(pcp_stat("nr_isolated_pages") == 0);
    return 0;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 3;
    int forks = argc > 2 ? atoi(argv[2]) : 40;
    pthread_t t[16];
    for (int i = 0; i < threads; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0);
    int failed = 0;
    for (int f = 0; f < forks; f++) {
        usleep(2000);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(child());
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "fork %d: child %s %d\n", f, WIFEXITED(st) ? "exited" : "killed by",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            failed++;
        }
    }
    stop = 1;
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    CHECK(pcp_stat("balance_dirty") > 0);
    CHECK(failed == 0);
    printf("fork_release ok\n");
    return 0;
}
