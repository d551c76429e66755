/* One tuner, every level (issue 44): a single thread works one cache level
 * at a time — in bursts (free many, then allocate as many) and in churn
 * (free one, allocate one) — so each level's self-tuning shows in its
 * counters of the PCPALLOC_STATS report (tests/one_tuner.rs compares them
 * across PCPALLOC_FREE_HIGH_THRESHOLD and PCPALLOC_HEURISTICS):
 *
 *   bins   32 KiB blocks      (a thread's block bins, up to 256 KiB)
 *   lists  512 KiB blocks     (the pagesets' class lists)
 *   park   64-byte objects    (slabs emptied and parked)
 *   huge   6 MiB blocks       (the huge-block cache)
 *
 *   one_tuner LEVEL ROUNDS */
#include "common.h"

#define LIVE 64

static void *blocks[LIVE];

/* A block with every page written (what the class lists measure as
 * resident is then the whole block). */
static void *take(size_t size) {
    char *p = malloc(size);
    CHECK(p != NULL);
    for (size_t i = 0; i < size; i += 4096) p[i] = 1;
    p[size - 1] = 1;
    return p;
}

/* Bursts: free n blocks, then allocate n; then churn: free one, allocate
 * one, n times over. */
static void blocks_of(size_t size, int n, int rounds) {
    for (int i = 0; i < n; i++) blocks[i] = take(size);
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < n; i++) free(blocks[i]);
        for (int i = 0; i < n; i++) blocks[i] = take(size);
        for (int i = 0; i < 4 * n; i++) {
            free(blocks[i % n]);
            blocks[i % n] = take(size);
        }
    }
    for (int i = 0; i < n; i++) free(blocks[i]);
}

#define OBJECTS 20000
static void *objects[OBJECTS];

/* Slabs emptied in bursts: every object freed, then as many allocated. */
static void slabs(int rounds) {
    for (int r = 0; r < rounds; r++) {
        int n = OBJECTS / 2 + (r % 2) * (OBJECTS / 2);
        for (int i = 0; i < n; i++) {
            objects[i] = malloc(64);
            CHECK(objects[i] != NULL);
            memset(objects[i], r, 8);
        }
        for (int i = 0; i < n; i++) free(objects[i]);
    }
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    int rounds = atoi(argv[2]);
    if (!strcmp(argv[1], "bins"))
        blocks_of(32 << 10, LIVE, rounds);
    else if (!strcmp(argv[1], "lists"))
        blocks_of(512 << 10, 32, rounds);
    else if (!strcmp(argv[1], "park"))
        slabs(rounds);
    else if (!strcmp(argv[1], "huge"))
        blocks_of(6 << 20, 8, rounds);
    else
        CHECK(!"level is one of bins, lists, park, huge");
    printf("one_tuner ok\n");
    return 0;
}
