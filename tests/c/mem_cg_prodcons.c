/* Issue 43, item 6: producer/consumer traffic at steady state. One thread
 * allocates blocks of about log-uniform sizes from 8 B to MAX (argv[2] MiB,
 * default 64), writes one byte in every page (every byte with argv[3]
 * "all"), and queues them (at most QCAP in flight); another takes them,
 * checks the first and last byte and frees them. Runs for SECONDS
 * (argv[1], default 3). Prints the blocks and bytes per second, the minor
 * page faults per MiB allocated (memory given back and used again faults
 * in again, whoever gave it back) and, under pcpalloc, the bytes the zone
 * gave back to the OS with madvise (pcpalloc_stat's released_bytes) per
 * byte allocated. */
#include "issue_common.h"

#include <sys/resource.h>

#define QCAP 16
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *items[QCAP];
    size_t sizes[QCAP];
    int head, tail, done;
} q = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

static double seconds;
static size_t max_size;
static int fill_all;
static long blocks;
static size_t bytes;

static void push(char *p, size_t n) {
    pthread_mutex_lock(&q.mu);
    while ((q.tail + 1) % QCAP == q.head) pthread_cond_wait(&q.cv, &q.mu);
    q.items[q.tail] = p;
    q.sizes[q.tail] = n;
    q.tail = (q.tail + 1) % QCAP;
    pthread_cond_broadcast(&q.cv);
    pthread_mutex_unlock(&q.mu);
}

static int pop(char **p, size_t *n) {
    pthread_mutex_lock(&q.mu);
    while (q.head == q.tail && !q.done) pthread_cond_wait(&q.cv, &q.mu);
    if (q.head == q.tail) {
        pthread_mutex_unlock(&q.mu);
        return 0;
    }
    *p = q.items[q.head];
    *n = q.sizes[q.head];
    q.head = (q.head + 1) % QCAP;
    pthread_cond_broadcast(&q.cv);
    pthread_mutex_unlock(&q.mu);
    return 1;
}

static void *producer(void *arg) {
    (void)arg;
    uint64_t seed = 0x853C49E6748FEA9BULL;
    double end = now_s() + seconds;
    while ((blocks & 15) || now_s() < end) {
        size_t n = rng_size(&seed, 8, max_size);
        char *p = malloc(n);
        CHECK(p);
        if (fill_all)
            memset(p, (int)n, n);
        else
            for (size_t o = 0; o < n; o += 4096) p[o] = (char)o;
        p[0] = (char)n;
        p[n - 1] = (char)(n >> 3);
        push(p, n);
        blocks++;
        bytes += n;
    }
    pthread_mutex_lock(&q.mu);
    q.done = 1;
    pthread_cond_broadcast(&q.cv);
    pthread_mutex_unlock(&q.mu);
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    char *p;
    size_t n;
    while (pop(&p, &n)) {
        CHECK(p[0] == (char)n && p[n - 1] == (char)(n >> 3));
        free(p);
    }
    return NULL;
}

static uint64_t stat_or_zero(const char *name) {
    uint64_t v = 0;
    stat_fn f = pcp_stat_fn();
    if (f) f(name, &v);
    return v;
}

int main(int argc, char **argv) {
    seconds = argc > 1 ? atof(argv[1]) : 3;
    max_size = (size_t)(argc > 2 ? atol(argv[2]) : 64) * MiB;
    fill_all = argc > 3 && strcmp(argv[3], "all") == 0;
    start_up();
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    uint64_t rel0 = stat_or_zero("released_bytes");
    double t0 = now_s();
    pthread_t pt, ct;
    CHECK(pthread_create(&ct, NULL, consumer, NULL) == 0);
    CHECK(pthread_create(&pt, NULL, producer, NULL) == 0);
    pthread_join(pt, NULL);
    pthread_join(ct, NULL);
    double t = now_s() - t0;
    getrusage(RUSAGE_SELF, &r1);
    double mib = (double)bytes / MiB;
    long faults = r1.ru_minflt - r0.ru_minflt;
    printf("%ld blocks, %.0f MiB in %.2f s: %.0f blocks/s, %.0f MiB/s; %.1f faults per MiB; "
           "peak RSS %.1f MiB\n",
           blocks, mib, t, blocks / t, mib / t, faults / mib, (double)vm_hwm() / MiB);
    if (pcp_stat_fn()) {
        uint64_t rel = stat_or_zero("released_bytes") - rel0;
        printf("pcpalloc: released %.0f MiB: %.4f bytes released per byte allocated\n",
               (double)rel / MiB, (double)rel / (double)bytes);
    }
    printf("mem_cg_prodcons ok\n");
    return 0;
}
