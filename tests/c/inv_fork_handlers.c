/* Issue 42, case A: fork() repeatedly in a program linked against
 * inv_fork_lib.so, whose fork handlers allocate. Arguments: threads (0:
 * single-threaded) that allocate meanwhile, and forks. Every child checks
 * that the library's child handler ran, allocates in every size range and
 * exits cleanly; the parent checks its own handlers' counts. */
#include "common.h"
#include <sys/wait.h>

void inv_fork_lib_counts(int *prep, int *par, int *chi);

static volatile int stop;

static void *busy(void *arg) {
    unsigned x = (unsigned)(uintptr_t)arg;
    void *v[64] = {0};
    while (!stop) {
        x = x * 1103515245 + 12345;
        int i = (x >> 8) % 64;
        free(v[i]);
        size_t n = (x >> 12) % 4 == 0 ? (x >> 4) % 300000 + 1 : (x >> 4) % 900 + 1;
        v[i] = malloc(n);
        CHECK(v[i]);
        memset(v[i], 1, n < 64 ? n : 64);
    }
    for (int i = 0; i < 64; i++) free(v[i]);
    return NULL;
}

int main(int argc, char **argv) {
    int nthreads = argc > 1 ? atoi(argv[1]) : 0;
    int nforks = argc > 2 ? atoi(argv[2]) : 50;
    pthread_t t[16];
    CHECK(nthreads <= 16);
    for (int i = 0; i < nthreads; i++)
        CHECK(pthread_create(&t[i], NULL, busy, (void *)(uintptr_t)(i + 1)) == 0);
    for (int f = 0; f < nforks; f++) {
        if (nthreads) usleep(500);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            int p, pa, c;
            inv_fork_lib_counts(&p, &pa, &c);
            if (p != f + 1 || pa != f || c != 1) _exit(3);
            void *a = malloc(100), *b = malloc(20000), *d = malloc(3u << 20);
            if (!a || !b || !d) _exit(4);
            memset(a, 2, 100);
            memset(b, 2, 20000);
            memset(d, 2, 1u << 20);
            free(a);
            free(b);
            free(d);
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
    int p, pa, c;
    inv_fork_lib_counts(&p, &pa, &c);
    CHECK(p == nforks && pa == nforks && c == 0);
    printf("inv_fork_handlers ok (%d forks, %d threads)\n", nforks, nthreads);
    return 0;
}
