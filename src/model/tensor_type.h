// Tensor element types as numbered in GGUF files (GGML type ids), their block geometry, and
// the packed block layouts of the quantized types. Shared by the GGUF reader and the kernels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace llmkv {

// The types llmkv can load and compute with. Values are the GGML type ids stored in GGUF.
enum class TensorType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q8_0 = 8,
    BF16 = 30,
};

// One past the largest GGML type id this code knows a name for.
inline constexpr uint32_t kGgmlTypeIdLimit = 40;

// Name of any GGML type id ("Q6_K", "IQ2_XXS", ...), or nullptr for ids that were never
// assigned, were retired, or are beyond kGgmlTypeIdLimit. Used for "unsupported" messages.
constexpr const char *ggml_type_name(uint32_t id) {
    switch (id) {
        case 0:
            return "F32";
        case 1:
            return "F16";
        case 2:
            return "Q4_0";
        case 3:
            return "Q4_1";
        // 4 and 5 (Q4_2, Q4_3) were removed from GGML before GGUF existed.
        case 6:
            return "Q5_0";
        case 7:
            return "Q5_1";
        case 8:
            return "Q8_0";
        case 9:
            return "Q8_1";
        case 10:
            return "Q2_K";
        case 11:
            return "Q3_K";
        case 12:
            return "Q4_K";
        case 13:
            return "Q5_K";
        case 14:
            return "Q6_K";
        case 15:
            return "Q8_K";
        case 16:
            return "IQ2_XXS";
        case 17:
            return "IQ2_XS";
        case 18:
            return "IQ3_XXS";
        case 19:
            return "IQ1_S";
        case 20:
            return "IQ4_NL";
        case 21:
            return "IQ3_S";
        case 22:
            return "IQ2_S";
        case 23:
            return "IQ4_XS";
        case 24:
            return "I8";
        case 25:
            return "I16";
        case 26:
            return "I32";
        case 27:
            return "I64";
        case 28:
            return "F64";
        case 29:
            return "IQ1_M";
        case 30:
            return "BF16";
        case 31:
            return "Q4_0_4_4";
        case 32:
            return "Q4_0_4_8";
        case 33:
            return "Q4_0_8_8";
        case 34:
            return "TQ1_0";
        case 35:
            return "TQ2_0";
        case 36:
            return "IQ4_NL_4_4";
        case 37:
            return "IQ4_NL_4_8";
        case 38:
            return "IQ4_NL_8_8";
        case 39:
            return "MXFP4";
        default:
            return nullptr;
    }
}

// True when `id` is one of the TensorType values.
constexpr bool tensor_type_supported(uint32_t id) {
    switch (id) {
        case uint32_t(TensorType::F32):
        case uint32_t(TensorType::F16):
        case uint32_t(TensorType::Q4_0):
        case uint32_t(TensorType::Q4_1):
        case uint32_t(TensorType::Q8_0):
        case uint32_t(TensorType::BF16):
            return true;
        default:
            return false;
    }
}

// "F32", "Q4_1", ...
constexpr const char *tensor_type_name(TensorType t) {
    const char *name = ggml_type_name(uint32_t(t));
    return name ? name : "unknown";
}

// Elements per block: 1 for the float types, 32 for the quantized ones.
constexpr int64_t tensor_type_block_elements(TensorType t) {
    switch (t) {
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::Q8_0:
            return 32;
        default:
            return 1;
    }
}

// Bytes per block.
constexpr size_t tensor_type_block_bytes(TensorType t) {
    switch (t) {
        case TensorType::F32:
            return 4;
        case TensorType::F16:
            return 2;
        case TensorType::BF16:
            return 2;
        case TensorType::Q4_0:
            return 18;
        case TensorType::Q4_1:
            return 20;
        case TensorType::Q8_0:
            return 34;
    }
    return 0;
}

// Elements in one quantization block of Q4_0 / Q4_1 / Q8_0.
inline constexpr int kQuantBlock = 32;

// Q4_0: value = (nibble - 8) * d. Element j (0..15) is the low nibble of qs[j], element j + 16
// the high nibble of qs[j]. d is IEEE fp16.
struct BlockQ4_0 {
    uint16_t d;
    uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block is 18 bytes");

// Q4_1: value = nibble * d + m, nibble layout as Q4_0. d and m are IEEE fp16.
struct BlockQ4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block is 20 bytes");

// Q8_0: value = qs[j] * d. d is IEEE fp16.
struct BlockQ8_0 {
    uint16_t d;
    int8_t qs[kQuantBlock];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block is 34 bytes");

static_assert(tensor_type_block_bytes(TensorType::Q4_0) == sizeof(BlockQ4_0));
static_assert(tensor_type_block_bytes(TensorType::Q4_1) == sizeof(BlockQ4_1));
static_assert(tensor_type_block_bytes(TensorType::Q8_0) == sizeof(BlockQ8_0));

}  // namespace llmkv
