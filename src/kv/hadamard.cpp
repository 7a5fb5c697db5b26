// Fast Walsh-Hadamard transform: log2(n) butterfly stages (a, b) -> (a + b, a - b), then a
// single scale by 1/sqrt(n), which makes the transform orthonormal.
#include "kv/hadamard.h"

#include <cmath>

namespace llmkv {

bool hadamard_supported(uint32_t n) {
    return n >= 1 && (n & (n - 1)) == 0;
}

void hadamard_transform(float *x, uint32_t n) {  // x: float [n]
    for (uint32_t len = 1; len < n; len <<= 1) {
        for (uint32_t i = 0; i < n; i += 2 * len) {
            for (uint32_t j = i; j < i + len; ++j) {
                const float a = x[j], b = x[j + len];
                x[j] = a + b;
                x[j + len] = a - b;
            }
        }
    }
    const float scale = float(1.0 / std::sqrt(double(n)));
    for (uint32_t i = 0; i < n; ++i) x[i] *= scale;
}

}  // namespace llmkv
