/* larson (Larson & Krishnan's server benchmark, as in mimalloc-bench):
 * threads replace random objects of 8 B - 4 KiB in their slot array and
 * hand the array to a new thread every round, which frees what the old
 * thread allocated. */
#include "bench.h"

#define SLOTS 1000
#define ROUNDS 10000
struct state {
    void *p[SLOTS];
    uint64_t seed;
    long generations;
};

static void *generation(void *arg) {
    struct state *st = arg;
    for (int i = 0; i < ROUNDS; i++) {
        int k = rng_next(&st->seed) % SLOTS;
        free(st->p[k]);
        size_t n = rng_range(&st->seed, 8, 4096);
        st->p[k] = xmalloc(n);
        *(size_t *)st->p[k] = n;
    }
    return NULL;
}

/* One chain: each generation's thread exits and the next takes over. */
static void *chain(void *arg) {
    struct state *st = arg;
    for (long g = 0; g < st->generations; g++) {
        pthread_t t;
        pthread_create(&t, NULL, generation, st);
        pthread_join(t, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    long scale = scale_arg(argc, argv);
    int threads = 4;
    struct state st[4];
    pthread_t t[4];
    for (int i = 0; i < threads; i++) {
        st[i].seed = i * 11 + 1;
        st[i].generations = 400 * scale;
        for (int k = 0; k < SLOTS; k++) st[i].p[k] = xmalloc(rng_range(&st[i].seed, 8, 4096));
        pthread_create(&t[i], NULL, chain, &st[i]);
    }
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < threads; i++)
        for (int k = 0; k < SLOTS; k++) free(st[i].p[k]);
    report_peak();
    return 0;
}
