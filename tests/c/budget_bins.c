/* The large bins under the memory budget: freed blocks of up to 256 KiB
 * kept for their thread (its large bins) are not lost to the others.
 *
 *   budget_bins idle   thread A frees 48 x 96 KiB and stays alive; its
 *                      bins keep some (large_bin_pages > 0), while main
 *                      allocates nothing;
 *   budget_bins limit  the same, then main fills the memory limit with
 *                      1 MiB blocks: the reclaim at the limit spills A's
 *                      bins too (large_bin_pages == 0 afterwards, and every
 *                      block main got was usable);
 *   budget_bins exit   A exits after its frees: its bins go back with it;
 *   budget_bins trim   main calls malloc_trim(0): A's bins go back too;
 *   budget_bins fork   main forks: in the child, where A does not exist,
 *                      A's bins (nobody was in them) go back.
 *
 * Run with PCPALLOC_MEMORY_LIMIT=48MiB and a long PCPALLOC_DECAY_MS, so no
 * tick spills the bins of an idle thread in the meantime. */
#include "issue_common.h"

#include <semaphore.h>
#include <sys/wait.h>

#define BLOCKS 48
#define BLOCK (96 << 10)

static sem_t freed, done;

static void *thread_a(void *arg) {
    int stay = *(int *)arg;
    void *b[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        b[i] = malloc(BLOCK);
        CHECK(b[i] != NULL);
        memset(b[i], 1, BLOCK);
    }
    for (int i = 0; i < BLOCKS; i++) free(b[i]);
    sem_post(&freed);
    if (stay) sem_wait(&done);
    return NULL;
}

int main(int argc, char **argv) {
    require_pcpalloc();
    CHECK(argc == 2);
    const char *mode = argv[1];
    int stay = strcmp(mode, "exit") != 0;
    sem_init(&freed, 0, 0);
    sem_init(&done, 0, 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, thread_a, &stay) == 0);
    sem_wait(&freed);
    if (!stay) CHECK(pthread_join(t, NULL) == 0);
    uint64_t held = pcp_stat("large_bin_pages");
    if (strcmp(mode, "idle") == 0) {
        CHECK(held > 0);
    } else if (strcmp(mode, "exit") == 0) {
        CHECK(held == 0);
    } else if (strcmp(mode, "trim") == 0) {
        CHECK(held > 0);
        malloc_trim(0);
        CHECK(pcp_stat("large_bin_pages") == 0);
    } else if (strcmp(mode, "fork") == 0) {
        CHECK(held > 0);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            /* A did not come along: its bins, idle at the fork, are the
             * child's to give back. */
            if (pcp_stat("large_bin_pages") != 0) _exit(3);
            void *p = malloc(100000);
            if (!p) _exit(4);
            free(p);
            _exit(0);
        }
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    } else {
        CHECK(held > 0);
        static void *fill[1024];
        int n = 0;
        while (n < 1024 && (fill[n] = malloc(1 << 20)) != NULL) {
            memset(fill[n], 2, 1 << 20);
            n++;
        }
        CHECK(n > 8 && n < 1024);
        CHECK(errno == ENOMEM);
        held = pcp_stat("large_bin_pages");
        CHECK(held == 0);
        for (int i = 0; i < n; i++) free(fill[i]);
    }
    if (stay) {
        sem_post(&done);
        CHECK(pthread_join(t, NULL) == 0);
    }
    printf("budget_bins %s ok\n", mode);
    return 0;
}
