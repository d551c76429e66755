/* Issue 42, item 4: every function of the malloc family, and pcpalloc's
 * own C API, on a 16 KiB thread stack (PTHREAD_STACK_MIN) and in a signal
 * handler on an 8 KiB alternate stack (SA_ONSTACK), with a heap that is
 * not trivial: some MiB in blocks of several threads (two still running,
 * two exited), a few huge blocks. Every stack has an inaccessible page
 * below it, so a call that needs more stack than there is dies of SIGSEGV.
 *
 * Each call is measured: the unused part of the stack is painted, the call
 * made, and the lowest byte it changed found. Printed as
 * "STACK <context> <call> <bytes>"; the figure counts from the measuring
 * function's frame (a hundred bytes or so of it), so it is what the call
 * needs of the stack the caller has left.
 *
 *   inv_stack_calls thread        the heap, then a 16 KiB thread that has
 *                                 allocated runs every call; then, for each
 *                                 call, a fresh 16 KiB thread makes it its
 *                                 first (the heap attach)
 *   inv_stack_calls signal        the heap, then the signal raised in the
 *                                 main thread (which has allocated) runs
 *                                 every call on its 8 KiB alternate stack;
 *                                 then, for each call, a fresh thread that
 *                                 has not allocated raises it and the
 *                                 handler makes that call its first
 *   inv_stack_calls first CALL    before anything allocated: the handler
 *                                 makes CALL the process's first (the
 *                                 allocator starts up on the 8 KiB
 *                                 alternate stack), then every call
 *   inv_stack_calls list          the calls' names
 *
 * pcpalloc's own functions are weak references: on glibc they are NULL and
 * skipped. Ends with "inv_stack_calls ok". */
#include "issue_common.h"

#include <stdint.h>
#include <sys/mman.h>

/* The stacks' sizes; INV_STACK_SCALE=n multiplies both (to measure what a
 * call that does not fit would need). */
static size_t scale = 1;
#define THREAD_STACK ((size_t)PTHREAD_STACK_MIN * scale)
#define ALT_STACK ((size_t)8192 * scale)
#define GUARD ((size_t)4096)
#define PAINT 0xa5
/* Bytes below the stack pointer left alone: memset's return address. */
#define PAINT_GAP 64

/* pcpalloc's C API (include/pcpalloc.h), NULL when it is not loaded. */
struct pcpalloc_thread_stats {
    uint64_t allocated, deallocated, cached;
};
extern int pcpalloc_stat(const char *, uint64_t *) __attribute__((weak));
extern int pcpalloc_report(void (*)(void *, const char *, size_t), void *) __attribute__((weak));
extern int pcpalloc_set(const char *, const char *) __attribute__((weak));
extern const char *pcpalloc_version(void) __attribute__((weak));
extern void pcpalloc_thread_flush(void) __attribute__((weak));
extern int pcpalloc_thread_stats(struct pcpalloc_thread_stats *) __attribute__((weak));

/* The lowest usable byte of the stack the calling thread runs on now. */
static __thread char *stack_lo;

/* Blocks the calls pass to each other (one context at a time). */
static void *slot[8];
/* Blocks another thread allocated, for remote frees. */
static void *foreign[64];
static int nr_foreign;
static int devnull = -1, saved_stderr = -1;
static char stderr_buf[4096];
static volatile size_t sink;

static void check_ptr(void *p, const char *what) {
    if (!p) {
        wr(2, "inv_stack_calls: ");
        wr(2, what);
        wr(2, " returned NULL\n");
        _exit(1);
    }
}

static void c_malloc(void) { check_ptr(slot[0] = malloc(40), "malloc"); memset(slot[0], 1, 40); }
static void c_free(void) { free(slot[0]); slot[0] = NULL; }
static void c_malloc_large(void) { check_ptr(slot[1] = malloc(200 << 10), "malloc(200 KiB)"); }
static void c_free_large(void) { free(slot[1]); slot[1] = NULL; }
static void c_malloc_huge(void) { check_ptr(slot[1] = malloc(6 << 20), "malloc(6 MiB)"); }
static void c_free_huge(void) { free(slot[1]); slot[1] = NULL; }
static void c_free_remote(void) {
    if (nr_foreign > 0) free(foreign[--nr_foreign]);
}
static void c_calloc(void) { check_ptr(slot[0] = calloc(10, 40), "calloc"); }
static void c_calloc_large(void) { check_ptr(slot[1] = calloc(256, 4096), "calloc(1 MiB)"); }
static void c_realloc_null(void) { check_ptr(slot[0] = realloc(NULL, 100), "realloc(NULL)"); }
static void c_realloc_grow(void) { check_ptr(slot[0] = realloc(slot[0], 20000), "realloc(grow)"); }
static void c_realloc_huge(void) { check_ptr(slot[0] = realloc(slot[0], 5 << 20), "realloc(huge)"); }
static void c_realloc_shrink(void) { check_ptr(slot[0] = realloc(slot[0], 64), "realloc(shrink)"); }
static void c_reallocarray(void) {
    check_ptr(slot[0] = reallocarray(slot[0], 100, 50), "reallocarray");
}
static void c_posix_memalign(void) {
    if (posix_memalign(&slot[2], 64, 1000) != 0) check_ptr(NULL, "posix_memalign");
}
static void c_posix_memalign_big(void) {
    if (posix_memalign(&slot[3], 2 << 20, 3 << 20) != 0) check_ptr(NULL, "posix_memalign(2 MiB)");
}
static void c_aligned_alloc(void) { check_ptr(slot[4] = aligned_alloc(4096, 8192), "aligned_alloc"); }
static void c_memalign(void) { check_ptr(slot[5] = memalign(256, 1000), "memalign"); }
static void c_valloc(void) { check_ptr(slot[6] = valloc(5000), "valloc"); }
static void c_pvalloc(void) { check_ptr(slot[7] = pvalloc(5000), "pvalloc"); }
static void c_usable_size(void) { sink += malloc_usable_size(slot[5]); }
static void c_free_aligned(void) {
    for (int i = 2; i < 8; i++) {
        free(slot[i]);
        slot[i] = NULL;
    }
}
static void c_mallinfo(void) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    struct mallinfo m = mallinfo();
#pragma GCC diagnostic pop
    sink += (size_t)m.arena;
}
static void c_mallinfo2(void) {
    struct mallinfo2 m = mallinfo2();
    sink += m.uordblks;
}
static void c_mallopt(void) { sink += (size_t)mallopt(-100 /* M_DECAY_TIME */, 1); }
static void c_mallopt_purge(void) { sink += (size_t)mallopt(-101 /* M_PURGE */, 0); }
static void c_malloc_trim(void) { sink += (size_t)malloc_trim(0); }
static void c_malloc_stats(void) {
    dup2(devnull, 2);
    malloc_stats();
    fflush(stderr);
    dup2(saved_stderr, 2);
}
/* Into stderr, made fully buffered over a static buffer at start (so
 * writing to it allocates nothing), with fd 2 on /dev/null meanwhile. */
static void c_malloc_info(void) {
    dup2(devnull, 2);
    sink += (size_t)malloc_info(0, stderr);
    fflush(stderr);
    dup2(saved_stderr, 2);
}
static void c_pcpalloc_stat(void) {
    uint64_t v = 0;
    if (pcpalloc_stat("allocated_bytes", &v) != 0) check_ptr(NULL, "pcpalloc_stat");
    sink += v;
}
static void c_pcpalloc_stat_missing(void) {
    uint64_t v = 0;
    if (pcpalloc_stat("no_such_counter", &v) != ENOENT) check_ptr(NULL, "pcpalloc_stat(missing)");
}
static void count_text(void *ctx, const char *text, size_t len) {
    (void)text;
    *(size_t *)ctx += len;
}
static void c_pcpalloc_report(void) {
    size_t n = 0;
    pcpalloc_report(count_text, &n);
    if (n < 100) check_ptr(NULL, "pcpalloc_report (no text)");
}
static void c_pcpalloc_set(void) {
    if (pcpalloc_set("PCPALLOC_DECAY_MS", "1000") != 0) check_ptr(NULL, "pcpalloc_set");
}
static void c_pcpalloc_version(void) { sink += (size_t)pcpalloc_version()[0]; }
static void c_pcpalloc_thread_flush(void) { pcpalloc_thread_flush(); }
static void c_pcpalloc_thread_stats(void) {
    struct pcpalloc_thread_stats t;
    pcpalloc_thread_stats(&t);
    sink += t.allocated;
}

struct call {
    const char *name;
    void (*fn)(void);
    int pcpalloc_only; /* a function of pcpalloc's own API */
};

/* In an order where each call finds what it needs in the slots. */
static const struct call calls[] = {
    {"malloc", c_malloc, 0},
    {"free", c_free, 0},
    {"malloc_large", c_malloc_large, 0},
    {"free_large", c_free_large, 0},
    {"malloc_huge", c_malloc_huge, 0},
    {"free_huge", c_free_huge, 0},
    {"free_remote", c_free_remote, 0},
    {"calloc", c_calloc, 0},
    {"free_calloc", c_free, 0},
    {"calloc_large", c_calloc_large, 0},
    {"free_calloc_large", c_free_large, 0},
    {"realloc_null", c_realloc_null, 0},
    {"realloc_grow", c_realloc_grow, 0},
    {"realloc_huge", c_realloc_huge, 0},
    {"realloc_shrink", c_realloc_shrink, 0},
    {"reallocarray", c_reallocarray, 0},
    {"free_realloc", c_free, 0},
    {"posix_memalign", c_posix_memalign, 0},
    {"posix_memalign_2mib", c_posix_memalign_big, 0},
    {"aligned_alloc", c_aligned_alloc, 0},
    {"memalign", c_memalign, 0},
    {"valloc", c_valloc, 0},
    {"pvalloc", c_pvalloc, 0},
    {"malloc_usable_size", c_usable_size, 0},
    {"free_aligned", c_free_aligned, 0},
    {"mallinfo", c_mallinfo, 0},
    {"mallinfo2", c_mallinfo2, 0},
    {"mallopt", c_mallopt, 0},
    {"mallopt_purge", c_mallopt_purge, 0},
    {"malloc_trim", c_malloc_trim, 0},
    {"malloc_stats", c_malloc_stats, 0},
    {"malloc_info", c_malloc_info, 0},
    {"pcpalloc_stat", c_pcpalloc_stat, 1},
    {"pcpalloc_stat_missing", c_pcpalloc_stat_missing, 1},
    {"pcpalloc_report", c_pcpalloc_report, 1},
    {"pcpalloc_set", c_pcpalloc_set, 1},
    {"pcpalloc_version", c_pcpalloc_version, 1},
    {"pcpalloc_thread_flush", c_pcpalloc_thread_flush, 1},
    {"pcpalloc_thread_stats", c_pcpalloc_thread_stats, 1},
};
#define NR_CALLS ((int)(sizeof calls / sizeof calls[0]))

static int have_pcpalloc(void) { return pcpalloc_stat != NULL; }

/* Paints the stack below this frame, runs fn, and returns how many bytes
 * below this frame it touched. */
__attribute__((noinline)) static size_t measure(void (*fn)(void)) {
    char *top;
    __asm__ volatile("mov %%rsp, %0" : "=r"(top));
    char *lo = stack_lo;
    memset(lo, PAINT, (size_t)(top - PAINT_GAP - lo));
    fn();
    char *p = lo;
    while (p < top && *(volatile unsigned char *)p == PAINT) p++;
    return (size_t)(top - p);
}

/* One line with write(2) (no stdio: it would want stack and memory). */
static void say(const char *context, const char *name, size_t bytes) {
    char line[160] = "STACK ";
    strcat(line, context);
    strcat(line, " ");
    wr(1, line);
    wr(1, name);
    wr_num(1, " ", bytes);
}

static __thread int in_handler;

/* Runs calls[i] (unless it is pcpalloc's and pcpalloc is not here). */
static void run_one(const char *context, int i) {
    if (calls[i].pcpalloc_only && !have_pcpalloc()) return;
    if (in_handler && !have_pcpalloc() && calls[i].fn == c_malloc_info) {
        /* glibc's own malloc_info needs 6.3 KiB of stack (its fprintf):
         * more than an 8 KiB alternate stack leaves past the signal frame
         * of a machine with AVX-512. */
        say(context, "malloc_info-skipped", 0);
        return;
    }
    say(context, calls[i].name, measure(calls[i].fn));
}

static void run_all(const char *context) {
    for (int i = 0; i < NR_CALLS; i++) run_one(context, i);
}

static int call_index(const char *name) {
    for (int i = 0; i < NR_CALLS; i++)
        if (strcmp(calls[i].name, name) == 0) return i;
    wr(2, "inv_stack_calls: no call named ");
    wr(2, name);
    wr(2, "\n");
    _exit(2);
}

/* `len` bytes of stack with an inaccessible page below them; returns the
 * lowest usable byte. Memory from mmap: nothing here allocates. */
static char *map_stack(size_t len) {
    char *m = mmap(NULL, GUARD + len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m, GUARD, PROT_NONE) != 0) {
        wr(2, "inv_stack_calls: cannot map a stack\n");
        _exit(1);
    }
    return m + GUARD;
}

/* ---- 16 KiB threads ---- */

struct thread_job {
    char *lo;
    int first; /* call to make first, or -1 for every call */
};

static void *small_thread(void *arg) {
    struct thread_job *j = arg;
    stack_lo = j->lo;
    if (j->first < 0) {
        run_all("thread16k");
    } else {
        run_one("thread16k-first", j->first);
    }
    return NULL;
}

/* Runs `job` on a fresh thread whose stack is PTHREAD_STACK_MIN bytes
 * (glibc puts the thread's descriptor and static TLS at its top, as for a
 * stack of that size it maps itself). */
static void on_small_thread(int first) {
    static char *stack;
    if (!stack) stack = map_stack(THREAD_STACK);
    struct thread_job j = {stack, first};
    pthread_attr_t a;
    pthread_attr_init(&a);
    CHECK(pthread_attr_setstack(&a, stack, THREAD_STACK) == 0);
    pthread_t t;
    CHECK(pthread_create(&t, &a, small_thread, &j) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    pthread_attr_destroy(&a);
}

/* ---- signal handlers on 8 KiB alternate stacks ---- */

static __thread char *alt_lo;
static __thread int handler_first = -1; /* -1: every call */
static const char *handler_context = "altstack8k";
static volatile size_t handler_frame;

static void handler(int sig) {
    (void)sig;
    char here;
    char *saved = stack_lo;
    stack_lo = alt_lo;
    in_handler = 1;
    handler_frame = (size_t)(alt_lo + ALT_STACK - &here);
    if (handler_first >= 0) {
        run_one(handler_context, handler_first);
    } else {
        run_all(handler_context);
    }
    in_handler = 0;
    stack_lo = saved;
}

/* Gives the calling thread an 8 KiB alternate signal stack. */
static void set_alt_stack(void) {
    alt_lo = map_stack(ALT_STACK);
    stack_t ss = {.ss_sp = alt_lo, .ss_size = ALT_STACK, .ss_flags = 0};
    CHECK(sigaltstack(&ss, NULL) == 0);
}

static void set_handler(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
}

static void *fresh_signal_thread(void *arg) {
    /* Nothing here allocates before the handler runs. */
    set_alt_stack();
    handler_first = (int)(intptr_t)arg;
    raise(SIGUSR1);
    return NULL;
}

/* ---- the heap ---- */

static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cond = PTHREAD_COND_INITIALIZER;
static int parked, release_parked;

struct builder {
    int id;
    int stay; /* keeps running (blocked) until the end */
};

/* About 2 MiB of blocks of 16 B - 64 KiB, half of them freed again. */
static void *build(void *arg) {
    struct builder *b = arg;
    uint64_t rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(b->id + 1);
    enum { N = 3000 };
    static void *blocks[4][N];
    void **mine = blocks[b->id];
    for (int i = 0; i < N; i++) {
        size_t n = rng_size(&rng, 16, 64 << 10);
        mine[i] = malloc(n);
        CHECK(mine[i]);
        memset(mine[i], i, n < 256 ? n : 256);
    }
    for (int i = 0; i < N; i += 2) free(mine[i]);
    pthread_mutex_lock(&park_lock);
    for (int i = 1; i < N && nr_foreign < 64; i += 98) foreign[nr_foreign++] = mine[i];
    if (b->stay) {
        parked++;
        pthread_cond_broadcast(&park_cond);
        while (!release_parked) pthread_cond_wait(&park_cond, &park_lock);
    }
    pthread_mutex_unlock(&park_lock);
    return NULL;
}

static pthread_t builders[4];

static void build_heap(void) {
    static struct builder b[4];
    for (int i = 0; i < 4; i++) {
        b[i] = (struct builder){i, i < 2};
        CHECK(pthread_create(&builders[i], NULL, build, &b[i]) == 0);
    }
    for (int i = 2; i < 4; i++) CHECK(pthread_join(builders[i], NULL) == 0);
    pthread_mutex_lock(&park_lock);
    while (parked < 2) pthread_cond_wait(&park_cond, &park_lock);
    pthread_mutex_unlock(&park_lock);
    /* A few huge blocks, and the main thread's own. */
    static void *huge[3];
    for (int i = 0; i < 3; i++) {
        huge[i] = malloc((size_t)(5 + 3 * i) << 20);
        CHECK(huge[i]);
        memset(huge[i], 7, (size_t)(5 + 3 * i) << 20);
    }
    static void *own[500];
    uint64_t rng = 42;
    for (int i = 0; i < 500; i++) {
        own[i] = malloc(rng_size(&rng, 16, 32 << 10));
        CHECK(own[i]);
    }
    struct mallinfo2 m = mallinfo2();
    char line[160];
    int n = snprintf(line, sizeof line, "HEAP uordblks %zu hblkhd %zu\n", m.uordblks, m.hblkhd);
    write(1, line, (size_t)n);
}

static void end_heap(void) {
    pthread_mutex_lock(&park_lock);
    release_parked = 1;
    pthread_cond_broadcast(&park_cond);
    pthread_mutex_unlock(&park_lock);
    for (int i = 0; i < 2; i++) CHECK(pthread_join(builders[i], NULL) == 0);
}

static void open_sinks(void) {
    setvbuf(stderr, stderr_buf, _IOFBF, sizeof stderr_buf);
    devnull = open("/dev/null", O_WRONLY);
    saved_stderr = dup(2);
    CHECK(devnull >= 0 && saved_stderr >= 0);
}


int main(int argc, char **argv) {
    if (argc < 2) {
        wr(2, "usage: inv_stack_calls thread|signal|first CALL|list\n");
        return 2;
    }
    const char *mode = argv[1];
    if (getenv("INV_STACK_SCALE")) scale = (size_t)atoi(getenv("INV_STACK_SCALE"));
    if (strcmp(mode, "list") == 0) {
        for (int i = 0; i < NR_CALLS; i++)
            if (!calls[i].pcpalloc_only || have_pcpalloc()) {
                wr(1, calls[i].name);
                wr(1, "\n");
            }
        return 0;
    }
    if (strcmp(mode, "first") == 0) {
        /* Nothing before the handler allocates: the process's first call
         * is the handler's, on the alternate stack. */
        CHECK(argc == 3);
        int first = call_index(argv[2]);
        if (calls[first].pcpalloc_only && !have_pcpalloc()) {
            wr(1, "inv_stack_calls ok\n");
            return 0;
        }
        open_sinks();
        set_alt_stack();
        set_handler();
        handler_context = "process-first";
        handler_first = first;
        raise(SIGUSR1);
        wr_num(1, "FRAME signal ", handler_frame);
        handler_context = "process-first-then";
        handler_first = -1;
        raise(SIGUSR1);
        wr(1, "inv_stack_calls ok\n");
        return 0;
    }
    open_sinks();
    build_heap();
    if (strcmp(mode, "thread") == 0) {
        on_small_thread(-1);
        for (int i = 0; i < NR_CALLS; i++) {
            if (calls[i].pcpalloc_only && !have_pcpalloc()) continue;
            on_small_thread(i);
        }
    } else if (strcmp(mode, "signal") == 0) {
        set_alt_stack();
        set_handler();
        handler_context = "altstack8k";
        raise(SIGUSR1);
        wr_num(1, "FRAME signal ", handler_frame);
        handler_context = "altstack8k-first";
        for (int i = 0; i < NR_CALLS; i++) {
            if (calls[i].pcpalloc_only && !have_pcpalloc()) continue;
            pthread_t t;
            CHECK(pthread_create(&t, NULL, fresh_signal_thread, (void *)(intptr_t)i) == 0);
            CHECK(pthread_join(t, NULL) == 0);
        }
    } else {
        wr(2, "inv_stack_calls: unknown mode\n");
        return 2;
    }
    end_heap();
    wr(1, "inv_stack_calls ok\n");
    return 0;
}
