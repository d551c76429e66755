/* Issue 17, row 6: a program that is not run under LD_PRELOAD dlopen()s
 * libpcpalloc.so (argv[1]), calls its malloc and free through dlsym from
 * two threads (32 MiB in all: enough to start its background thread),
 * dlclose()s it, sleeps 1.5 s (the test sets PCPALLOC_DECAY_MS=100, so a
 * background thread would tick many times), then dlopen()s and uses it
 * again. Must exit 0 (before the fix: SIGSEGV in the background thread,
 * whose code had been unmapped). */
#include "issue_common.h"

typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);

static malloc_fn lib_malloc;
static free_fn lib_free;

static void *worker(void *arg) {
    (void)arg;
    void *v[16];
    for (int i = 0; i < 16; i++) {
        v[i] = lib_malloc(MiB);
        CHECK(v[i]);
        memset(v[i], i, MiB);
    }
    for (int round = 0; round < 100; round++) {
        void *s = lib_malloc(16 + round * 8);
        CHECK(s);
        memset(s, 1, 16);
        lib_free(s);
    }
    for (int i = 0; i < 16; i++) lib_free(v[i]);
    return NULL;
}

static void *load(const char *path, int round) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("FAIL: dlopen #%d: %s\n", round, dlerror());
        exit(1);
    }
    lib_malloc = (malloc_fn)dlsym(h, "malloc");
    lib_free = (free_fn)dlsym(h, "free");
    CHECK(lib_malloc && lib_free);
    return h;
}

static void use(int round) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, worker, NULL) == 0);
    for (int i = 0; i < 2; i++) CHECK(pthread_join(t[i], NULL) == 0);
    printf("round %d: used from two threads\n", round);
    fflush(stdout);
}

int main(int argc, char **argv) {
    CHECK(argc > 1);
    CHECK(getenv("LD_PRELOAD") == NULL || strstr(getenv("LD_PRELOAD"), "pcpalloc") == NULL);
    void *h = load(argv[1], 1);
    use(1);
    CHECK(dlclose(h) == 0);
    printf("dlclose done; sleeping 1.5 s\n");
    fflush(stdout);
    sleep_ms(1500);
    h = load(argv[1], 2);
    use(2);
    sleep_ms(300);
    printf("lc_dlopen ok\n");
    fflush(stdout);
    return 0;
}
