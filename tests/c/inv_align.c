/* Issue 42, alignment: every block of the malloc family is 16-byte
 * aligned, as glibc guarantees (MALLOC_ALIGNMENT) and C17 7.22.3 asks for
 * any fundamental type that fits (long double, __m128). Counts the
 * misaligned blocks of malloc, calloc and realloc for every size 1-4096
 * and a sample up to 64 KiB, then stores through gcc's aligned vector
 * store (movaps) into a struct with an __m128 member and a flexible array,
 * allocated as malloc(sizeof + strlen(name) + 1) — the pattern that
 * crashed with 8-byte-aligned classes of 24, 40, ... bytes. */
#include "issue_common.h"

#include <xmmintrin.h>

struct named {
    __m128 v;
    long double ld;
    char name[];
};

/* Not inlined, so the store is the aligned one gcc emits for the type. */
__attribute__((noinline)) static void set(struct named *n, float x) {
    n->v = _mm_set1_ps(x);
    n->ld = x;
}

int main(void) {
    static void *keep_p[4096 + 1];
    unsigned long total = 0, bad = 0;
    for (size_t n = 1; n <= 4096; n++) {
        void *p = malloc(n), *q = calloc(1, n), *r = malloc(n / 2 + 1);
        CHECK(p && q && r);
        r = realloc(r, n);
        CHECK(r);
        bad += ((uintptr_t)p & 15) != 0;
        bad += ((uintptr_t)q & 15) != 0;
        bad += ((uintptr_t)r & 15) != 0;
        total += 3;
        keep_p[n] = p; /* live together, so the sizes share slabs */
        free(q);
        free(r);
    }
    for (size_t n = 4097; n <= 65536; n += 61) {
        void *p = malloc(n);
        CHECK(p);
        bad += ((uintptr_t)p & 15) != 0;
        total++;
        free(p);
    }
    for (size_t n = 1; n <= 4096; n++) free(keep_p[n]);
    printf("misaligned: %lu of %lu blocks\n", bad, total);
    fflush(stdout);

    /* The movaps store, on blocks of every size the names give. */
    static const char *names[] = {"a", "ab", "abcdefgh", "abcdefghijklmnop", "x1234567890123456789"};
    void *live[64];
    int k = 0;
    for (int round = 0; round < 12; round++) {
        for (unsigned i = 0; i < sizeof names / sizeof *names; i++) {
            size_t len = strlen(names[i]) + round;
            struct named *n = malloc(sizeof *n + len + 1);
            CHECK(n);
            set(n, (float)i);
            memset(n->name, 'n', len);
            n->name[len] = 0;
            if (k < 64) live[k++] = n;
            else free(n);
        }
    }
    for (int i = 0; i < k; i++) free(live[i]);
    if (bad) {
        printf("FAIL: %lu misaligned blocks\n", bad);
        return 1;
    }
    printf("inv_align ok\n");
    return 0;
}
