// GgufWriter: builds GGUF v3 (or v2) files in memory for tests, with float tensors quantized on
// the way in, plus the byte layout of what it wrote so malformed-file tests can patch fields.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "quant_reference.h"
#include "tensor/tensor_type.h"

namespace llmkv {

class GgufWriter {
public:
    // Byte offsets (from the start of the file) of the fields build() wrote.
    struct Layout {
        static constexpr size_t kVersionOffset = 4;
        static constexpr size_t kTensorCountOffset = 8;
        static constexpr size_t kKvCountOffset = 16;
        static constexpr size_t kHeaderEnd = 24;
        std::vector<size_t> kv_offset;             // each kv: its key length field
        std::vector<size_t> kv_type_offset;        // each kv: its u32 value type field
        std::vector<size_t> kv_value_offset;       // each kv: the first byte after the type field
        std::vector<size_t> tensor_info_offset;    // each tensor info: its name length field
        std::vector<size_t> tensor_n_dims_offset;  // u32 n_dims
        std::vector<size_t> tensor_dims_offset;    // dims[0] (u64 each)
        std::vector<size_t> tensor_type_offset;    // u32 type id
        std::vector<size_t> tensor_offset_offset;  // u64 offset field
        std::vector<uint64_t> tensor_data_offset;  // the offset value written (data-relative)
        size_t tensor_infos_end = 0;               // first byte after the last tensor info
        size_t data_offset = 0;                    // start of the data section
        size_t data_end = 0;                       // end of the last tensor's data (= size)
        size_t size = 0;
    };

    GgufWriter() = default;

    // Header version written (default 3). Any value is written as given.
    void set_version(uint32_t version) { version_ = version; }
    // Pads the tensor infos and each tensor's data to `alignment` and records it as
    // general.alignment (u32), replacing an earlier general.alignment entry. Default 32, with
    // no key written.
    void set_alignment(uint32_t alignment);

    // Scalar metadata, appended in call order. Keys are not checked for duplicates.
    void add_uint8(const std::string &key, uint8_t v);
    void add_int8(const std::string &key, int8_t v);
    void add_uint16(const std::string &key, uint16_t v);
    void add_int16(const std::string &key, int16_t v);
    void add_uint32(const std::string &key, uint32_t v);
    void add_int32(const std::string &key, int32_t v);
    void add_uint64(const std::string &key, uint64_t v);
    void add_int64(const std::string &key, int64_t v);
    void add_float32(const std::string &key, float v);
    void add_float64(const std::string &key, double v);
    void add_bool(const std::string &key, bool v);
    void add_string(const std::string &key, const std::string &v);
    // Arrays.
    void add_string_array(const std::string &key, const std::vector<std::string> &v);
    void add_float32_array(const std::string &key, const std::vector<float> &v);
    void add_float64_array(const std::string &key, const std::vector<double> &v);
    void add_int32_array(const std::string &key, const std::vector<int32_t> &v);
    void add_uint32_array(const std::string &key, const std::vector<uint32_t> &v);
    void add_int64_array(const std::string &key, const std::vector<int64_t> &v);
    void add_uint8_array(const std::string &key, const std::vector<uint8_t> &v);
    void add_bool_array(const std::string &key, const std::vector<bool> &v);
    // Raw kv: `type_id` is written as the value type and `payload` verbatim after it.
    void add_raw_kv(const std::string &key, uint32_t type_id, const std::vector<uint8_t> &payload);

    // A tensor whose data is `bytes`; its size must match dims and type (else
    // std::invalid_argument). dims[0] is the innermost dimension.
    void add_tensor(const std::string &name, const std::vector<int64_t> &dims, TensorType type,
                    std::vector<uint8_t> bytes);
    // No checks at all: any dims, any type id, any data (its size sets the data layout).
    void add_tensor_raw(const std::string &name, const std::vector<uint64_t> &dims,
                        uint32_t type_id, std::vector<uint8_t> bytes);
    // Quantizes `values` (row-major, dims[0] innermost) into `as` with quantize_reference().
    void add_tensor_f32(const std::string &name, const std::vector<int64_t> &dims,
                        const std::vector<float> &values, TensorType as = TensorType::F32);

    size_t kv_count() const { return kvs_.size(); }
    size_t tensor_count() const { return tensors_.size(); }

    // The complete file; `layout` (optional) receives the offsets of its fields.
    std::vector<uint8_t> build(Layout *layout = nullptr) const;
    Layout layout() const;
    // build() written to `path`; throws std::runtime_error on IO failure.
    void write_file(const std::string &path) const;

private:
    struct Kv {
        std::string key;
        uint32_t type;
        std::vector<uint8_t> payload;
    };
    struct Tensor {
        std::string name;
        std::vector<uint64_t> dims;
        uint32_t type;
        std::vector<uint8_t> bytes;
    };
    void add_kv(const std::string &key, uint32_t type, std::vector<uint8_t> payload);

    uint32_t version_ = 3;
    uint32_t alignment_ = 32;
    std::vector<Kv> kvs_;
    std::vector<Tensor> tensors_;
};

// Little-endian field patching for malformed-file tests.
inline void patch_u32(std::vector<uint8_t> &buf, size_t offset, uint32_t v) {
    std::memcpy(buf.data() + offset, &v, 4);
}
inline void patch_u64(std::vector<uint8_t> &buf, size_t offset, uint64_t v) {
    std::memcpy(buf.data() + offset, &v, 8);
}
inline uint32_t peek_u32(const std::vector<uint8_t> &buf, size_t offset) {
    uint32_t v;
    std::memcpy(&v, buf.data() + offset, 4);
    return v;
}
inline uint64_t peek_u64(const std::vector<uint8_t> &buf, size_t offset) {
    uint64_t v;
    std::memcpy(&v, buf.data() + offset, 8);
    return v;
}

}  // namespace llmkv
