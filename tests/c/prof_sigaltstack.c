/* The calls a sampling process makes to sigaltstack(2): this program
 * defines `sigaltstack` itself, which takes the place of libc's for every
 * caller that goes through the dynamic linker (pcpalloc's calls too),
 * counts them and passes them on. It allocates and frees 1 GiB in blocks
 * of 64 B to 64 KiB, from two threads, and prints how many calls came:
 * a sample taken on a stack of its own asks nothing (only a stack that
 * libgcc must walk asks whether it is on an alternate signal stack).
 *
 *   prof_sigaltstack            prints "sigaltstack calls N" */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static atomic_long calls;

int sigaltstack(const stack_t *ss, stack_t *old) {
    atomic_fetch_add(&calls, 1);
    return (int)syscall(SYS_sigaltstack, ss, old);
}

static void *churn(void *arg) {
    unsigned long s = (unsigned long)(size_t)arg * 2654435761u + 1, total = 0;
    while (total < (512ul << 20)) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        size_t n = (size_t)64 << (s % 11); /* 64 B .. 64 KiB */
        char *p = malloc(n);
        if (!p) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        p[0] = p[n - 1] = 1;
        free(p);
        total += n;
    }
    return NULL;
}

int main(void) {
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, churn, (void *)i);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    printf("sigaltstack calls %ld\n", atomic_load(&calls));
    return 0;
}
