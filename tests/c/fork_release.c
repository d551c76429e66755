/* fork() while threads give memory back to the OS: each thread allocates
 * a burst of 2-4 MiB blocks and frees it, so nearly every free passes the
 * dirty limit and gives whole pageblocks back (isolating them off the
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

static void burst(unsigned *x, int n) {
    void *v[64];
    for (int i = 0; i < n; i++) {
        *x = *x * 1103515245 + 12345;
        size_t sz = ((size_t)2 << 20) + (*x >> 8) % ((size_t)2 << 20);
        v[i] = malloc(sz);
        CHECK(v[i]);
        /* Resident, so there is something to give back. */
        for (size_t o = 0; o < sz; o += 4096) ((char *)v[i])[o] = 1;
    }
    for (int i = 0; i < n; i++) free(v[i]);
}

static void *worker(void *arg) {
    unsigned x = (unsigned)(uintptr_t)arg;
    for (unsigned n = 0; !stop; n++) {
        burst(&x, 8);
        /* The first thread trims too: the zone shrinks, taking whole
         * blocks offline with the lock dropped. */
        if (n % 2 == 0 && (uintptr_t)arg == 1) malloc_trim(0);
    }
    return NULL;
}

static int child(void) {
    alarm(15);
    if (pcp_stat("nr_isolated_pages") != 0) {
        fprintf(stderr, "child: %llu pages isolated at the fork\n", (unsigned long long)pcp_stat("nr_isolated_pages"));
        return 2;
    }
    uint64_t before = pcp_stat("balance_dirty");
    /* More than the parent's threads can have had in use (3 x 8 x 4 MiB)
     * at the fork: past the limit, whatever they left. */
    unsigned x = 7;
    burst(&x, 64);
    if (pcp_stat("balance_dirty") == before) {
        fprintf(stderr, "child: freed 64 x 2-4 MiB, no release for the dirty limit\n");
        return 3;
    }
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
