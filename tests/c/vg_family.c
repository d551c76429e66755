/* Every entry of the malloc family once, for memcheck (tests/hour2_valgrind.rs):
 * with no argument the program is correct and must run without one error;
 * with "bugs" it leaks a block, reads one after its free, and branches on
 * bytes never written, which memcheck must each report. */
#include "common.h"

#pragma GCC diagnostic ignored "-Wuse-after-free"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

extern void free_sized(void *, size_t) __attribute__((weak));
extern void free_aligned_sized(void *, size_t, size_t) __attribute__((weak));

static void *volatile leaked, *volatile kept;

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "bugs") == 0) {
        /* The first block of a slab stays "reachable" through our metadata
         * under --soname-synonyms=somalloc=nouse: leak the second. */
        kept = malloc(1000);
        leaked = malloc(1000);
        memset(leaked, 1, 1000);
        leaked = NULL; /* definitely lost: 1,000 bytes in 1 block */
        volatile char *p = malloc(200);
        p[0] = 1;
        free((void *)p);
        char c = p[10]; /* invalid read: inside a freed block */
        (void)c;
        char *u = malloc(300);
        if (u[150] == 42) /* conditional jump on uninitialised bytes */
            puts("42");
        free(u);
        puts("vg_family bugs done");
        return 0;
    }
    char *a = malloc(24);
    strcpy(a, "twenty-three characters");
    a = realloc(a, 4000);
    CHECK(strcmp(a, "twenty-three characters") == 0);
    char *b = reallocarray(NULL, 10, 10);
    CHECK(b);
    memset(b, 1, 100);
    b = reallocarray(b, 100, 100);
    CHECK(b[99] == 1);
    volatile size_t huge_n = SIZE_MAX / 2;
    CHECK(reallocarray(b, huge_n, 3) == NULL && errno == ENOMEM);
    int *c = calloc(50, sizeof(int));
    for (int i = 0; i < 50; i++) CHECK(c[i] == 0);
    void *d = NULL;
    CHECK(posix_memalign(&d, 256, 1000) == 0);
    memset(d, 2, 1000);
    void *e = aligned_alloc(64, 640);
    void *f = memalign(4096, 100);
    void *g = valloc(5000);
    void *h = pvalloc(100);
    memset(h, 3, 4096);
    char *s = strdup("a string from libc");
    CHECK(malloc_usable_size(s) >= 19);
    void *big = malloc(8 << 20);
    memset(big, 4, 8 << 20);
    big = realloc(big, 12 << 20);
    CHECK(((char *)big)[(8 << 20) - 1] == 4);
    free(big);
    free(s);
    free(h);
    free(g);
    free(f);
    if (free_aligned_sized) free_aligned_sized(e, 64, 640); else free(e);
    if (free_sized) free_sized(d, 1000); else free(d);
    free(c);
    free(b);
    free(a);
    void *z = malloc(40);
    if (free_sized) free_sized(z, 40); else free(z);
    puts("vg_family ok");
    return 0;
}
