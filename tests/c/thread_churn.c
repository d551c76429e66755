/* 1000 short-lived threads, each allocating, leaving one block for the
 * next thread to free (so frees hit slabs of heaps whose thread is gone),
 * and exiting. */
#include "common.h"

static void *slot;
static long slot_id = -1;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg) {
    long id = (long)arg;
    void *mine[64];
    for (int i = 0; i < 64; i++) {
        mine[i] = malloc(16 + (id * 37 + i * 101) % 3000);
        CHECK(mine[i]);
        memset(mine[i], (int)id, 16);
    }
    for (int i = 0; i < 63; i++) free(mine[i]);
    pthread_mutex_lock(&mu);
    void *prev = slot;
    long prev_id = slot_id;
    slot = mine[63];
    slot_id = id;
    pthread_mutex_unlock(&mu);
    if (prev) {
        /* Left by another (maybe already finished) thread: intact. */
        CHECK(((unsigned char *)prev)[0] == (unsigned char)prev_id);
        CHECK(((unsigned char *)prev)[15] == (unsigned char)prev_id);
        free(prev);
    }
    return NULL;
}

int main(void) {
    require_pcpalloc();
    for (long i = 0; i < 1000; i++) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, worker, (void *)i) == 0);
        CHECK(pthread_join(t, NULL) == 0);
    }
    /* And many at once, detached-style churn. */
    pthread_t ts[50];
    for (int r = 0; r < 10; r++) {
        for (long i = 0; i < 50; i++) pthread_create(&ts[i], NULL, worker, (void *)(1000 + r * 50 + i));
        for (int i = 0; i < 50; i++) pthread_join(ts[i], NULL);
    }
    free(slot);
    puts("thread_churn ok");
    return 0;
}
