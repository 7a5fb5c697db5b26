// CPU feature detection with CPUID (plus XGETBV: the OS must save the YMM registers for AVX
// code, and the opmask and full ZMM registers for AVX-512 code, to be usable) and the
// LLMKV_CPU_FEATURES override.
#include "backend/cpu/cpu_features.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "platform/os.h"

namespace llmkv::cpu {

namespace {

bool env_is(const char *const *names) {
    const char *v = std::getenv("LLMKV_CPU_FEATURES");
    if (!v) return false;
    for (; *names; ++names) {
        if (std::strcmp(v, *names) == 0) return true;
    }
    return false;
}

CpuFeatures detect() {
    CpuFeatures f;
    uint32_t r[4] = {0, 0, 0, 0};
    if (os::cpuid(1, 0, r)) {
        const uint32_t c = r[2];
        const bool osxsave = (c >> 27) & 1u, avx = (c >> 28) & 1u;
        const uint64_t xcr0 = osxsave ? os::xgetbv0() : 0;
        // XCR0 bits 1 (SSE state) and 2 (AVX state); for AVX-512 also 5 (opmask), 6 (upper
        // halves of ZMM0-15) and 7 (ZMM16-31).
        const bool ymm_saved = (xcr0 & 0x06u) == 0x06u;
        const bool zmm_saved = (xcr0 & 0xe6u) == 0xe6u;
        const bool usable = avx && ymm_saved;
        f.fma = usable && ((c >> 12) & 1u);
        f.f16c = usable && ((c >> 29) & 1u);
        if (usable && os::cpuid(7, 0, r)) {
            const uint32_t b = r[1];
            f.avx2 = (b >> 5) & 1u;
            const bool avx512f = (b >> 16) & 1u, avx512bw = (b >> 30) & 1u,
                       avx512vl = (b >> 31) & 1u;
            f.avx512 = zmm_saved && avx512f && avx512bw && avx512vl;
            f.avx512_vnni = f.avx512 && ((r[2] >> 11) & 1u);
            const uint32_t max_sub = r[0];
            if (max_sub >= 1 && os::cpuid(7, 1, r)) f.avx_vnni = (r[0] >> 4) & 1u;
        }
    }
    static const char *const kPortable[] = {"portable", "scalar", "none", nullptr};
    static const char *const kAvx2[] = {"avx2", nullptr};
    f.forced_portable = env_is(kPortable);
    f.forced_avx2 = env_is(kAvx2);
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

bool cpu_has_avx512_vnni() {
#if defined(__x86_64__) || defined(__i386__)
    const CpuFeatures &f = cpu_features();
    return cpu_has_avx2() && f.avx512_vnni && !f.forced_avx2;
#else
    return false;
#endif
}

}  // namespace llmkv::cpu
