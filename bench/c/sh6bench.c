/* sh6bench: written from the published description of sh6bench
 * (MicroQuill's SmartHeap benchmark, as mimalloc-bench patches and builds
 * it: daanx/mimalloc-bench bench/shbench/sh6bench.patch, BENCH=1
 * SYS_MULTI_THREAD=1). Same logic:
 *
 *   sh6bench [THREADS [CALLS]]
 *   (default: the number of CPUs; mimalloc-bench "sh6benchN": 2 × <cpus>.
 *    CALLS is ours, to shorten a run; the patched program reads it from
 *    its prompt, which reads nothing there, and takes 10000.)
 *
 * Call count 10000 (mimalloc-bench's patch; the original's default is
 * 1000), block sizes 1 to 1000, as the patched program takes when its
 * prompts read nothing; the call count is divided among the threads. Each
 * thread mallocs an array of CALLS pointers and repeats CALLS times: for
 * size_base = 1, 2, 4, 7, 11 ... (× 3/2 + 1) below 1000, and for size =
 * size_base, halved down to 1, it allocates blocks of that size — 250 of
 * each size under 100, 50 under 1000, 10 under 10000 — writing the first
 * and last byte of each (the patch), into the array in order. The part of
 * the array still holding the previous pass's pointers (a fifth of it,
 * moving on each pass) is skipped; when the end of the array is reached,
 * the blocks below the kept part are freed in allocation order and those
 * above it in reverse order, and filling starts again at the bottom. When
 * the kept part has moved up to the top, the next one starts at the
 * bottom, where filling resumes before the skip test: as in the original,
 * the kept blocks there are overwritten and never freed (every fifth pass
 * loses a fifth of the array's blocks, so memory grows through the run).
 * At the end the thread frees what is left in the array and the array. A
 * single thread runs in the main thread (the patch); more are all started
 * and then joined. The call count and largest size are globals read where
 * they are used, as in the original.
 * Prints the elapsed and CPU time as the original does, and the peak RSS
 * (`peak_kib`) for our harness, which times the process. */
#include "bench.h"
#include <sys/sysinfo.h>
#include <time.h>

/* Globals read where they are used, as the original's (the compiler
 * cannot take them for constants). */
unsigned long call_count = 10000;
unsigned max_block = 1000;

static void *bench_thread(void *arg) {
    (void)arg;
    char **memory = malloc(call_count * sizeof(char *));
    int repeat = (int)call_count;
    char **mp = memory, **mpe = memory + call_count;
    char **save_start = mpe, **save_end = mpe;
    while (repeat--) {
        for (int size_base = 1; (unsigned)size_base < max_block; size_base = size_base * 3 / 2 + 1) {
            for (int size = size_base; size; size /= 2) {
                /* smaller blocks more often than large ones */
                int iterations = size < 10000 ? 10 : 1;
                if (size < 1000) iterations *= 5;
                if (size < 100) iterations *= 5;
                while (iterations--) {
                    if (!memory || !(*mp++ = malloc(size))) {
                        printf("Out of memory\n");
                        _exit(1);
                    }
                    char *p = mp[-1];
                    p[0] = 0;
                    p[size - 1] = 0;
                    /* skip the part still holding the last pass's blocks */
                    if (mp == save_start) mp = save_end;
                    if (mp >= mpe) {
                        mp = memory;
                        save_start = save_end;
                        if (save_start >= mpe) save_start = mp;
                        save_end = save_start + call_count / 5;
                        if (save_end > mpe) save_end = mpe;
                        /* below the kept part: in allocation order */
                        while (mp < save_start) free(*mp++);
                        /* above it: in reverse order */
                        mp = mpe;
                        while (mp > save_end) free(*--mp);
                        mp = memory;
                    }
                }
            }
        }
    }
    /* the residual allocations */
    mpe = mp;
    mp = memory;
    while (mp < mpe) free(*mp++);
    free(memory);
    return NULL;
}

int main(int argc, char **argv) {
    setbuf(stdout, NULL);
    unsigned threads = (unsigned)get_nprocs();
    if (argc >= 2) {
        long l = strtol(argv[1], NULL, 10);
        if (l > 0) threads = (unsigned)l;
    }
    if (argc >= 3) {
        long l = strtol(argv[2], NULL, 10);
        if (l > 0) call_count = (unsigned long)l;
    }
    if (threads < 1) threads = 1;
    call_count /= threads;
    clock_t cpu0 = clock();
    time_t t0 = time(NULL);
    if (threads == 1) {
        bench_thread(NULL);
    } else {
        pthread_t *tids = malloc(sizeof(pthread_t) * threads);
        if (tids) {
            for (unsigned i = 0; i < threads; i++)
                if (pthread_create(&tids[i], NULL, bench_thread, NULL) != 0) {
                    printf("\nfailed to start thread #%u", i);
                    threads = i;
                    break;
                }
            for (unsigned i = threads; i--;) pthread_join(tids[i], NULL);
            free(tids);
        }
    }
    double elapsed = difftime(time(NULL), t0);
    double cpu = (double)(clock() - cpu0) / CLOCKS_PER_SEC;
    printf("\nTotal elapsed time for %u threads: %.2f (%.4f CPU)\n", threads, elapsed, cpu);
    report_peak();
    return 0;
}
