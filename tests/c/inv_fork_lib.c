/* Issue 42, case A: a shared library that the program links (not dlopens),
 * whose constructor registers fork handlers that allocate — malloc/free in
 * prepare, parent and child, and a block taken in prepare and freed after
 * the fork on either side, as a library that saves some state across fork
 * would.
 *
 * Built twice (tests/invisible_fork.rs): as is, the registration goes
 * through pthread_atfork, which glibc >= 2.28 links into every object as a
 * stub calling the exported __register_atfork; with -DINV_FORK_UNSEEN it
 * goes through libc's own compatibility pthread_atfork@GLIBC_2.2.5, which
 * calls __register_atfork inside libc, where no preloaded library sees it
 * (as an object linked against a glibc older than 2.3.2 would). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *saved;
static volatile int prepares, parents, children;

static void churn(size_t n) {
    char *p = malloc(n);
    if (!p) abort();
    memset(p, 0x5a, n);
    char *q = malloc(n / 2 + 1);
    if (!q) abort();
    free(p);
    free(q);
}

static void prepare(void) {
    churn(48);
    churn(3000);
    churn(200000);
    saved = malloc(100);
    if (!saved) abort();
    memset(saved, 7, 100);
    prepares++;
}

static void after(void) {
    churn(64);
    churn(70000);
    for (int i = 0; i < 100; i++)
        if (saved[i] != 7) abort();
    free(saved);
    saved = NULL;
}

static void parent(void) {
    after();
    parents++;
}

static void child(void) {
    after();
    children++;
}

typedef int (*atfork_fn)(void (*)(void), void (*)(void), void (*)(void));

__attribute__((constructor)) static void init(void) {
#ifdef INV_FORK_UNSEEN
    atfork_fn reg = (atfork_fn)dlvsym(RTLD_NEXT, "pthread_atfork", "GLIBC_2.2.5");
    if (!reg) {
        static const char msg[] = "inv_fork_lib: no pthread_atfork@GLIBC_2.2.5\n";
        (void)!write(2, msg, sizeof msg - 1);
        _exit(77);
    }
    reg(prepare, parent, child);
#else
    pthread_atfork(prepare, parent, child);
#endif
}

/* How often each handler ran (for the program's checks). */
void inv_fork_lib_counts(int *prep, int *par, int *chi) {
    *prep = prepares;
    *par = parents;
    *chi = children;
}
