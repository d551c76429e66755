/* PCPALLOC_PCP=thread: no pageset takes another's large blocks. Threads
 * without a pageset of their own — pthread key destructors that allocate
 * after the allocator's thread-exit hook — use the CPU pagesets, and even
 * those must not steal from each other (from the review of the steal:
 * 589 steals in this program before the mode gated it). Blocks of
 * 64 KiB - 1 MiB, 300 rounds of 8 threads, checked contents. */
#include "common.h"

#include <dlfcn.h>

static pthread_key_t key;

static void dtor(void *v) {
    uintptr_t r = (uintptr_t)v;
    void *p[4];
    for (int i = 0; i < 4; i++) {
        size_t n = (size_t)65536 << ((r + i) % 5);
        p[i] = malloc(n);
        CHECK(p[i] != NULL);
        fill(p[i], 4096, (unsigned)(r + i));
    }
    for (int i = 0; i < 4; i++) {
        CHECK(check(p[i], 4096, (unsigned)(r + i)));
        free(p[i]);
    }
    if (r < 4) pthread_setspecific(key, (void *)(r + 1));
}

static void *worker(void *arg) {
    (void)arg;
    void *q = malloc(300000);
    CHECK(q != NULL);
    memset(q, 2, 300000);
    free(q);
    pthread_setspecific(key, (void *)1);
    return NULL;
}

int main(void) {
    require_pcpalloc();
    CHECK(pthread_key_create(&key, dtor) == 0);
    for (int round = 0; round < 300; round++) {
        pthread_t t[8];
        for (int i = 0; i < 8; i++) CHECK(pthread_create(&t[i], NULL, worker, NULL) == 0);
        for (int i = 0; i < 8; i++) CHECK(pthread_join(t[i], NULL) == 0);
    }
    int (*stat)(const char *, uint64_t *) =
        (int (*)(const char *, uint64_t *))dlsym(RTLD_DEFAULT, "pcpalloc_stat");
    CHECK(stat != NULL);
    uint64_t steals = 1;
    CHECK(stat("pcp_large_steals", &steals) == 0);
    if (steals != 0) {
        fprintf(stderr, "pcp_large_steals %llu under PCPALLOC_PCP=thread\n",
                (unsigned long long)steals);
        return 1;
    }
    printf("thread_mode_steal ok\n");
    return 0;
}
