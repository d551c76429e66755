/* calloc returns zeroed memory even when it reuses blocks that were
 * dirtied and freed (small, large and huge). */
#include "common.h"

int main(void) {
    require_pcpalloc();
    size_t sizes[] = {8, 48, 256, 3000, 8192, 12288, 100000, 1u << 20, 3u << 20, 5u << 20};
    for (int round = 0; round < 4; round++)
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            size_t n = sizes[i];
            void *b[32];
            for (int k = 0; k < 32; k++) {
                b[k] = malloc(n);
                CHECK(b[k]);
                memset(b[k], 0xA5, n);
            }
            for (int k = 0; k < 32; k++) free(b[k]);
            for (int k = 0; k < 32; k++) {
                unsigned char *c = calloc(1, n);
                CHECK(c);
                for (size_t j = 0; j < n; j++) CHECK(c[j] == 0);
                memset(c, 0x5A, n);
                b[k] = c;
            }
            for (int k = 0; k < 32; k++) free(b[k]);
        }
    /* calloc(n, m) with n*m split oddly. */
    unsigned *u = calloc(1000, sizeof *u);
    for (int i = 0; i < 1000; i++) CHECK(u[i] == 0);
    free(u);
    puts("calloc_reuse ok");
    return 0;
}
