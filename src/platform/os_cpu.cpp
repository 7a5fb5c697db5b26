// The platform layer's CPU queries (os.h): CPUID and XGETBV, the same on every OS; what
// differs is the compiler's spelling (GCC/Clang builtins, MSVC intrinsics).
#include "platform/os.h"

#if defined(_MSC_VER)
#include <intrin.h>
#elif defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace llmkv::os {

bool cpuid(uint32_t leaf, uint32_t subleaf, uint32_t regs[4]) noexcept {
#if defined(_MSC_VER)
    int r[4];
    __cpuid(r, int(leaf & 0x80000000u));
    if (uint32_t(r[0]) < leaf) return false;
    __cpuidex(r, int(leaf), int(subleaf));
    for (int i = 0; i < 4; ++i) regs[i] = uint32_t(r[i]);
    return true;
#elif defined(__x86_64__) || defined(__i386__)
    if (__get_cpuid_max(leaf & 0x80000000u, nullptr) < leaf) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    __cpuid_count(leaf, subleaf, a, b, c, d);
    regs[0] = a;
    regs[1] = b;
    regs[2] = c;
    regs[3] = d;
    return true;
#else
    (void)leaf;
    (void)subleaf;
    (void)regs;
    return false;
#endif
}

uint64_t xgetbv0() noexcept {
#if defined(_MSC_VER)
    return uint64_t(_xgetbv(0));
#elif defined(__x86_64__) || defined(__i386__)
    uint32_t lo = 0, hi = 0;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0u));
    return (uint64_t(hi) << 32) | lo;
#else
    return 0;
#endif
}

}  // namespace llmkv::os
