/* A program that frees one block and allocates one in turn: one thread
 * keeps 4096 blocks of 64 B live and replaces the oldest, two million
 * times, with the heap profile on (the test sets PCPALLOC_PROFILE). Its
 * bin of 64 B holds one object between a free and the next allocation;
 * the test reads how many allocations took the slow path from the
 * counters the exit report prints (PCPALLOC_STATS=1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIVE 4096
#define ROUNDS 2000000

int main(void) {
    static void *live[LIVE];
    for (int i = 0; i < ROUNDS; i++) {
        int slot = i % LIVE;
        free(live[slot]);
        live[slot] = malloc(64);
        if (!live[slot])
            return 1;
        memset(live[slot], 0, 8);
    }
    for (int i = 0; i < LIVE; i++)
        free(live[i]);
    printf("prof_turns ok\n");
    return 0;
}
