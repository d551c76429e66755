/* A C program that uses pcpalloc without being rebuilt: run it with
 * libpcpalloc.so preloaded, and read pcpalloc's figures through glibc's
 * mallinfo2() and through pcpalloc_stat() (found with dlsym, so the same
 * binary also runs on the system malloc).
 *
 *   cargo build --release -p pcpalloc-preload
 *   cc -O2 -o preload examples/preload.c
 *   LD_PRELOAD=target/release/libpcpalloc.so ./preload
 *   PCPALLOC_STATS=1 LD_PRELOAD=target/release/libpcpalloc.so ./preload   # the report at exit
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    enum { N = 100000 };
    static char *lines[N];
    for (int i = 0; i < N; i++) {
        lines[i] = malloc(32 + i % 200);
        snprintf(lines[i], 32, "line %d", i);
    }

    int (*stat)(const char *, uint64_t *) =
        (int (*)(const char *, uint64_t *))dlsym(RTLD_DEFAULT, "pcpalloc_stat");
    struct mallinfo2 mi = mallinfo2();
    printf("malloc is %s\n", stat ? "pcpalloc" : "the system's");
    printf("mallinfo2: %zu KiB in use, %zu KiB in the heap\n", mi.uordblks >> 10, mi.arena >> 10);
    if (stat) {
        uint64_t resident = 0, free_high = 0;
        stat("resident_bytes", &resident);
        stat("free_high", &free_high);
        printf("pcpalloc_stat: resident_bytes %llu KiB, free_high %llu\n",
               (unsigned long long)resident >> 10, (unsigned long long)free_high);
    }

    for (int i = 0; i < N; i++) free(lines[i]);
    printf("done\n");
    return 0;
}
