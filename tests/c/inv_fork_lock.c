/* Issue 42, case B: fork() while other threads call into a library
 * (inv_fork_lock_lib.so) that allocates under its own lock M, which its
 * fork handlers hold across fork. Arguments: threads, forks. Every child
 * calls the library (M must be free, the allocator whole) and exits
 * cleanly. */
#include "common.h"
#include <sys/wait.h>

void inv_fork_lock_lib_work(void);

static volatile int stop;

static void *busy(void *arg) {
    (void)arg;
    while (!stop) inv_fork_lock_lib_work();
    return NULL;
}

int main(int argc, char **argv) {
    int nthreads = argc > 1 ? atoi(argv[1]) : 3;
    int nforks = argc > 2 ? atoi(argv[2]) : 200;
    pthread_t t[16];
    CHECK(nthreads <= 16);
    for (int i = 0; i < nthreads; i++) CHECK(pthread_create(&t[i], NULL, busy, NULL) == 0);
    for (int f = 0; f < nforks; f++) {
        usleep(200);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            for (int i = 0; i < 50; i++) inv_fork_lock_lib_work();
            _exit(0);
        }
        int status;
        CHECK(waitpid(pid, &status, 0) == pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "fork %d: child status %#x\n", f, status);
            return 1;
        }
    }
    stop = 1;
    for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
    printf("inv_fork_lock ok (%d forks, %d threads)\n", nforks, nthreads);
    return 0;
}
