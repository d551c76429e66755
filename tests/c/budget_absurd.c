/* Guard for the python row of issue 16: malloc(argv[1] GiB) without
 * touching it. Prints "granted" or "refused", and whether the kernel would
 * refuse the same mapping (overcommit_memory 0 or 2 and more than MemTotal +
 * SwapTotal) as "kernel refuses" / "kernel may grant". */
#include "issue_common.h"

int main(int argc, char **argv) {
    size_t n = (size_t)atol(argc > 1 ? argv[1] : "100") * GiB;
    void *p = malloc(n);
    keep(p);
    int kernel_refuses = overcommit_mode() != 1 && n > mem_total() + swap_total();
    printf("%s, kernel %s\n", p ? "granted" : "refused",
           kernel_refuses ? "refuses" : "may grant");
    free(p);
    return 0;
}
