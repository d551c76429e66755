// Issue 17, row 5 (C++): sized operator delete of an interior pointer,
// ::operator delete(p + 16, 16) for p = ::operator new(64), must abort
// (SIGABRT) with one line on stderr naming the address (glibc's libstdc++
// calls free, which aborts too). The address is printed on stdout first.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sys/resource.h>

int main() {
    struct rlimit r = {0, 0};
    setrlimit(RLIMIT_CORE, &r);
    char *ok = static_cast<char *>(::operator new(64));
    std::memset(ok, 1, 64);
    ::operator delete(ok, 64);
    char *p = static_cast<char *>(::operator new(64));
    std::memset(p, 0, 64);
    char *bad = p + 16;
    // Hide where bad comes from (no -Wfree-nonheap-object, no folding).
    __asm__ volatile("" : "+r"(bad) : : "memory");
    std::printf("bad %p\n", static_cast<void *>(bad));
    std::fflush(stdout);
    ::operator delete(bad, 16);
    char *a = static_cast<char *>(::operator new(16));
    char *b = static_cast<char *>(::operator new(16));
    std::printf("survived: sized delete returned; then new gave %p and %p\n",
                static_cast<void *>(a), static_cast<void *>(b));
    return 0;
}
