/* Issue 17, row 7: errno is untouched by every successful call. errno is
 * set to 12345 before the process's first malloc (nothing allocates before
 * it) and before each call after; a successful call must leave it so:
 * malloc (the first, then small, large, huge), a huge realloc from 16 MiB to
 * 256 MiB (another block right after it, so it moves or grows), free,
 * calloc, posix_memalign, aligned_alloc; and the first malloc of a new
 * thread. Every changed errno is listed; exit 1 if any. */
#include "issue_common.h"

#define MAGIC 12345

static int bad;
static char msgs[32][96];

static void check_errno(const char *what, int e) {
    if (e != MAGIC && bad < 32) {
        snprintf(msgs[bad], sizeof msgs[bad], "errno %d after a successful %s", e, what);
        bad++;
    }
}

#define CALL(what, expr)                                                                          \
    do {                                                                                           \
        errno = MAGIC;                                                                             \
        expr;                                                                                      \
        int e_ = errno;                                                                            \
        check_errno(what, e_);                                                                     \
    } while (0)

static void *thread_main(void *arg) {
    (void)arg;
    void *p;
    CALL("first malloc(100) of a new thread", p = malloc(100));
    CHECK(p);
    keep(p);
    CALL("free in a new thread", free(p));
    return NULL;
}

int main(void) {
    void *p, *q, *r;
    errno = MAGIC;
    p = malloc(100);
    check_errno("first malloc(100) of the process", errno);
    CHECK(p);
    keep(p);
    CALL("free(small)", free(p));
    CALL("malloc(32)", p = malloc(32));
    CHECK(p);
    keep(p);
    CALL("malloc(100 KiB)", q = malloc(100 * KiB));
    CHECK(q);
    keep(q);
    CALL("malloc(8 MiB)", r = malloc(8 * MiB));
    CHECK(r);
    keep(r);
    CALL("free(small)", free(p));
    CALL("free(100 KiB)", free(q));
    CALL("free(8 MiB)", free(r));

    char *a, *b, *c;
    CALL("malloc(16 MiB)", a = malloc(16 * MiB));
    CHECK(a);
    memset(a, 5, 16 * MiB);
    CALL("malloc(16 MiB)", b = malloc(16 * MiB));
    CHECK(b);
    keep(b);
    CALL("realloc(16 MiB -> 256 MiB)", c = realloc(a, 256 * MiB));
    CHECK(c);
    CHECK(c[16 * MiB - 1] == 5);
    c[256 * MiB - 1] = 1;
    CALL("free(256 MiB)", free(c));
    CALL("free(16 MiB)", free(b));

    CALL("calloc(1000, 8)", p = calloc(1000, 8));
    CHECK(p);
    keep(p);
    CALL("calloc(1, 32 MiB)", q = calloc(1, 32 * MiB));
    CHECK(q);
    keep(q);
    CALL("free(calloc)", free(p));
    CALL("free(calloc 32 MiB)", free(q));

    int rc;
    CALL("posix_memalign(64, 1000)", rc = posix_memalign(&p, 64, 1000));
    CHECK(rc == 0);
    keep(p);
    CALL("posix_memalign(4096, 1 MiB)", rc = posix_memalign(&q, 4096, MiB));
    CHECK(rc == 0);
    keep(q);
    CALL("free(posix_memalign)", free(p));
    CALL("free(posix_memalign)", free(q));
    CALL("aligned_alloc(256, 4096)", p = aligned_alloc(256, 4096));
    CHECK(p);
    keep(p);
    CALL("aligned_alloc(2 MiB, 6 MiB)", q = aligned_alloc(2 * MiB, 6 * MiB));
    CHECK(q);
    keep(q);
    CALL("free(aligned_alloc)", free(p));
    CALL("free(aligned_alloc)", free(q));

    pthread_t t;
    CHECK(pthread_create(&t, NULL, thread_main, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);

    for (int i = 0; i < bad; i++) printf("FAIL: %s\n", msgs[i]);
    if (bad) return 1;
    printf("lc_errno ok\n");
    return 0;
}
