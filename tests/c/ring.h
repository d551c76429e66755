/* The page band's hand-over (bench/c/page_band.c): a ring through which
 * one thread hands blocks to another, which frees them — the band's
 * cross-thread frees — and the xorshift its programs draw with. One
 * producer and one consumer a ring. */
#ifndef PCPALLOC_TEST_RING_H
#define PCPALLOC_TEST_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define RING 16

struct ring {
    _Atomic size_t head;
    char pad[56];
    _Atomic size_t tail;
    char pad2[56];
    void *slot[RING];
};

/* The consumer's side: frees with `release` every block handed over. */
static void ring_drain(struct ring *r, void (*release)(void *)) {
    size_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
    size_t h = atomic_load_explicit(&r->head, memory_order_acquire);
    while (t != h) {
        release(r->slot[t % RING]);
        t++;
    }
    atomic_store_explicit(&r->tail, t, memory_order_release);
}

/* The producer's side: hands `p` over, or frees it with `release` here
 * when the ring is full. */
static void ring_hand_over(struct ring *r, void *p, void (*release)(void *)) {
    size_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (h - atomic_load_explicit(&r->tail, memory_order_acquire) >= RING) {
        release(p);
        return;
    }
    r->slot[h % RING] = p;
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
}

/* xorshift64 (Marsaglia): the band's sizes and choices. */
static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

#endif
