// Run-time CPU feature detection for the CPU backend's kernel dispatch. The environment
// variable LLMKV_CPU_FEATURES caps the kernel families used: "portable" (also "scalar",
// "none") forces the portable (scalar) kernels everywhere, "avx2" keeps AVX2 but not AVX-512.
// That is how the fallback paths are exercised on machines that have the newer instructions.
#pragma once

namespace llmkv::cpu {

struct CpuFeatures {
    bool avx2 = false;             // the CPU and OS support AVX2 (YMM state enabled)
    bool fma = false;              // FMA3
    bool f16c = false;             // fp16 <-> fp32 conversions
    bool avx512 = false;           // AVX-512 F + BW + VL, and the OS saves the ZMM/opmask state
    bool avx512_vnni = false;      // AVX512_VNNI (vpdpbusd on ZMM); implies avx512
    bool avx_vnni = false;         // AVX-VNNI (VEX vpdpbusd); detected for information only
    bool forced_portable = false;  // LLMKV_CPU_FEATURES=portable was set
    bool forced_avx2 = false;      // LLMKV_CPU_FEATURES=avx2 was set
};

// Detected once (thread-safe), then cached for the life of the process.
const CpuFeatures &cpu_features();

// True when the *_avx2.cpp kernels may run: AVX2 + FMA + F16C present and not forced off.
bool cpu_has_avx2();

// True when the *_avx512.cpp kernels may run: cpu_has_avx2(), AVX-512 F/BW/VL with OS support
// for the ZMM state, AVX512_VNNI, and not capped by LLMKV_CPU_FEATURES=avx2 or =portable.
bool cpu_has_avx512_vnni();

}  // namespace llmkv::cpu
