/* Bad input, one case per run (argv[1]). Cases that must succeed exit 0;
 * cases that must be caught abort after one line on stderr. */
#include "common.h"
#include <semaphore.h>
#include <sys/resource.h>

static int eq(const char *a, const char *b) { return strcmp(a, b) == 0; }

/* Hide a pointer from the optimiser, which may otherwise drop a
 * malloc/free pair (or a double free, being undefined) altogether. */
static void *opaque(void *p) {
    __asm__ volatile("" : "+r"(p)::"memory");
    return p;
}

/* double_free_remote_pending: a block freed by this thread, which then
 * stays alive so its batch of remote frees is not flushed. */
static char *pending_p;
static sem_t pending_freed;
static void *free_and_stay(void *arg) {
    (void)arg;
    free(opaque(pending_p));
    sem_post(&pending_freed);
    for (;;) pause();
    return NULL;
}

int main(int argc, char **argv) {
    require_pcpalloc();
    CHECK(argc == 2);
    const char *c = argv[1];
    if (eq(c, "absurd_size")) {
        errno = 0;
        CHECK(malloc(SIZE_MAX) == NULL && errno == ENOMEM);
        errno = 0;
        CHECK(malloc(SIZE_MAX / 2) == NULL && errno == ENOMEM);
        errno = 0;
        CHECK(malloc(1ul << 50) == NULL && errno == ENOMEM);
        errno = 0;
        CHECK(realloc(NULL, SIZE_MAX - 4096) == NULL && errno == ENOMEM);
        void *p = malloc(10);
        errno = 0;
        CHECK(realloc(p, 1ul << 50) == NULL && errno == ENOMEM);
        free(p);
    } else if (eq(c, "memory_limit")) {
        /* Run with PCPALLOC_MEMORY_LIMIT=64M. */
        void *v[200];
        int n = 0;
        for (;;) {
            errno = 0;
            void *p = malloc(1 << 20);
            if (!p) {
                CHECK(errno == ENOMEM);
                break;
            }
            memset(p, 3, 1 << 20);
            CHECK(n < 200);
            v[n++] = p;
        }
        CHECK(n >= 40 && n <= 64);
        for (int i = 0; i < n; i++) free(v[i]);
        /* All but one again: the frees may start the allocator's
         * maintenance thread, whose start allocates a few KiB. */
        for (int i = 0; i < n - 1; i++) {
            v[i] = malloc(1 << 20);
            CHECK(v[i]);
        }
        for (int i = 0; i < n - 1; i++) free(v[i]);
        printf("limit reached after %d MiB\n", n);
    } else if (eq(c, "calloc_overflow")) {
        errno = 0;
        CHECK(calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
        errno = 0;
        CHECK(calloc(1ul << 33, 1ul << 33) == NULL && errno == ENOMEM);
    } else if (eq(c, "reallocarray_overflow")) {
        char *p = malloc(16);
        strcpy(p, "kept");
        errno = 0;
        CHECK(reallocarray(p, SIZE_MAX / 4, 8) == NULL && errno == ENOMEM);
        CHECK(strcmp(p, "kept") == 0);
        free(p);
    } else if (eq(c, "bad_alignment")) {
        void *p = (void *)0x1234;
        CHECK(posix_memalign(&p, 3, 10) == EINVAL && p == (void *)0x1234);
        CHECK(posix_memalign(&p, 4, 10) == EINVAL && p == (void *)0x1234);
        CHECK(posix_memalign(&p, 0, 10) == EINVAL && p == (void *)0x1234);
        errno = 0;
        CHECK(aligned_alloc(3, 10) == NULL && errno == EINVAL);
        errno = 0;
        CHECK(aligned_alloc(0, 10) == NULL && errno == EINVAL);
        errno = 0;
        CHECK(memalign(SIZE_MAX, 10) == NULL && errno == EINVAL);
        /* An alignment the address space cannot hold. (1 TiB can be held:
         * only the aligned block is backed by memory.) */
        CHECK(posix_memalign(&p, 1ul << 62, 10) == ENOMEM && p == (void *)0x1234);
    } else if (eq(c, "free_null_and_malloc0")) {
        free(NULL);
        void *a = malloc(0), *b = malloc(0);
        CHECK(a && b && a != b);
        free(a);
        free(b);
    } else if (eq(c, "free_keeps_errno")) {
        size_t sizes[] = {10, 5000, 20000, 1u << 20, 8u << 20};
        for (int i = 0; i < 5; i++) {
            void *p = malloc(sizes[i]);
            errno = 1234;
            free(p);
            CHECK(errno == 1234);
        }
        errno = 4321;
        free(NULL);
        CHECK(errno == 4321);
    } else if (eq(c, "double_free_small")) {
        char *p = opaque(malloc(32));
        free(opaque(p));
        free(opaque(p));
    } else if (eq(c, "double_free_large")) {
        char *p = opaque(malloc(20000));
        free(opaque(p));
        free(opaque(p));
    } else if (eq(c, "double_free_large_remote")) {
        /* kept in this thread's large bins, freed again by another one */
        static char *p;
        p = opaque(malloc(100000));
        free(opaque(p));
        pthread_t t;
        pthread_create(&t, NULL, (void *(*)(void *))free, p);
        pthread_join(t, NULL);
    } else if (eq(c, "double_free_remote")) {
        /* freed by this thread, freed again by another one */
        static char *p;
        p = opaque(malloc(48));
        free(opaque(p));
        pthread_t t;
        pthread_create(&t, NULL, (void *(*)(void *))free, p);
        pthread_join(t, NULL);
    } else if (eq(c, "double_free_remote_pending")) {
        /* freed by another thread, which keeps it in its batch of remote
         * frees (it stays alive), then freed again by the owner */
        sem_init(&pending_freed, 0, 0);
        pending_p = opaque(malloc(48));
        pthread_t t;
        pthread_create(&t, NULL, free_and_stay, NULL);
        sem_wait(&pending_freed);
        free(opaque(pending_p));
    } else if (eq(c, "invalid_free_stack")) {
        char buf[64];
        free(opaque(buf + 8));
    } else if (eq(c, "invalid_free_static")) {
        static char data[64];
        free(opaque(data));
    } else if (eq(c, "invalid_free_heap_unmapped")) {
        /* In the heap's first section (256 MiB aligned), far past the
         * blocks a fresh heap has put online: reserved, never handed out */
        char *p = opaque(malloc(64));
        uintptr_t base = (uintptr_t)p & ~(((uintptr_t)256 << 20) - 1);
        free(opaque((void *)(base + (200u << 20))));
    } else if (eq(c, "invalid_free_heap_metadata")) {
        /* the section's page descriptors: never handed out */
        char *p = opaque(malloc(64));
        uintptr_t base = (uintptr_t)p & ~(((uintptr_t)256 << 20) - 1);
        free(opaque((void *)(base + 4096)));
    } else if (eq(c, "invalid_free_top_bit_first")) {
        /* the first call of the process: no heap section yet */
        free(opaque((void *)((uintptr_t)1 << 63)));
    } else if (eq(c, "invalid_free_top_bit_small_as")) {
        /* a heap mapped block by block (the address space too small for a
         * whole section): the chunk map answers alone */
        struct rlimit r = {200u << 20, 200u << 20};
        CHECK(setrlimit(RLIMIT_AS, &r) == 0);
        CHECK(opaque(malloc(64)) != NULL);
        free(opaque((void *)(((uintptr_t)1 << 63) + (200u << 20))));
    } else if (eq(c, "invalid_free_uncarved")) {
        /* The last slot of a fresh 16-byte slab (32 KiB, aligned to its
         * size, carved a page at a time): never handed out. Accepted, it
         * would be carved again later and handed out twice. */
        char *p = opaque(malloc(16));
        uintptr_t base = (uintptr_t)p & ~(((uintptr_t)32 << 10) - 1);
        free(opaque((void *)(base + (32u << 10) - 16)));
    } else if (eq(c, "invalid_free_wild")) {
        free(opaque((void *)~(uintptr_t)0xf));
    } else if (eq(c, "interior_small")) {
        char *p = opaque(malloc(64));
        free(opaque(p + 16));
    } else if (eq(c, "interior_large")) {
        char *p = opaque(malloc(100000));
        free(opaque(p + 8192));
    } else if (eq(c, "interior_large_head_page")) {
        char *p = opaque(malloc(100000));
        free(opaque(p + 8));
    } else if (eq(c, "realloc_freed")) {
        char *p = opaque(malloc(40));
        free(opaque(p));
        p = realloc(opaque(p), 80);
    } else if (eq(c, "realloc_freed_large")) {
        char *p = opaque(malloc(40000));
        free(opaque(p));
        p = realloc(opaque(p), 80000);
    } else if (eq(c, "realloc_invalid")) {
        char buf[16];
        realloc(opaque(buf), 100);
    } else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    printf("%s ok\n", c);
    return 0;
}
