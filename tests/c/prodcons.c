/* Producer/consumer pairs: blocks allocated and filled by one thread are
 * checked and freed by another (cross-thread frees), over all size ranges. */
#include "common.h"

#define QCAP 1024
struct queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void *items[QCAP];
    size_t sizes[QCAP];
    int head, tail, done;
};

static void push(struct queue *q, void *p, size_t n) {
    pthread_mutex_lock(&q->mu);
    while ((q->tail + 1) % QCAP == q->head) pthread_cond_wait(&q->cv, &q->mu);
    q->items[q->tail] = p;
    q->sizes[q->tail] = n;
    q->tail = (q->tail + 1) % QCAP;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

static int pop(struct queue *q, void **p, size_t *n) {
    pthread_mutex_lock(&q->mu);
    while (q->head == q->tail && !q->done) pthread_cond_wait(&q->cv, &q->mu);
    if (q->head == q->tail) {
        pthread_mutex_unlock(&q->mu);
        return 0;
    }
    *p = q->items[q->head];
    *n = q->sizes[q->head];
    q->head = (q->head + 1) % QCAP;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return 1;
}

static void *producer(void *arg) {
    struct queue *q = arg;
    unsigned x = 12345;
    for (int i = 0; i < 60000; i++) {
        x = x * 1103515245 + 12345;
        size_t n = (x >> 8) % 100 < 80 ? (x >> 12) % 512 + 1
                 : (x >> 8) % 100 < 98 ? (x >> 12) % 40000 + 1
                                       : (x >> 12) % (6u << 20) + 1;
        unsigned char *p = malloc(n);
        CHECK(p);
        p[0] = (unsigned char)n;
        if (n > 1) p[n - 1] = (unsigned char)(n >> 3);
        push(q, p, n);
    }
    pthread_mutex_lock(&q->mu);
    q->done = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void *consumer(void *arg) {
    struct queue *q = arg;
    void *p;
    size_t n;
    long count = 0;
    while (pop(q, &p, &n)) {
        unsigned char *c = p;
        CHECK(c[0] == (unsigned char)n && (n == 1 || c[n - 1] == (unsigned char)(n >> 3)));
        free(p);
        count++;
    }
    return (void *)count;
}

int main(void) {
    require_pcpalloc();
    enum { PAIRS = 4 };
    struct queue q[PAIRS];
    pthread_t pt[PAIRS], ct[PAIRS];
    for (int i = 0; i < PAIRS; i++) {
        memset(&q[i], 0, sizeof q[i]);
        pthread_mutex_init(&q[i].mu, NULL);
        pthread_cond_init(&q[i].cv, NULL);
        pthread_create(&pt[i], NULL, producer, &q[i]);
        pthread_create(&ct[i], NULL, consumer, &q[i]);
    }
    long total = 0;
    for (int i = 0; i < PAIRS; i++) {
        void *r;
        pthread_join(pt[i], NULL);
        pthread_join(ct[i], &r);
        total += (long)r;
    }
    CHECK(total == PAIRS * 60000L);
    puts("prodcons ok");
    return 0;
}
