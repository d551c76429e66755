/* The pagesets' entry under the worst scheduling (issue 45): worker threads
 * allocate and free blocks of 8 KiB-256 KiB (the pagesets' large lists)
 * and bursts of small objects (slabs made and emptied: blocks of orders
 * 0-3 through the order lists), a quarter of the large ones handed to
 * another worker that frees them there; every block's contents are
 * written when allocated and checked when freed. Meanwhile:
 *  - a migrator moves the workers between CPUs with sched_setaffinity in a
 *    loop (one CPU, then another, then all);
 *  - a signaller sends SIGUSR1 to the workers in a loop; the handler
 *    allocates, fills, checks and frees blocks when the worker is not
 *    inside malloc/free itself (malloc is not async-signal-safe), and
 *    only counts the signal when it is (a signal inside a critical
 *    section aborts it);
 *  - workers fork now and then: the child checks its copy of the
 *    worker's blocks, allocates and frees, and exits with the verdict;
 *  - workers exit mid-work after a random number of operations, their
 *    blocks handed to the next generation, which checks and frees them.
 *
 *   rseq_stress MILLISECONDS
 * Prints "rseq_stress ok" and the counts, or fails with a message. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WORKERS 4
#define LIVE 48
#define SMALL_BURST 600
#define HANDOFF 32

static atomic_long ops, checked, migrations, signals_in, signals_handled,
    forks, exits, handed;
static atomic_int stop;
static atomic_int tids[WORKERS];
static int ncpus;

static uint64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A block's words at 0, every 4 KiB and at the end hold its tag. */
struct block {
    void *p;
    size_t n;
};

static uint64_t tag_of(const void *p, size_t n) {
    return ((uintptr_t)p * 0x9E3779B97F4A7C15ull) ^ n;
}

static void fill_block(void *p, size_t n) {
    uint64_t t = tag_of(p, n);
    for (size_t o = 0; o + 16 <= n; o += 4096) memcpy((char *)p + o, &t, 8);
    memcpy((char *)p + n - 8, &t, 8);
}

static void check_block(const void *p, size_t n, const char *who) {
    uint64_t t = tag_of(p, n), v;
    for (size_t o = 0; o + 16 <= n; o += 4096) {
        memcpy(&v, (const char *)p + o, 8);
        if (v != t) {
            fprintf(stderr, "rseq_stress: %s: block %p of %zu bytes overwritten at %zu\n", who,
                    p, n, o);
            _exit(1);
        }
    }
    memcpy(&v, (const char *)p + n - 8, 8);
    if (v != t) {
        fprintf(stderr, "rseq_stress: %s: block %p of %zu bytes overwritten at its end\n", who,
                p, n);
        _exit(1);
    }
    atomic_fetch_add_explicit(&checked, 1, memory_order_relaxed);
}

/* Whether this thread is inside malloc/free (the handler then only
 * counts). */
static __thread volatile sig_atomic_t in_alloc;

static void *xmalloc(size_t n) {
    in_alloc = 1;
    void *p = malloc(n);
    in_alloc = 0;
    if (!p) {
        fprintf(stderr, "rseq_stress: malloc(%zu) failed\n", n);
        _exit(1);
    }
    return p;
}

static void xfree(void *p) {
    in_alloc = 1;
    free(p);
    in_alloc = 0;
}

static size_t large_size(uint64_t *s) {
    size_t n = (size_t)8192 << (rnd(s) % 6);
    n += rnd(s) % n;
    return n > 262144 ? 262144 : n;
}

static void on_usr1(int sig) {
    (void)sig;
    if (in_alloc) {
        atomic_fetch_add_explicit(&signals_in, 1, memory_order_relaxed);
        return;
    }
    int saved = errno;
    uint64_t s = (uintptr_t)&s | 1;
    void *a = xmalloc(large_size(&s)), *b = xmalloc(48);
    fill_block(b, 48);
    size_t an = large_size(&s);
    xfree(a);
    a = xmalloc(an);
    fill_block(a, an);
    check_block(a, an, "signal handler");
    check_block(b, 48, "signal handler");
    xfree(a);
    xfree(b);
    atomic_fetch_add_explicit(&signals_handled, 1, memory_order_relaxed);
    errno = saved;
}

/* Blocks handed from one worker to another, and those a worker left at
 * its exit (freed by the next generation). */
static pthread_mutex_t hand_lock = PTHREAD_MUTEX_INITIALIZER;
static struct block hand[WORKERS][HANDOFF];
static int hand_n[WORKERS];
static struct block orphans[WORKERS * (LIVE + HANDOFF)];
static int orphans_n;

static void take_handed(int me) {
    struct block got[HANDOFF];
    int n;
    pthread_mutex_lock(&hand_lock);
    n = hand_n[me];
    memcpy(got, hand[me], sizeof(struct block) * n);
    hand_n[me] = 0;
    pthread_mutex_unlock(&hand_lock);
    for (int i = 0; i < n; i++) {
        check_block(got[i].p, got[i].n, "handed over");
        xfree(got[i].p);
    }
}

static int hand_to(int to, struct block b) {
    int ok = 0;
    pthread_mutex_lock(&hand_lock);
    if (hand_n[to] < HANDOFF) {
        hand[to][hand_n[to]++] = b;
        ok = 1;
    }
    pthread_mutex_unlock(&hand_lock);
    if (ok) atomic_fetch_add_explicit(&handed, 1, memory_order_relaxed);
    return ok;
}

static void fork_and_check(struct block *live) {
    fflush(NULL);
    in_alloc = 1; /* fork runs the allocator's fork handlers */
    pid_t pid = fork();
    in_alloc = 0;
    if (pid < 0) return;
    if (pid == 0) {
        for (int i = 0; i < LIVE; i++) check_block(live[i].p, live[i].n, "forked child");
        uint64_t s = 12345;
        for (int k = 0; k < 200; k++) {
            size_t n = large_size(&s);
            void *p = xmalloc(n);
            fill_block(p, n);
            check_block(p, n, "forked child");
            xfree(p);
        }
        for (int i = 0; i < LIVE; i++) xfree(live[i].p);
        _exit(0);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "rseq_stress: forked child failed (status %d)\n", st);
        _exit(1);
    }
    atomic_fetch_add_explicit(&forks, 1, memory_order_relaxed);
}

static void *worker(void *arg) {
    int me = (int)(intptr_t)arg;
    atomic_store(&tids[me], (int)syscall(SYS_gettid));
    uint64_t s = (uint64_t)(uintptr_t)&s ^ ((uint64_t)me << 40) ^ now_ms();
    rnd(&s);
    struct block live[LIVE];
    for (int i = 0; i < LIVE; i++) {
        live[i].n = large_size(&s);
        live[i].p = xmalloc(live[i].n);
        fill_block(live[i].p, live[i].n);
    }
    /* Blocks left by exited workers. */
    pthread_mutex_lock(&hand_lock);
    int no = orphans_n;
    struct block mine[WORKERS * (LIVE + HANDOFF)];
    memcpy(mine, orphans, sizeof(struct block) * no);
    orphans_n = 0;
    pthread_mutex_unlock(&hand_lock);
    for (int i = 0; i < no; i++) {
        check_block(mine[i].p, mine[i].n, "left by an exited thread");
        xfree(mine[i].p);
    }
    long life = 2000 + rnd(&s) % 20000;
    void *small[SMALL_BURST];
    for (long op = 0; op < life && !atomic_load(&stop); op++) {
        int k = rnd(&s) % LIVE;
        check_block(live[k].p, live[k].n, "worker");
        struct block b = live[k];
        if (rnd(&s) % 4 == 0 && hand_to((me + 1 + rnd(&s) % (WORKERS - 1)) % WORKERS, b)) {
        } else {
            xfree(b.p);
        }
        live[k].n = large_size(&s);
        live[k].p = xmalloc(live[k].n);
        fill_block(live[k].p, live[k].n);
        if (op % 64 == 0) take_handed(me);
        if (op % 500 == 250) {
            size_t n = 16 << (rnd(&s) % 9); /* 16 B .. 4 KiB */
            for (int i = 0; i < SMALL_BURST; i++) {
                small[i] = xmalloc(n);
                fill_block(small[i], n);
            }
            for (int i = 0; i < SMALL_BURST; i++) {
                check_block(small[i], n, "small");
                xfree(small[i]);
            }
        }
        if (op % 3000 == 1500 && rnd(&s) % 3 == 0) fork_and_check(live);
        atomic_fetch_add_explicit(&ops, 1, memory_order_relaxed);
    }
    take_handed(me);
    /* Exit mid-work: the live blocks go to the next generation. No more
     * signals: the handler must not allocate inside the thread's exit. */
    atomic_store(&tids[me], 0);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    pthread_mutex_lock(&hand_lock);
    for (int i = 0; i < LIVE; i++) orphans[orphans_n++] = live[i];
    pthread_mutex_unlock(&hand_lock);
    atomic_fetch_add_explicit(&exits, 1, memory_order_relaxed);
    return NULL;
}

static void *migrator(void *arg) {
    (void)arg;
    uint64_t s = 99;
    while (!atomic_load(&stop)) {
        int tid = atomic_load(&tids[rnd(&s) % WORKERS]);
        if (tid) {
            cpu_set_t set;
            CPU_ZERO(&set);
            int mode = rnd(&s) % 3;
            if (mode == 2) {
                for (int c = 0; c < ncpus; c++) CPU_SET(c, &set);
            } else {
                CPU_SET(rnd(&s) % ncpus, &set);
            }
            if (sched_setaffinity(tid, sizeof set, &set) == 0)
                atomic_fetch_add_explicit(&migrations, 1, memory_order_relaxed);
        }
        usleep(50);
    }
    return NULL;
}

static pthread_t threads[WORKERS];

static void *signaller(void *arg) {
    (void)arg;
    uint64_t s = 7;
    while (!atomic_load(&stop)) {
        int w = rnd(&s) % WORKERS;
        int tid = atomic_load(&tids[w]);
        if (tid) syscall(SYS_tgkill, getpid(), tid, SIGUSR1);
        usleep(100);
    }
    return NULL;
}

int main(int argc, char **argv) {
    long ms = argc > 1 ? atol(argv[1]) : 2000;
    ncpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpus < 1) ncpus = 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    pthread_t m, g;
    pthread_create(&m, NULL, migrator, NULL);
    pthread_create(&g, NULL, signaller, NULL);
    uint64_t end = now_ms() + ms;
    long generations = 0;
    for (int w = 0; w < WORKERS; w++) {
        pthread_create(&threads[w], NULL, worker, (void *)(intptr_t)w);
    }
    while (now_ms() < end) {
        for (int w = 0; w < WORKERS; w++) {
            if (pthread_tryjoin_np(threads[w], NULL) == 0) {
                generations++;
                pthread_create(&threads[w], NULL, worker, (void *)(intptr_t)w);
            }
        }
        usleep(1000);
    }
    atomic_store(&stop, 1);
    for (int w = 0; w < WORKERS; w++) pthread_join(threads[w], NULL);
    pthread_join(m, NULL);
    pthread_join(g, NULL);
    for (int w = 0; w < WORKERS; w++) {
        for (int i = 0; i < hand_n[w]; i++) {
            check_block(hand[w][i].p, hand[w][i].n, "handed at the end");
            free(hand[w][i].p);
        }
    }
    for (int i = 0; i < orphans_n; i++) {
        check_block(orphans[i].p, orphans[i].n, "left at the end");
        free(orphans[i].p);
    }
    printf("rseq_stress ok ops %ld checked %ld migrations %ld signals_handled %ld "
           "signals_in_malloc %ld forks %ld thread_exits %ld handed %ld\n",
           atomic_load(&ops), atomic_load(&checked), atomic_load(&migrations),
           atomic_load(&signals_handled), atomic_load(&signals_in), atomic_load(&forks),
           atomic_load(&exits), atomic_load(&handed));
    return 0;
}
