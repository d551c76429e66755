/* Issue 43, item 1: bench/c/pointer_chase.c as a test program — a heap of
 * 64-byte nodes chased in a random cycle, with the array of pointers to
 * them a huge block written densely. See that file for its output. */
#include "../../bench/c/pointer_chase.c"
