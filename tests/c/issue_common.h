/* Helpers for the programs of tests/budget.rs and tests/lifecycle.rs
 * (issues 16 and 17). Every program also runs without libpcpalloc.so (on
 * glibc, as the reference), so pcpalloc's own entry points are looked up
 * with dlsym, never linked. */
#include "common.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* Makes the compiler believe *p is used: without it GCC deletes a malloc
 * whose block is only written and freed (and the memset with it). */
static inline void keep(void *p) { __asm__ volatile("" : : "g"(p) : "memory"); }

/* One small malloc and free: the allocator starts up (reads its settings,
 * maps its first memory) before a program measures anything. */
static inline void start_up(void) {
    void *p = malloc(64);
    keep(p);
    free(p);
}

typedef int (*stat_fn)(const char *, uint64_t *);

/* pcpalloc_stat when pcpalloc is the malloc of this process, else NULL. */
static inline stat_fn pcp_stat_fn(void) {
    return (stat_fn)dlsym(RTLD_DEFAULT, "pcpalloc_stat");
}

/* One counter of pcpalloc's report; aborts the test if it is unknown. */
static inline uint64_t pcp_stat(const char *name) {
    stat_fn f = pcp_stat_fn();
    CHECK(f != NULL);
    uint64_t v = 0;
    int rc = f(name, &v);
    if (rc != 0) {
        fprintf(stderr, "pcpalloc_stat(\"%s\") returned %d\n", name, rc);
        exit(1);
    }
    return v;
}

/* The first of `names` (NULL-terminated) that pcpalloc's report knows:
 * its value in *v, and its name; NULL if none (or no pcpalloc). For
 * counters the fix may rename (peak_mapped_bytes -> peak_charged_bytes). */
static inline const char *pcp_stat_first(const char *const *names, uint64_t *v) {
    stat_fn f = pcp_stat_fn();
    if (!f) return NULL;
    for (; *names; names++)
        if (f(*names, v) == 0) return *names;
    return NULL;
}

/* A "Key:   1234 kB" line of a /proc file, in bytes (0 if missing). Reads
 * with read(2) into a stack buffer: no allocation. */
static inline uint64_t proc_kib_field(const char *path, const char *key) {
    char buf[8192];
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    size_t kl = strlen(key);
    for (char *line = buf; line && *line;) {
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            return strtoull(line + kl + 1, NULL, 10) * 1024;
        }
        line = strchr(line, '\n');
        if (line) line++;
    }
    return 0;
}

static inline uint64_t vm_rss(void) { return proc_kib_field("/proc/self/status", "VmRSS"); }
static inline uint64_t vm_hwm(void) { return proc_kib_field("/proc/self/status", "VmHWM"); }
static inline uint64_t mem_total(void) { return proc_kib_field("/proc/meminfo", "MemTotal"); }
static inline uint64_t swap_total(void) { return proc_kib_field("/proc/meminfo", "SwapTotal"); }

/* /proc/sys/vm/overcommit_memory (0 if unreadable). */
static inline int overcommit_mode(void) {
    char b[8] = {0};
    int fd = open("/proc/sys/vm/overcommit_memory", O_RDONLY);
    if (fd < 0) return 0;
    read(fd, b, sizeof b - 1);
    close(fd);
    return atoi(b);
}

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* xorshift64*: a per-thread generator, no allocation. */
static inline uint64_t rng_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* About log-uniform in [lo, hi] (2^x with x uniform, the fraction of the
 * power of two linear: no libm). */
static inline size_t rng_size(uint64_t *s, size_t lo, size_t hi) {
    double llo = 63 - __builtin_clzll(lo), lhi = 63 - __builtin_clzll(hi);
    llo += (double)(lo - ((size_t)1 << (int)llo)) / (double)((size_t)1 << (int)llo);
    lhi += (double)(hi - ((size_t)1 << (int)lhi)) / (double)((size_t)1 << (int)lhi);
    double u = (double)(rng_next(s) >> 11) / (double)(1ULL << 53);
    double x = llo + u * (lhi - llo);
    int k = (int)x;
    size_t n = (size_t)((double)((size_t)1 << k) * (1.0 + (x - k)));
    if (n < lo) n = lo;
    if (n > hi) n = hi;
    return n;
}

/* Writes a string with write(2): usable before the first malloc. */
static inline void wr(int fd, const char *s) { write(fd, s, strlen(s)); }

/* Writes a string and a number with write(2). */
static inline void wr_num(int fd, const char *s, unsigned long long v) {
    char b[32];
    int i = sizeof b;
    b[--i] = '\n';
    do {
        b[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    wr(fd, s);
    write(fd, b + i, sizeof b - i);
}

/* No core files for the programs that abort on purpose. */
static inline void no_core(void) {
    struct rlimit r = {0, 0};
    setrlimit(RLIMIT_CORE, &r);
}

/* The threads of this process (entries of /proc/self/task). */
static inline int task_count(void) {
    DIR *d = opendir("/proc/self/task");
    CHECK(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}
