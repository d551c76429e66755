/* Every aligned API over alignments 8 B .. 8 MiB and sizes across all three
 * size ranges: the result is aligned, usable for the whole size, and
 * malloc_usable_size covers the request. */
#include "common.h"

int main(void) {
    require_pcpalloc();
    size_t sizes[] = {0, 1, 7, 16, 24, 100, 1000, 4096, 5000, 8192, 9000,
                      65536, 300000, 2u << 20, 5u << 20};
    unsigned seed = 1;
    for (size_t a = 8; a <= (8u << 20); a <<= 1) {
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            size_t n = sizes[i];
            void *p[5] = {0};
            CHECK(posix_memalign(&p[0], a, n) == 0);
            p[1] = aligned_alloc(a, n);
            p[2] = memalign(a, n);
            if (a == 4096) {
                p[3] = valloc(n);
                p[4] = pvalloc(n);
            }
            for (int k = 0; k < 5; k++) {
                if (k >= 3 && a != 4096) continue;
                CHECK(p[k] != NULL);
                CHECK(((uintptr_t)p[k] & (a - 1)) == 0);
                CHECK(malloc_usable_size(p[k]) >= n);
                fill(p[k], n, seed);
                CHECK(check(p[k], n, seed));
                seed++;
            }
            CHECK(malloc_usable_size(p[4] ? p[4] : p[0]) >= (p[4] ? ((n + 4095) & ~4095ul) : n));
            for (int k = 0; k < 5; k++) free(p[k]);
        }
    }
    /* Plain malloc: 8-byte alignment for every size, 16 for multiples of 16. */
    for (size_t n = 1; n < 20000; n += 7) {
        void *p = malloc(n);
        CHECK(p && ((uintptr_t)p & 7) == 0);
        if (n % 16 == 0) CHECK(((uintptr_t)p & 15) == 0);
        free(p);
    }
    puts("align_sweep ok");
    return 0;
}
