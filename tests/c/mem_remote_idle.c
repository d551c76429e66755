/* An owner that blocks for good does not keep what another thread freed
 * (issue 43, item 3).
 *
 * A thread (the owner) allocates 192 MiB of small objects of a few classes,
 * hands every one to the main thread and then waits on a condition variable
 * that is never signalled. The main thread frees them all and, by mode:
 *
 *   tick  — keeps working a little (objects of another size, 10 ms apart)
 *           for up to 5 s, watching the resident size: prints
 *           "back_after_ms N" once it is below a quarter of what was
 *           allocated (or "back_after_ms -1");
 *   trim  — calls malloc_trim(0) once: prints "rss_before_trim_kib" and
 *           "rss_after_trim_kib";
 *   limit — allocates 384 MiB of 1000-byte objects (run it under
 *           PCPALLOC_MEMORY_LIMIT=512M): exits 2 if a malloc returns NULL.
 *
 * Prints "rss_full_kib" (everything allocated) and "rss_freed_kib" (right
 * after the frees) first. Runs on glibc too, as the reference. */
#include "issue_common.h"

#include <sys/mman.h>

#define OWNED_BYTES (192 * MiB)

static const size_t SIZES[] = {32, 64, 96, 160, 256};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static void **objs;
static size_t nobjs;
static int handed;

static void *owner(void *arg) {
    (void)arg;
    size_t bytes = 0, n = 0;
    while (bytes < OWNED_BYTES) {
        size_t size = SIZES[n % NSIZES];
        void *p = malloc(size);
        CHECK(p != NULL);
        memset(p, (int)n, size);
        objs[n++] = p;
        bytes += size;
    }
    pthread_mutex_lock(&mu);
    nobjs = n;
    handed = 1;
    pthread_cond_broadcast(&cv);
    /* Blocks for good: nobody signals `never`. */
    for (;;) pthread_cond_wait(&never, &mu);
    return NULL;
}

static unsigned long long kib(uint64_t b) { return (unsigned long long)(b / 1024); }

/* A little work of the main thread's own: objects of a size the owner
 * never used, more than a bin holds. */
static void work(void) {
    static void *q[1500];
    for (size_t k = 0; k < 1500; k++) {
        q[k] = malloc(1000);
        CHECK(q[k] != NULL);
        *(volatile char *)q[k] = (char)k;
    }
    for (size_t k = 0; k < 1500; k++) free(q[k]);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "tick";
    start_up();
    size_t most = OWNED_BYTES / SIZES[0] + 1;
    objs = mmap(NULL, most * sizeof(void *), PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(objs != MAP_FAILED);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, owner, NULL) == 0);
    pthread_mutex_lock(&mu);
    while (!handed) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    printf("rss_full_kib %llu\n", kib(vm_rss()));
    for (size_t i = 0; i < nobjs; i++) free(objs[i]);
    printf("rss_freed_kib %llu\n", kib(vm_rss()));
    if (strcmp(mode, "tick") == 0) {
        double start = now_s();
        long back = -1;
        while (now_s() - start < 5.0) {
            work();
            if (vm_rss() < OWNED_BYTES / 4) {
                back = (long)((now_s() - start) * 1000);
                break;
            }
            sleep_ms(10);
        }
        printf("rss_end_kib %llu\n", kib(vm_rss()));
        printf("back_after_ms %ld\n", back);
    } else if (strcmp(mode, "trim") == 0) {
        printf("rss_before_trim_kib %llu\n", kib(vm_rss()));
        malloc_trim(0);
        printf("rss_after_trim_kib %llu\n", kib(vm_rss()));
    } else if (strcmp(mode, "limit") == 0) {
        size_t n = 384 * MiB / 1000;
        void **v = mmap(NULL, n * sizeof(void *), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(v != MAP_FAILED);
        for (size_t i = 0; i < n; i++) {
            v[i] = malloc(1000);
            if (!v[i]) {
                printf("malloc(1000) returned NULL after %zu objects (%llu KiB)\n", i,
                       kib((uint64_t)i * 1000));
                fflush(stdout);
                exit(2);
            }
            *(volatile char *)v[i] = (char)i;
        }
        printf("rss_limit_kib %llu\n", kib(vm_rss()));
        for (size_t i = 0; i < n; i++) free(v[i]);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 1;
    }
    printf("mem_remote_idle ok\n");
    fflush(stdout);
    /* The owner still blocks: leave without joining it. */
    _exit(0);
}
