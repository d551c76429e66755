/* Issue 46's program: three allocation sites with known live bytes, run
 * under PCPALLOC_PROFILE. hold_small keeps 64 MiB in 1 KiB blocks,
 * hold_large 16 MiB in 1 MiB blocks, and churn allocates 1 KiB and 64 KiB
 * blocks between them and frees each at once — its 1 KiB blocks are the
 * ones hold_small gets back next (the thread's bin recycles them), so a
 * sampler that counted only what bins are refilled with would miss
 * hold_small's. Then the profile is written on demand (argv[1], through
 * pcpalloc_profile_dump when the allocator has it) and the program exits
 * with every held block still live (the profile at exit, the leak
 * report, holds them too). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SMALL 1024
#define NSMALL (64 << 10) /* 64 MiB */
#define LARGE (1 << 20)
#define NLARGE 16 /* 16 MiB */

static void *keep(void *p) {
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(p, 1, 64);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) void *hold_small(void) { return keep(malloc(SMALL)); }
__attribute__((noinline)) void *hold_large(void) { return keep(malloc(LARGE)); }
__attribute__((noinline)) void churn(size_t n) {
    void *p = keep(malloc(n));
    free(p);
    __asm__ volatile("" : : : "memory");
}

int main(int argc, char **argv) {
    static void *small[NSMALL], *large[NLARGE];
    for (int i = 0; i < NSMALL; i++) {
        small[i] = hold_small();
        churn(SMALL);
        churn(SMALL);
        if (i % 64 == 0)
            churn(64 << 10);
        if (i % (NSMALL / NLARGE) == 0)
            large[i / (NSMALL / NLARGE)] = hold_large();
    }
    if (argc > 1) {
        int (*dump)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "pcpalloc_profile_dump");
        int e = dump ? dump(argv[1]) : -1;
        printf("dump %d\n", e);
    }
    printf("prof_sites ok %p %p\n", small[NSMALL - 1], large[NLARGE - 1]);
    return 0;
}
