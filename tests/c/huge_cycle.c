/* Huge blocks in a loop (malloc-large's pattern, smaller): 200 times a
 * 5-12 MiB buffer replaces one of 4 live ones and is written in full.
 * Then everything is freed and the program idles for a few maintenance
 * ticks (PCPALLOC_DECAY_MS) so the cached blocks go back. Checks the
 * contents on the way. */
#include "common.h"

int main(void) {
    require_pcpalloc();
    enum { LIVE = 4 };
    char *buf[LIVE] = {0};
    size_t len[LIVE] = {0};
    unsigned x = 7;
    for (int i = 0; i < 200; i++) {
        x = x * 1103515245 + 12345;
        int k = (x >> 8) % LIVE;
        size_t n = (5u << 20) + (x >> 4) % (7u << 20);
        char *p = malloc(n);
        CHECK(p);
        memset(p, i & 0xff, n);
        if (buf[k]) {
            CHECK(buf[k][0] == buf[k][len[k] - 1]);
            free(buf[k]);
        }
        buf[k] = p;
        len[k] = n;
    }
    for (int k = 0; k < LIVE; k++) free(buf[k]);
    /* Calloc of a reused block must read as zero. */
    char *z = calloc(1, 6u << 20);
    CHECK(z);
    for (size_t i = 0; i < (6u << 20); i += 4096) CHECK(z[i] == 0);
    free(z);
    usleep(400 * 1000); /* a few ticks at 50 ms: the cache empties */
    /* A slow path, so a tick runs even without the background thread. */
    for (int i = 0; i < 2000; i++) free(malloc(20000 + (i % 7) * 8192));
    printf("huge_cycle ok\n");
    return 0;
}
