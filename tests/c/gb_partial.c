/* Blocks of 256 KiB - 4 MiB written in their first page only, 32 live at a
 * time, replaced 4000 times (buffers sized for the worst case and filled
 * at their start): how often a free gives memory back to the OS, with no
 * background thread. Prints the report's release_events and
 * released_bytes, then "gb_partial ok". */
#include "issue_common.h"

int main(void) {
    enum { LIVE = 32, ROUNDS = 4000 };
    void *live[LIVE] = {0};
    unsigned long long seed = 42;
    for (int i = 0; i < ROUNDS; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t size = (256u << 10) + (size_t)((seed >> 33) % ((4u << 20) - (256u << 10)));
        int slot = i % LIVE;
        free(live[slot]);
        char *p = malloc(size);
        CHECK(p != NULL);
        memset(p, 1, 4096);
        live[slot] = p;
    }
    for (int i = 0; i < LIVE; i++)
        free(live[i]);
    printf("release_events %llu\n", (unsigned long long)pcp_stat("release_events"));
    printf("released_bytes %llu\n", (unsigned long long)pcp_stat("released_bytes"));
    printf("gb_partial ok\n");
    return 0;
}
