/* fork() from a process whose other threads are busy allocating: every
 * child allocates, checks and exits cleanly. */
#include "common.h"
#include <sys/wait.h>

static volatile int stop;

static void *busy(void *arg) {
    unsigned x = (unsigned)(uintptr_t)arg;
    void *v[128] = {0};
    while (!stop) {
        x = x * 1103515245 + 12345;
        int i = (x >> 8) % 128;
        free(v[i]);
        size_t n = (x >> 12) % 3 == 0 ? (x >> 4) % 70000 + 1 : (x >> 4) % 700 + 1;
        v[i] = malloc(n);
        CHECK(v[i]);
        memset(v[i], 1, n < 64 ? n : 64);
    }
    for (int i = 0; i < 128; i++) free(v[i]);
    return NULL;
}

int main(int argc, char **argv) {
    require_pcpalloc();
    int nthreads = argc > 1 ? atoi(argv[1]) : 4;
    int nforks = argc > 2 ? atoi(argv[2]) : 50;
    pthread_t t[64];
    for (int i = 0; i < nthreads; i++) pthread_create(&t[i], NULL, busy, (void *)(uintptr_t)(i + 1));
    for (int f = 0; f < nforks; f++) {
        usleep(1000);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            /* The child: only this thread survives. Allocate in all ranges,
             * start a thread, free, exit. */
            void *a = malloc(100), *b = malloc(20000), *c = malloc(5u << 20);
            CHECK(a && b && c);
            memset(a, 2, 100);
            memset(b, 2, 20000);
            memset(c, 2, 1u << 20);
            pthread_t ct;
            CHECK(pthread_create(&ct, NULL, busy, (void *)77) == 0);
            usleep(200);
            stop = 1;
            pthread_join(ct, NULL);
            free(a);
            free(b);
            free(c);
            char *s = strdup("child ok");
            CHECK(strcmp(s, "child ok") == 0);
            free(s);
            _exit(0);
        }
        int status;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    stop = 1;
    for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
    printf("fork_busy ok (%d forks, %d threads)\n", nforks, nthreads);
    return 0;
}
