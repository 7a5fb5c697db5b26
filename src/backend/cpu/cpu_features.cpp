// CPU feature detection (GCC/Clang __builtin_cpu_supports, which also checks that the OS
// saves the YMM registers) plus the LLMKV_CPU_FEATURES override.
#include "backend/cpu/cpu_features.h"

#include <cstdlib>
#include <cstring>

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
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.f16c = __builtin_cpu_supports("f16c");
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
