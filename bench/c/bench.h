/* Shared helpers for the C benchmark programs: fixed work, timed by the
 * harness from outside (wall time and peak RSS of the whole process). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static inline uint64_t rng_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static inline uint64_t rng_range(uint64_t *s, uint64_t lo, uint64_t hi) {
    return lo + (rng_next(s) >> 11) % (hi - lo + 1);
}

static inline void pin(int cpu) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu % (n > 0 ? n : 1), &set);
    sched_setaffinity(0, sizeof set, &set);
}

static inline void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* Work scale from argv[1] (1 = the quick size). */
static inline long scale_arg(int argc, char **argv) {
    return argc > 1 ? atol(argv[1]) : 1;
}

/* Prints this process's peak RSS (VmHWM) for the harness: ru_maxrss of a
 * child started from a large process reports the parent's size. */
static inline void report_peak(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) printf("peak_kib %ld\n", atol(line + 6));
    if (f) fclose(f);
}

/* A field of /proc/self/smaps_rollup, in KiB ("AnonHugePages:"); -1 if
 * missing (the huge-page programs: pointer_chase, phases). */
static inline long rollup(const char *field) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0) v = atol(line + n);
    if (f) fclose(f);
    return v;
}

static inline int cmp_uptr(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* Distinct values of v[0..n) (sorts v). */
static inline size_t count_distinct(uintptr_t *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_uptr);
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || v[i] != v[i - 1]) d++;
    return d;
}
