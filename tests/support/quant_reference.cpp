// Scalar reference quantizers/dequantizers for tests (see quant_reference.h for the rules).
// Block layouts follow the structs in model/tensor_type.h; the host is little-endian.
#include "quant_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/half.h"

namespace llmkv {

namespace {

void check_blocks(TensorType t, int64_t n) {
    if (n < 0 || n % tensor_type_block_elements(t) != 0) {
        throw std::invalid_argument(std::string("element count ") + std::to_string(n) +
                                    " is not a multiple of the " + tensor_type_name(t) +
                                    " block size");
    }
}

}  // namespace

size_t tensor_bytes_reference(TensorType t, int64_t n) {
    check_blocks(t, n);
    return size_t(n / tensor_type_block_elements(t)) * tensor_type_block_bytes(t);
}

std::vector<uint8_t> quantize_reference(TensorType t, const float *x, int64_t n) {
    std::vector<uint8_t> out(tensor_bytes_reference(t, n));
    uint8_t *dst = out.data();
    switch (t) {
        case TensorType::F32:
            std::memcpy(dst, x, size_t(n) * sizeof(float));
            break;
        case TensorType::F16:
        case TensorType::BF16:
            for (int64_t k = 0; k < n; ++k) {
                uint16_t h = t == TensorType::F16 ? fp32_to_fp16(x[k]) : fp32_to_bf16(x[k]);
                std::memcpy(dst + 2 * k, &h, 2);
            }
            break;
        case TensorType::Q8_0:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                const float *xb = x + b * kQuantBlock;
                float amax = 0;
                for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
                float d = amax / 127.0f;
                float id = d != 0 ? 1.0f / d : 0.0f;
                BlockQ8_0 blk{};
                blk.d = fp32_to_fp16(d);
                for (int j = 0; j < kQuantBlock; ++j) {
                    float q = std::round(xb[j] * id);
                    blk.qs[j] = int8_t(std::clamp(q, -127.0f, 127.0f));
                }
                std::memcpy(dst + b * sizeof(blk), &blk, sizeof(blk));
            }
            break;
        case TensorType::Q4_0:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                const float *xb = x + b * kQuantBlock;
                float maxv = 0;  // the element of largest magnitude, with its sign
                for (int j = 0; j < kQuantBlock; ++j) {
                    if (std::fabs(xb[j]) > std::fabs(maxv)) maxv = xb[j];
                }
                float d = maxv / -8.0f;
                float id = d != 0 ? 1.0f / d : 0.0f;
                BlockQ4_0 blk{};
                blk.d = fp32_to_fp16(d);
                for (int j = 0; j < kQuantBlock / 2; ++j) {
                    int lo = int(std::clamp(std::round(xb[j] * id) + 8.0f, 0.0f, 15.0f));
                    int hi = int(std::clamp(std::round(xb[j + 16] * id) + 8.0f, 0.0f, 15.0f));
                    blk.qs[j] = uint8_t(lo | (hi << 4));
                }
                std::memcpy(dst + b * sizeof(blk), &blk, sizeof(blk));
            }
            break;
        case TensorType::Q4_1:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                const float *xb = x + b * kQuantBlock;
                float lo_v = xb[0], hi_v = xb[0];
                for (int j = 1; j < kQuantBlock; ++j) {
                    lo_v = std::min(lo_v, xb[j]);
                    hi_v = std::max(hi_v, xb[j]);
                }
                float d = (hi_v - lo_v) / 15.0f;
                float id = d != 0 ? 1.0f / d : 0.0f;
                BlockQ4_1 blk{};
                blk.d = fp32_to_fp16(d);
                blk.m = fp32_to_fp16(lo_v);
                for (int j = 0; j < kQuantBlock / 2; ++j) {
                    int lo = int(std::clamp(std::round((xb[j] - lo_v) * id), 0.0f, 15.0f));
                    int hi = int(std::clamp(std::round((xb[j + 16] - lo_v) * id), 0.0f, 15.0f));
                    blk.qs[j] = uint8_t(lo | (hi << 4));
                }
                std::memcpy(dst + b * sizeof(blk), &blk, sizeof(blk));
            }
            break;
        default:
            throw std::invalid_argument(std::string("no reference quantizer for ") +
                                        tensor_type_name(t));
    }
    return out;
}

std::vector<float> dequantize_reference(TensorType t, const uint8_t *data, int64_t n) {
    check_blocks(t, n);
    std::vector<float> out(static_cast<size_t>(n));
    switch (t) {
        case TensorType::F32:
            std::memcpy(out.data(), data, size_t(n) * sizeof(float));
            break;
        case TensorType::F16:
        case TensorType::BF16:
            for (int64_t k = 0; k < n; ++k) {
                uint16_t h;
                std::memcpy(&h, data + 2 * k, 2);
                out[k] = t == TensorType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
            }
            break;
        case TensorType::Q8_0:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                BlockQ8_0 blk;
                std::memcpy(&blk, data + b * sizeof(blk), sizeof(blk));
                float d = fp16_to_fp32(blk.d);
                for (int j = 0; j < kQuantBlock; ++j) out[b * kQuantBlock + j] = blk.qs[j] * d;
            }
            break;
        case TensorType::Q4_0:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                BlockQ4_0 blk;
                std::memcpy(&blk, data + b * sizeof(blk), sizeof(blk));
                float d = fp16_to_fp32(blk.d);
                for (int j = 0; j < kQuantBlock / 2; ++j) {
                    out[b * kQuantBlock + j] = float((blk.qs[j] & 0x0f) - 8) * d;
                    out[b * kQuantBlock + j + 16] = float((blk.qs[j] >> 4) - 8) * d;
                }
            }
            break;
        case TensorType::Q4_1:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                BlockQ4_1 blk;
                std::memcpy(&blk, data + b * sizeof(blk), sizeof(blk));
                float d = fp16_to_fp32(blk.d);
                float m = fp16_to_fp32(blk.m);
                for (int j = 0; j < kQuantBlock / 2; ++j) {
                    out[b * kQuantBlock + j] = float(blk.qs[j] & 0x0f) * d + m;
                    out[b * kQuantBlock + j + 16] = float(blk.qs[j] >> 4) * d + m;
                }
            }
            break;
        default:
            throw std::invalid_argument(std::string("no reference dequantizer for ") +
                                        tensor_type_name(t));
    }
    return out;
}

}  // namespace llmkv
