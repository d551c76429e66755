/* Shared helpers for the LD_PRELOAD test programs. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                    \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Fill n bytes with a pattern derived from seed. */
static inline void fill(void *p, size_t n, unsigned seed) {
    unsigned char *c = p;
    for (size_t i = 0; i < n; i++) c[i] = (unsigned char)(seed * 31 + i * 7);
}

/* Check the pattern written by fill. */
static inline int check(const void *p, size_t n, unsigned seed) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != (unsigned char)(seed * 31 + i * 7)) return 0;
    return 1;
}

/* Fails unless the allocator under test is pcpalloc (LD_PRELOAD worked). */
static inline void require_pcpalloc(void) {
    void *sym = NULL;
    extern void malloc_stats(void);
    (void)sym;
    const char *pre = getenv("LD_PRELOAD");
    CHECK(pre && strstr(pre, "libpcpalloc.so"));
}
