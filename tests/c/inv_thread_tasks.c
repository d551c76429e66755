/* Issue 42, item 2 (c): /proc/self/task lists only the program's threads
 * after heavy use.
 *
 * argv[1] (8) workers run argv[2] (300) ms each of mixed churn — small,
 * large (8 KiB – 4 MiB) and huge (4 – 16 MiB) blocks, a live set of about
 * 40 MiB per worker, a quarter of each worker's blocks freed by the next
 * worker — everything that used to start the allocator's maintenance
 * thread (a heap past 16 MiB, a second thread allocating, 4 MiB waiting
 * to go back). Meanwhile and after the workers are joined (and after a
 * fork, in the child), every thread /proc/self/task lists must be one the
 * program made: its count is the program's own, and any other thread's
 * name is printed. Prints "inv_thread_tasks ok" when none was found. */
#include "issue_common.h"

#include <dirent.h>
#include <fcntl.h>

#define MAX_WORKERS 32
#define SLOTS 512

static int nworkers = 8;
static long run_ms = 300;
static _Atomic(void *) handoff[MAX_WORKERS][SLOTS];
static _Atomic int running;
static pthread_barrier_t start_bar;

/* Threads /proc/self/task lists; the names of those that are not named
 * "inv_thread_task" (the program names its own) are printed. */
static int list_tasks(const char *when, int *strangers) {
    DIR *d = opendir("/proc/self/task");
    CHECK(d);
    int n = 0;
    struct dirent *e;
    *strangers = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        n++;
        char path[320], name[64] = {0};
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            ssize_t r = read(fd, name, sizeof name - 1);
            close(fd);
            if (r > 0 && name[r - 1] == '\n') name[r - 1] = 0;
        }
        if (strncmp(name, "inv_thread_", 11) != 0) {
            printf("a thread the program did not make %s: %s (tid %s)\n", when, name,
                   e->d_name);
            (*strangers)++;
        }
    }
    closedir(d);
    return n;
}

static void *worker(void *arg) {
    int w = (int)(uintptr_t)arg;
    uint64_t seed = 0xA0761D6478BD642FULL * (uint64_t)(w + 1);
    void *mine[SLOTS] = {0};
    size_t msz[SLOTS] = {0};
    size_t live = 0, cap = 40 * MiB;
    pthread_setname_np(pthread_self(), "inv_thread_work");
    pthread_barrier_wait(&start_bar);
    double end = now_s() + run_ms / 1000.0;
    while (now_s() < end) {
        for (int k = 0; k < 64; k++) {
            int s = (int)(rng_next(&seed) % SLOTS);
            if (mine[s]) {
                free(mine[s]);
                mine[s] = NULL;
                live -= msz[s];
            }
            uint64_t r = rng_next(&seed) % 100;
            size_t sz = r < 70   ? rng_size(&seed, 8, 4 * KiB)
                        : r < 97 ? rng_size(&seed, 8 * KiB, 4 * MiB)
                                 : rng_size(&seed, 4 * MiB, 16 * MiB);
            if (live + sz > cap) continue;
            char *p = malloc(sz);
            CHECK(p);
            memset(p, 0x5a, sz < 64 * KiB ? sz : 64 * KiB);
            p[sz - 1] = 1;
            if (rng_next(&seed) % 4 == 0) {
                /* The next worker frees it. */
                free(atomic_exchange(&handoff[(w + 1) % nworkers][s], p));
            } else {
                mine[s] = p;
                msz[s] = sz;
                live += sz;
            }
        }
        /* What others handed this worker. */
        for (int s = 0; s < SLOTS; s += 8) free(atomic_exchange(&handoff[w][s], NULL));
    }
    for (int s = 0; s < SLOTS; s++) free(mine[s]);
    running--;
    return NULL;
}

int main(int argc, char **argv) {
    nworkers = argc > 1 ? atoi(argv[1]) : 8;
    run_ms = argc > 2 ? atol(argv[2]) : 300;
    CHECK(nworkers >= 2 && nworkers <= MAX_WORKERS);
    pthread_setname_np(pthread_self(), "inv_thread_task");
    start_up();
    int strangers = 0, total = 0;
    pthread_t t[MAX_WORKERS];
    CHECK(pthread_barrier_init(&start_bar, NULL, (unsigned)nworkers + 1) == 0);
    running = nworkers;
    for (int i = 0; i < nworkers; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) == 0);
    pthread_barrier_wait(&start_bar);
    /* While they run: every thread listed is one of ours. */
    for (int k = 0; k < 5; k++) {
        sleep_ms(run_ms / 6);
        list_tasks("while the workers run", &strangers);
        total += strangers;
    }
    for (int i = 0; i < nworkers; i++) CHECK(pthread_join(t[i], NULL) == 0);
    for (int i = 0; i < nworkers; i++)
        for (int s = 0; s < SLOTS; s++) free(atomic_exchange(&handoff[i][s], NULL));
    /* A big block freed and some idle time: what used to start the thread
     * (or wake it) in a program that is single-threaded again. */
    char *big = malloc(64 * MiB);
    CHECK(big);
    memset(big, 1, 64 * MiB);
    free(big);
    sleep_ms(200);
    int n = list_tasks("after the workers exited", &strangers);
    total += strangers;
    printf("%d workers, %ld ms of churn: /proc/self/task lists %d thread(s) after they "
           "exited\n",
           nworkers, run_ms, n);
    if (n != 1) {
        printf("FAIL: %d threads listed after the workers exited, the program has 1\n", n);
        total++;
    }
    /* A forked child: one thread, and it allocates without making one. */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        for (int i = 0; i < 64; i++) {
            char *p = malloc(1 * MiB);
            CHECK(p);
            memset(p, 2, 1 * MiB);
            free(p);
        }
        int s2 = 0;
        int m = list_tasks("in a forked child", &s2);
        _exit(m == 1 && s2 == 0 ? 0 : 1);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("FAIL: the forked child found a thread it did not make\n");
        total++;
    }
    if (total) {
        printf("FAIL: %d thread(s) the program did not make\n", total);
        return 1;
    }
    printf("inv_thread_tasks ok\n");
    return 0;
}
