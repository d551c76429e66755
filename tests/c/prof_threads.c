/* The heap profile in threads, across fork and switched at run time: four
 * threads allocate and free blocks of 16 B to 96 KiB (keeping some) while
 * the main thread forks twice — each child allocates, writes its own
 * profile on demand (%p in the path) and exits — and turns sampling off
 * and on again with pcpalloc_set. Every sample unwinds the stack inside
 * malloc; a deadlock (the unwinder, the profile's lock, fork) hangs the
 * program and fails the test by its time limit. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 4
#define ROUNDS 200000
#define KEEP 512

static int (*dump)(const char *);
static int (*set)(const char *, const char *);

__attribute__((noinline)) static void *worker(void *arg) {
    unsigned s = (unsigned)(size_t)arg * 2654435761u + 1;
    void *kept[KEEP] = {0};
    for (int i = 0; i < ROUNDS; i++) {
        s = s * 1103515245u + 12345u;
        size_t n = 16u << (s >> 28) % 13; /* 16 B .. 64 KiB */
        n += (s >> 8) % n;
        void *p = malloc(n);
        if (!p) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        memset(p, 0, 16);
        int k = (s >> 16) % KEEP;
        free(kept[k]);
        kept[k] = p;
    }
    for (int k = 0; k < KEEP; k++)
        free(kept[k]);
    return NULL;
}

static void fork_child(const char *path) {
    pid_t pid = fork();
    if (pid == 0) {
        void *q[64];
        for (int i = 0; i < 64; i++)
            q[i] = malloc(100 * (i + 1));
        int e = dump ? dump(path) : 0;
        for (int i = 0; i < 64; i++)
            free(q[i]);
        _exit(e);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "child failed: %d\n", st);
        exit(1);
    }
}

int main(int argc, char **argv) {
    dump = (int (*)(const char *))dlsym(RTLD_DEFAULT, "pcpalloc_profile_dump");
    set = (int (*)(const char *, const char *))dlsym(RTLD_DEFAULT, "pcpalloc_set");
    const char *child_path = argc > 1 ? argv[1] : "/dev/null";
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    fork_child(child_path);
    if (set && set("PCPALLOC_PROFILE", "0") != 0)
        return 2;
    usleep(20000);
    if (set && set("PCPALLOC_PROFILE", "8K") != 0)
        return 3;
    fork_child(child_path);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    printf("prof_threads ok\n");
    return 0;
}
