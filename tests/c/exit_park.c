/* A thread's exit leaves its empty slabs parked for the next thread
 * (issue 42, the thread storm): argv[1] (200) threads one after another,
 * each taking one object of each of 12 sizes (16 B - 3 KiB, 12 size
 * classes, so 12 slabs), writing and freeing them, and exiting. Prints the
 * slabs the allocator made (pcpalloc_stat "slabs_created", -1 without
 * pcpalloc) and the page faults of the threads after the first. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static const size_t sizes[12] = {16, 48, 96, 160, 256, 400, 640, 896, 1280, 1792, 2304, 3072};

static void *worker(void *arg) {
    (void)arg;
    void *p[12];
    for (int i = 0; i < 12; i++) {
        p[i] = malloc(sizes[i]);
        if (!p[i]) abort();
        memset(p[i], 0x5a, sizes[i]);
    }
    for (int i = 0; i < 12; i++) free(p[i]);
    return NULL;
}

static int64_t stat_of(const char *name) {
    int (*stat)(const char *, uint64_t *) =
        (int (*)(const char *, uint64_t *))dlsym(RTLD_DEFAULT, "pcpalloc_stat");
    uint64_t v = 0;
    return stat && stat(name, &v) == 0 ? (int64_t)v : -1;
}

static long faults(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 200;
    long f0 = 0;
    int64_t s1 = 0;
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, NULL) != 0 || pthread_join(t, NULL) != 0) return 2;
        if (i == 0) {
            f0 = faults();
            s1 = stat_of("slabs_created");
        }
    }
    printf("threads %d slabs_created_first %lld slabs_created %lld faults_after_first %ld\n", n,
           (long long)s1, (long long)stat_of("slabs_created"), faults() - f0);
    return 0;
}
