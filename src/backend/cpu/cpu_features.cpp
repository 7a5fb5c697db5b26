// CPU feature detection with CPUID (plus XGETBV: the OS must save the YMM registers for AVX
// code to be usable) and the LLMKV_CPU_FEATURES override.
#include "backend/cpu/cpu_features.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace llmkv::cpu {

namespace {

bool env_forces_portable() {
    const char *v = std::getenv("LLMKV_CPU_FEATURES");
    if (!v) return false;
    return std::strcmp(v, "portable") == 0 || std::strcmp(v, "scalar") == 0 ||
           std::strcmp(v, "none") == 0;
}

CpuFeatures detect() {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        const bool osxsave = (c >> 27) & 1u, avx = (c >> 28) & 1u;
        bool ymm_saved = false;  // XCR0 bits 1 (SSE state) and 2 (AVX state)
        if (osxsave) {
            uint32_t lo, hi;
            asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0u));
            ymm_saved = (lo & 6u) == 6u;
        }
        const bool usable = avx && ymm_saved;
        f.fma = usable && ((c >> 12) & 1u);
        f.f16c = usable && ((c >> 29) & 1u);
        if (usable && __get_cpuid_max(0, nullptr) >= 7) {
            __cpuid_count(7, 0, a, b, c, d);
            f.avx2 = (b >> 5) & 1u;
        }
    }
#endif
    f.forced_portable = env_forces_portable();
    return f;
}

}  // namespace

const CpuFeatures &cpu_features() {
    static const CpuFeatures features = detect();
    return features;
}

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
    const CpuFeatures &f = cpu_features();
    return f.avx2 && f.fma && f.f16c && !f.forced_portable;
#else
    return false;
#endif
}

}  // namespace llmkv::cpu
