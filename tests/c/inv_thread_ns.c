/* Issue 42, item 2 (b): namespaces need a single-threaded process.
 *
 * argv[1] (4) threads each load argv[2] (16) MiB of data in mixed sizes
 * (every byte written, kept live) and exit; main joins them, so the
 * program has loaded 64 MB with several threads that have exited. Then:
 *
 * - setns() into its own mount namespace (/proc/self/ns/mnt): the kernel
 *   refuses it with EINVAL to a process that shares its fs_struct with
 *   another thread; EPERM (not root) is reported as a skip;
 * - unshare(CLONE_NEWUSER): EINVAL to a multi-threaded process; EPERM or
 *   ENOSPC (user namespaces not allowed here) is reported as a skip.
 *
 * Then the data is checked and freed. /proc/self/task must list one
 * thread. Prints "inv_thread_ns ok" when nothing failed. */
#include "issue_common.h"

#include <fcntl.h>
#include <sched.h>

#define MAX_THREADS 16
#define MAX_BLOCKS 4096

static size_t per_thread;
static char *blocks[MAX_THREADS][MAX_BLOCKS];
static size_t sizes[MAX_THREADS][MAX_BLOCKS];
static int nblocks[MAX_THREADS];

static void *loader(void *arg) {
    int t = (int)(uintptr_t)arg;
    uint64_t seed = 0xD1B54A32D192ED03ULL * (uint64_t)(t + 1);
    size_t done = 0;
    int n = 0;
    while (done < per_thread && n < MAX_BLOCKS) {
        size_t sz = (n % 3 == 0)   ? rng_size(&seed, 16, 8 * KiB)
                    : (n % 3 == 1) ? rng_size(&seed, 8 * KiB, 1 * MiB)
                                   : rng_size(&seed, 4 * MiB, 6 * MiB);
        char *p = malloc(sz);
        CHECK(p);
        memset(p, (t * 31 + n) & 0xff, sz);
        blocks[t][n] = p;
        sizes[t][n] = sz;
        done += sz;
        n++;
    }
    nblocks[t] = n;
    return NULL;
}


int main(int argc, char **argv) {
    int nthreads = argc > 1 ? atoi(argv[1]) : 4;
    per_thread = (argc > 2 ? (size_t)atol(argv[2]) : 16) * MiB;
    CHECK(nthreads >= 1 && nthreads <= MAX_THREADS);
    start_up();
    pthread_t t[MAX_THREADS];
    for (int i = 0; i < nthreads; i++)
        CHECK(pthread_create(&t[i], NULL, loader, (void *)(uintptr_t)i) == 0);
    for (int i = 0; i < nthreads; i++) CHECK(pthread_join(t[i], NULL) == 0);
    size_t loaded = 0;
    for (int i = 0; i < nthreads; i++)
        for (int j = 0; j < nblocks[i]; j++) loaded += sizes[i][j];
    int failed = 0;
    int tasks = task_count();
    printf("loaded %.1f MiB from %d threads that exited; /proc/self/task lists %d\n",
           (double)loaded / MiB, nthreads, tasks);
    if (tasks != 1) {
        printf("FAIL: %d threads listed, the program has 1\n", tasks);
        failed = 1;
    }

    /* setns into the mount namespace the process is in. */
    int fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    if (setns(fd, CLONE_NEWNS) == 0) {
        printf("setns(CLONE_NEWNS) ok\n");
    } else if (errno == EPERM) {
        printf("SKIP setns: %s (not root)\n", strerror(errno));
    } else {
        printf("FAIL: setns(CLONE_NEWNS): %s\n", strerror(errno));
        failed = 1;
    }
    close(fd);

    /* A new user namespace (last: it changes what the process may do). */
    if (unshare(CLONE_NEWUSER) == 0) {
        printf("unshare(CLONE_NEWUSER) ok\n");
    } else if (errno == EPERM || errno == ENOSPC || errno == EUSERS) {
        printf("SKIP unshare: %s (user namespaces not allowed here)\n", strerror(errno));
    } else {
        printf("FAIL: unshare(CLONE_NEWUSER): %s\n", strerror(errno));
        failed = 1;
    }

    for (int i = 0; i < nthreads; i++)
        for (int j = 0; j < nblocks[i]; j++) {
            char *p = blocks[i][j];
            unsigned char want = (unsigned char)((i * 31 + j) & 0xff);
            CHECK((unsigned char)p[0] == want && (unsigned char)p[sizes[i][j] - 1] == want);
            free(p);
        }
    if (failed) return 1;
    printf("inv_thread_ns ok\n");
    return 0;
}
