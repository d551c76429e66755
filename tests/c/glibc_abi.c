/* The C ABI a glibc program expects, under LD_PRELOAD=libpcpalloc.so:
 * glibc's __libc_* names reach the same heap as malloc/free, mallinfo2
 * tracks live bytes, free_sized and free_aligned_sized work, mallopt says
 * what it does not do, malloc_info writes our counters, and pcpalloc_stat
 * reads one by name. pcpalloc's own symbols and C23's free_sized (not in
 * this glibc) are found with dlsym, as the program links only libc. */
#include "common.h"
#include <dlfcn.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

#define N 6000

static int (*stat_fn)(const char *, uint64_t *);

static long long uord(void) { return (long long)mallinfo2().uordblks; }

static void tracks(long long base, long long live, const char *when) {
    long long got = uord() - base;
    long long diff = got > live ? got - live : live - got;
    printf("%s: live %lld, mallinfo2 uordblks delta %lld (%.1f%%)\n", when, live, got,
           100.0 * (double)diff / (double)live);
    CHECK(diff * 10 <= live);
}

int main(void) {
    /* Each half of a pair from one name, the other half from the other. */
    for (int i = 0; i < 1000; i++) {
        void *p = malloc(40 + i % 300);
        fill(p, 40, i);
        __libc_free(p);
        void *q = __libc_malloc(40 + i % 5000);
        fill(q, 40, i);
        free(q);
    }
    char *c = __libc_calloc(100, 10);
    for (int i = 0; i < 1000; i++) CHECK(c[i] == 0);
    c = __libc_realloc(c, 100000);
    CHECK(c != NULL && c[999] == 0);
    free(c);
    void *m = __libc_memalign(256, 1000);
    CHECK(((uintptr_t)m & 255) == 0);
    __libc_free(m);

    /* mallinfo2 follows the live bytes, by their usable size. */
    static void *v[N];
    long long base = uord(), live = 0;
    for (int i = 0; i < N; i++) {
        size_t size = (i % 50 == 0) ? 20000 + (size_t)i * 31 % 200000 : 16 + (size_t)i * 37 % 3000;
        v[i] = malloc(size);
        fill(v[i], size, i);
        live += (long long)malloc_usable_size(v[i]);
    }
    tracks(base, live, "allocated");
    for (int i = 0; i < N; i += 2) {
        live -= (long long)malloc_usable_size(v[i]);
        free(v[i]);
        v[i] = NULL;
    }
    tracks(base, live, "half freed");

    stat_fn = (int (*)(const char *, uint64_t *))dlsym(RTLD_DEFAULT, "pcpalloc_stat");
    CHECK(stat_fn != NULL);
    uint64_t allocated = 0, x = 0;
    CHECK(stat_fn("allocated_bytes", &allocated) == 0);
    CHECK(stat_fn("no_such_counter", &x) == ENOENT);
    CHECK(stat_fn("PCPALLOC_PCP", &x) == EINVAL); /* "cpu" is not a number */
    CHECK(stat_fn(NULL, &x) == EINVAL);
    struct mallinfo2 mi = mallinfo2();
    printf("pcpalloc_stat allocated_bytes %llu, mallinfo2 uordblks %zu hblkhd %zu arena %zu\n",
           (unsigned long long)allocated, mi.uordblks, mi.hblkhd, mi.arena);
    CHECK(allocated >= mi.uordblks);
    CHECK(mi.arena >= mi.uordblks);
    for (int i = 1; i < N; i += 2) free(v[i]);

    /* C23 free_sized / free_aligned_sized. */
    void (*fs)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
    void (*fas)(void *, size_t, size_t) =
        (void (*)(void *, size_t, size_t))dlsym(RTLD_DEFAULT, "free_aligned_sized");
    CHECK(fs != NULL && fas != NULL);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            size_t size = 8 + (size_t)i * 13 % 6000;
            v[i] = malloc(size);
            fill(v[i], size, i);
        }
        for (int i = 0; i < N; i++) {
            size_t size = 8 + (size_t)i * 13 % 6000;
            CHECK(check(v[i], size, i));
            fs(v[i], size);
        }
    }
    fs(NULL, 10);
    void *a = aligned_alloc(4096, 8192);
    CHECK(((uintptr_t)a & 4095) == 0);
    fas(a, 4096, 8192);

    /* mallopt honours none of glibc's parameters, and says so. */
    CHECK(mallopt(M_ARENA_MAX, 1) == 0);
    CHECK(mallopt(M_MMAP_THRESHOLD, 1 << 20) == 0);

    /* malloc_info writes our counters as XML. */
    char *xml = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&xml, &len);
    CHECK(malloc_info(0, f) == 0);
    fclose(f);
    CHECK(strstr(xml, "<malloc version=\"pcpalloc-") != NULL);
    CHECK(strstr(xml, "<stat name=\"allocated_bytes\" value=\"") != NULL);
    CHECK(strstr(xml, "</malloc>") != NULL);
    free(xml);
    errno = 0;
    CHECK(malloc_info(1, stdout) == -1 && errno == EINVAL);

    printf("glibc_abi ok\n");
    return 0;
}
