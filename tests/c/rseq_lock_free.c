/* The pagesets' pop and push on one thread, between marks a debugger
 * stops at (tests/rseq.rs counts the lock-prefixed instructions executed
 * between them): first rounds of 256 blocks of 16 KiB allocated then
 * freed (the thread's large bins spill to the CPU pageset's 16 KiB list
 * and refill from it), then rounds of 2 KiB objects in slabs made and
 * emptied (blocks of order 3 through the order lists).
 *
 *   rseq_lock_free ROUNDS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) void rseq_mark_start(void) { __asm__ volatile(""); }
__attribute__((noinline)) void rseq_mark_end(void) { __asm__ volatile(""); }

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    static void *p[4096];
    for (int r = 0; r < 2 * rounds; r++) {
        if (r == rounds) rseq_mark_start();
        for (int i = 0; i < 256; i++) p[i] = malloc(16384), memset(p[i], r, 64);
        for (int i = 0; i < 256; i++) free(p[i]);
    }
    rseq_mark_end();
    for (int r = 0; r < 2 * rounds; r++) {
        if (r == rounds) rseq_mark_start();
        for (int i = 0; i < 4096; i++) p[i] = malloc(2048), memset(p[i], r, 64);
        for (int i = 0; i < 4096; i++) free(p[i]);
    }
    rseq_mark_end();
    printf("rseq_lock_free ok\n");
    return 0;
}
