// Issue 42, case C: a C++ library that inv_cxx_replace links, whose static
// constructor uses the standard containers — under LD_PRELOAD it runs
// before libpcpalloc.so's constructor, so the sized and array forms it
// calls must find the program's replacement on their own.
#include <map>
#include <string>
#include <vector>

static long blocks;

namespace {
struct Early {
    Early() {
        std::vector<int> v;
        for (int i = 0; i < 1000; i++) v.push_back(i);
        std::string s(100, 'x');
        s += s;
        std::map<int, std::string> m;
        for (int i = 0; i < 50; i++) m[i] = s;
        int *a = new int[20];
        a[19] = 1;
        delete[] a;
        blocks = static_cast<long>(v.size() + s.size() + m.size());
    }
};
Early early;
} // namespace

long inv_cxx_early_lib_work() { return blocks; }
