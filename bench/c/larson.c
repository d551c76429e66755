/* larson: written from the published description of larson-sized
 * (daanx/mimalloc-bench bench/larson/larson.cpp built with CPP=1 SIZED=1
 * and -fsized-deallocation: mimalloc-bench's "larsonN-sized" row). It is
 * the larson server benchmark of larson_server.c — same arguments, same
 * thread generations, same sizes from the same generator — with every
 * free an explicit operator delete[](p, size) call (C++14 sized
 * deallocation, no NULL test), so an allocator that uses the size can skip
 * looking it up. (The older bench/larson_sized/larson.cpp writes
 * `delete[] p, size;`, a plain delete[] and a comma expression; the
 * published build does not use it.)
 *
 *   larson SECONDS MIN_SIZE MAX_SIZE BLOCKS_PER_THREAD ROUNDS SEED THREADS
 *   (mimalloc-bench: 5 8 1000 5000 100 4141 <cpus>)
 *
 * Prints the throughput, the relative time 1e9 / throughput on a line
 * `rtime SECONDS`, and the peak RSS (`peak_kib`). */
#define LARSON_SIZED 1
#include "larson_server.c"
