// Small helpers shared by the ISA-specific kernel files (*_avx2.cpp, *_avx512.cpp). They
// live in an unnamed namespace on purpose: each kernel file is compiled with its own target
// flags, so each must get its own copy (one shared inline definition could be the AVX-512
// one, picked by the linker for AVX2 callers on a machine without AVX-512).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace llmkv::cpu::detail {
namespace {

// Prefetches the kBytes bytes at p (one step of a linear sweep), one cache line at a time.
template <size_t kBytes>
inline void prefetch_step(const uint8_t *p) {
#pragma GCC unroll 16
    for (size_t o = 0; o < kBytes; o += 64) {
        _mm_prefetch(reinterpret_cast<const char *>(p + o), _MM_HINT_T0);
    }
}

template <int N, typename F, int... K>
inline void static_for_impl(F &&f, std::integer_sequence<int, K...>) {
    (f(std::integral_constant<int, K>{}), ...);
}
// Calls f(std::integral_constant<int, K>{}) for K = 0 .. N-1 in order: inside f the index is a
// compile-time constant (decltype(k)::value), so shift counts and offsets become immediates.
template <int N, typename F>
inline void static_for(F &&f) {
    static_for_impl<N>(f, std::make_integer_sequence<int, N>{});
}

inline uint16_t load_u16(const uint8_t *p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

}  // namespace
}  // namespace llmkv::cpu::detail
