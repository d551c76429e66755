/* cache_scratch: written from the published description of cache-scratch
 * (Emery Berger's Hoard benchmark, as mimalloc-bench builds it:
 * daanx/mimalloc-bench bench/cache-scratch/cache-scratch.cpp). Same logic
 * and arguments:
 *
 *   cache_scratch THREADS ITERATIONS OBJSIZE REPETITIONS CONCURRENCY
 *   (mimalloc-bench "cache-scratch1": 1 1000 1 2000000 <cpus>,
 *    "cache-scratchN": <cpus> 1000 1 2000000 <cpus>)
 *
 * The main thread allocates one object of OBJSIZE bytes per thread (new
 * char[]), one after another — an allocator may put them in one cache
 * line — and hands one to each thread. A thread frees the object it was
 * given — with a scalar delete, as the original, which g++ turns into the
 * sized operator delete(p, 1) (sizeof(char), whatever OBJSIZE is) of an
 * object made by new char[] — then ITERATIONS times allocates
 * an object of OBJSIZE bytes, writes each byte and reads it back
 * REPETITIONS / THREADS times, and frees it. An allocator that gives the
 * thread the freed object, or another from the same line, makes the
 * threads write-share a cache line (passive false sharing). (Built with
 * g++ 12 -O2, the published program's worker has no new[] / delete[] left:
 * the compiler removes the pair, whose memory does not escape, and the
 * writes to it; only the volatile byte remains. Here the pair and the
 * writes stay, as the source has them.) Prints nothing
 * in the original; here the peak RSS (`peak_kib`) for our harness, which
 * times the process. new[] / delete[] / delete are the C++ operators the
 * program would call: the preloaded allocator's, else libstdc++'s
 * (cxx_new.h). */
#include "bench.h"
#include "cxx_new.h"

struct worker_arg {
    char *object;
    int obj_size, iterations, repetitions;
};

static void *worker(void *arg) {
    struct worker_arg *w = arg;
    cxx_delete_sized(w->object, 1); /* delete (char *): sized, 1 byte */
    struct worker_arg w1 = *w;
    for (int i = 0; i < w1.iterations; i++) {
        char *obj = cxx_new_array((size_t)w1.obj_size);
        for (int j = 0; j < w1.repetitions; j++)
            for (int k = 0; k < w1.obj_size; k++) {
                obj[k] = (char)k;
                volatile char ch = obj[k];
                ch++;
            }
        cxx_delete_array(obj);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc <= 5) {
        printf("Usage: %s nthreads iterations objSize repetitions concurrency\n", argv[0]);
        return 1;
    }
    cxx_init();
    int nthreads = atoi(argv[1]), iterations = atoi(argv[2]), obj_size = atoi(argv[3]);
    int repetitions = atoi(argv[4]), concurrency = atoi(argv[5]);
    if (nthreads < 1) nthreads = 1;
    pthread_t *threads = calloc((size_t)nthreads, sizeof(pthread_t));
    pthread_setconcurrency(concurrency);
    struct worker_arg *w = (struct worker_arg *)cxx_new_array(sizeof(struct worker_arg) * (size_t)nthreads);
    char **objs = (char **)cxx_new_array(sizeof(char *) * (size_t)nthreads);
    for (int i = 0; i < nthreads; i++) objs[i] = cxx_new_array((size_t)obj_size);
    for (int i = 0; i < nthreads; i++) {
        w[i] = (struct worker_arg){objs[i], obj_size, iterations, repetitions / nthreads};
        pthread_create(&threads[i], NULL, worker, &w[i]);
    }
    for (int i = 0; i < nthreads; i++) pthread_join(threads[i], NULL);
    free(threads);
    cxx_delete_array(objs);
    cxx_delete_array(w);
    report_peak();
    return 0;
}
