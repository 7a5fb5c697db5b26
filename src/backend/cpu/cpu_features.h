// Run-time CPU feature detection for the CPU backend's kernel dispatch. The environment
// variable LLMKV_CPU_FEATURES=portable forces the portable (scalar) kernels everywhere, which
// is how the fallback path is exercised on machines that have AVX2.
#pragma once

namespace llmkv::cpu {

struct CpuFeatures {
    bool avx2 = false;             // the CPU and OS support AVX2 (YMM state enabled)
    bool fma = false;              // FMA3
    bool f16c = false;             // fp16 <-> fp32 conversions
    bool forced_portable = false;  // LLMKV_CPU_FEATURES=portable was set
};

// Detected once (thread-safe), then cached for the life of the process.
const CpuFeatures &cpu_features();

// True when the *_avx2.cpp kernels may run: AVX2 + FMA + F16C present and not forced off.
bool cpu_has_avx2();

}  // namespace llmkv::cpu
