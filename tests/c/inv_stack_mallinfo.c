/* Issue 42, item 5: what mallinfo2 and mallinfo cost with a 100 MB heap.
 * Builds the heap (about 60 MB of blocks of 16 B - 128 KiB, written, and
 * four huge blocks of 10 MB), then calls each 1000 times, timed, counting
 * meanwhile the system calls a full snapshot would make: open / openat
 * (of /proc/self/smaps) and mincore, by defining them here — libc's
 * callers, libpcpalloc.so among them, bind to a program's own definitions
 * — and the read system calls the kernel counts in /proc/self/io
 * (`syscr`), which catches reads however the file was opened. Prints
 *
 *   HEAP bytes <uordblks + hblkhd>
 *   MALLINFO2 ns_per_call <ns> opens <n> mincores <n> syscr <n>
 *   MALLINFO ns_per_call <ns> opens <n> mincores <n> syscr <n>
 *   inv_stack_mallinfo ok
 *
 * (syscr counts the reads of /proc/self/io itself too: a couple.) */
#include "issue_common.h"

#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define CALLS 1000

static volatile int counting;
static volatile long opens, mincores;

static int count_open(const char *path, int flags, va_list a) {
    int mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(a, int) : 0;
    if (counting) opens++;
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

int open(const char *path, int flags, ...) {
    va_list a;
    va_start(a, flags);
    int r = count_open(path, flags, a);
    va_end(a);
    return r;
}

int open64(const char *path, int flags, ...) {
    va_list a;
    va_start(a, flags);
    int r = count_open(path, flags, a);
    va_end(a);
    return r;
}

int openat(int dir, const char *path, int flags, ...) {
    va_list a;
    va_start(a, flags);
    int mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(a, int) : 0;
    va_end(a);
    if (counting) opens++;
    return (int)syscall(SYS_openat, dir, path, flags, mode);
}

int mincore(void *addr, size_t len, unsigned char *vec) {
    if (counting) mincores++;
    return (int)syscall(SYS_mincore, addr, len, vec);
}

/* The read system calls this process made (/proc/self/io), -1 if
 * unreadable. */
static long syscr(void) {
    char buf[512];
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/io", O_RDONLY, 0);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *p = strstr(buf, "syscr:");
    return p ? strtol(p + 6, NULL, 10) : -1;
}

static volatile size_t sink;

static void measure(const char *name, int old) {
    long r0 = syscr();
    opens = mincores = 0;
    counting = 1;
    double t0 = now_s();
    for (int i = 0; i < CALLS; i++) {
        if (old) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
            sink += (size_t)mallinfo().uordblks;
#pragma GCC diagnostic pop
        } else {
            sink += mallinfo2().uordblks;
        }
    }
    double t = now_s() - t0;
    counting = 0;
    long r1 = syscr();
    printf("%s ns_per_call %.0f opens %ld mincores %ld syscr %ld\n", name, t * 1e9 / CALLS, opens,
           mincores, r0 < 0 || r1 < 0 ? -1 : r1 - r0);
    fflush(stdout);
}

int main(void) {
    uint64_t rng = 7;
    size_t total = 0;
    enum { MAX_BLOCKS = 200000 };
    static void *blocks[MAX_BLOCKS];
    int n = 0;
    while (total < (60u << 20) && n < MAX_BLOCKS) {
        size_t sz = rng_size(&rng, 16, 128 << 10);
        blocks[n] = malloc(sz);
        CHECK(blocks[n]);
        memset(blocks[n], 1, sz);
        total += sz;
        n++;
    }
    static void *huge[4];
    for (int i = 0; i < 4; i++) {
        huge[i] = malloc(10u << 20);
        CHECK(huge[i]);
        memset(huge[i], 2, 10u << 20);
    }
    struct mallinfo2 m = mallinfo2();
    printf("HEAP bytes %zu\n", m.uordblks + m.hblkhd);
    measure("MALLINFO2", 0);
    measure("MALLINFO", 1);
    for (int i = 0; i < n; i++) free(blocks[i]);
    for (int i = 0; i < 4; i++) free(huge[i]);
    printf("inv_stack_mallinfo ok\n");
    return 0;
}
