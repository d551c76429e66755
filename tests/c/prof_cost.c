/* What sampling costs a program of small objects: one thread keeps 4096
 * blocks of 16 B to 1 KiB live and replaces one at random, two million
 * times, with the heap profile on (the test sets PCPALLOC_PROFILE). Each
 * sampled small object is served as a one-page block; the test reads the
 * counters the exit report prints (PCPALLOC_STATS=1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIVE 4096
#define ROUNDS 2000000

int main(void) {
    static void *live[LIVE];
    unsigned s = 12345;
    for (int i = 0; i < ROUNDS; i++) {
        s = s * 1103515245u + 12345u;
        unsigned slot = (s >> 8) % LIVE;
        size_t n = 16 + (s >> 20) % 1009;
        free(live[slot]);
        live[slot] = malloc(n);
        if (!live[slot])
            return 1;
        memset(live[slot], 0, 8);
    }
    for (int i = 0; i < LIVE; i++)
        free(live[i]);
    printf("prof_cost ok\n");
    return 0;
}
