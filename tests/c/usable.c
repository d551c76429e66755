/* malloc_usable_size >= the request, and the whole usable size can be
 * written without disturbing neighbours. */
#include "common.h"

int main(void) {
    require_pcpalloc();
    CHECK(malloc_usable_size(NULL) == 0);
    void *keep[4096];
    int nk = 0;
    for (size_t n = 0; n < (6u << 20); n = n < 64 ? n + 1 : n * 9 / 8 + 3) {
        unsigned char *p = malloc(n);
        CHECK(p);
        size_t u = malloc_usable_size(p);
        CHECK(u >= n);
        memset(p, 0xEE, u);
        if (nk < 4096) keep[nk++] = p; else free(p);
    }
    for (int i = 0; i < nk; i++) {
        unsigned char *p = keep[i];
        size_t u = malloc_usable_size(p);
        for (size_t j = 0; j < u; j++) CHECK(p[j] == 0xEE);
        free(p);
    }
    puts("usable ok");
    return 0;
}
