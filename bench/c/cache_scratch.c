/* cache-scratch (Hoard): each thread frees an object the main thread
 * allocated, then repeatedly allocates small objects and writes them many
 * times. An allocator that hands threads objects from one cache line makes
 * them write-share it (passive false sharing). */
#include "bench.h"

static long iterations, repetitions;
static int objsize = 8;

static void *worker(void *arg) {
    free(arg); /* the passed-in object */
    for (long i = 0; i < iterations; i++) {
        volatile char *a = xmalloc(objsize);
        for (long r = 0; r < repetitions; r++)
            for (int k = 0; k < objsize; k++) a[k] = (char)(a[k] + 1);
        free((void *)a);
    }
    return NULL;
}

int main(int argc, char **argv) {
    long scale = scale_arg(argc, argv);
    int threads = 4;
    iterations = 400000 * scale;
    repetitions = 200;
    void *objs[4];
    for (int i = 0; i < threads; i++) objs[i] = xmalloc(objsize);
    pthread_t t[4];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, objs[i]);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    report_peak();
    return 0;
}
