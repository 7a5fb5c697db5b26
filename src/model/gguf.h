// GgufFile: a hardened reader of GGUF v2/v3 model files. The file is memory-mapped read-only;
// metadata is parsed into owned values and tensor data is referenced in place. Every length,
// count and offset is checked against the bytes present before it is used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensor/tensor_type.h"

namespace llmkv {

// Metadata value types, numbered as in the file.
enum class GgufValueType : uint32_t {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
};

// "u32", "string", "array", ...; "unknown" for values outside the enum.
const char *gguf_value_type_name(GgufValueType type);

// One metadata value.
//  - unsigned integers: `u` holds the value, `i` the same bits as int64_t;
//  - signed integers: `i` holds the value, `u` the same bits as uint64_t;
//  - BOOL: u = i = 0 or 1;  F32/F64: `f`;  STRING: `str`;
//  - ARRAY: `array_type` is the element type; string elements go to `strings`, integer and
//    bool elements to `ints` (U64 elements above INT64_MAX wrap), F32/F64 elements to `floats`.
struct GgufValue {
    GgufValueType type = GgufValueType::U8;
    uint64_t u = 0;
    int64_t i = 0;
    double f = 0;
    std::string str;
    GgufValueType array_type = GgufValueType::U8;
    std::vector<std::string> strings;
    std::vector<int64_t> ints;
    std::vector<double> floats;

    bool is_integer() const;  // U8..I64 (not BOOL)
    // Number of array elements (0 when not an array).
    size_t array_size() const;
};

struct GgufTensor {
    std::string name;
    std::vector<int64_t> dims;  // dims[0] = innermost (row length); 1..4 entries, each >= 1
    TensorType type = TensorType::F32;
    uint64_t offset = 0;            // relative to the data section
    const uint8_t *data = nullptr;  // inside the mapping: file data() + data_offset() + offset
    uint64_t n_elements = 0;
    uint64_t n_bytes = 0;

    int64_t row_length() const { return dims.empty() ? 0 : dims[0]; }
    int64_t rows() const;  // product of dims[1..]; 1 for a vector
    size_t row_bytes() const;
};

// Limits the reader enforces (beyond "fits in the file").
struct GgufLimits {
    static constexpr uint64_t kMaxTensors = 1ull << 20;
    static constexpr uint64_t kMaxKv = 1ull << 20;
    static constexpr uint64_t kMaxKeyLength = 65535;
    static constexpr uint64_t kMaxStringLength = 1ull << 30;
    static constexpr uint64_t kMaxArrayLength = 1ull << 30;
    static constexpr uint64_t kMaxTensorNameLength = 65535;
    static constexpr uint32_t kMaxDims = 4;
    static constexpr uint64_t kMaxDim = 1ull << 40;
    static constexpr uint32_t kMaxAlignment = 1u << 20;
    static constexpr uint32_t kDefaultAlignment = 32;
    static constexpr size_t kHeaderBytes = 24;  // magic, version, tensor_count, kv_count
};

class GgufCursor;  // bounds-checked reader, defined in gguf.cpp

class GgufFile {
public:
    // Maps and parses `path`. Throws llmkv::Error: LLMKV_ERR_IO (cannot open/stat/map; the
    // message has the path and strerror), LLMKV_ERR_MODEL_FORMAT (malformed file), or
    // LLMKV_ERR_UNSUPPORTED (a known GGML tensor type llmkv does not implement).
    static std::unique_ptr<GgufFile> open(const std::string &path);
    // Parses a GGUF image in memory without copying it; `data` must outlive the result.
    static std::unique_ptr<GgufFile> from_memory(const void *data, size_t size);

    ~GgufFile();
    GgufFile(const GgufFile &) = delete;
    GgufFile &operator=(const GgufFile &) = delete;

    const std::string &path() const { return path_; }  // "" for from_memory
    uint32_t version() const { return version_; }
    size_t file_size() const { return size_; }
    const uint8_t *data() const { return data_; }
    // Drops the whole pages of the mapped file inside [p, p + n) from the process's resident
    // set (they are read from the file again if touched): for tensors a backend has copied
    // into its own layout. Does nothing for a file in caller memory (from_memory) or for a
    // range outside the file.
    void release_pages(const void *p, size_t n) const;
    uint32_t alignment() const { return alignment_; }
    // Byte offset of the tensor data section (aligned end of the tensor infos). May equal or
    // exceed file_size() only when there are no tensors.
    uint64_t data_offset() const { return data_offset_; }

    // ---- metadata ----
    const std::vector<std::pair<std::string, GgufValue>> &metadata() const { return metadata_; }
    const GgufValue *find(std::string_view key) const;
    // Typed getters: std::nullopt / nullptr when the key is absent; LLMKV_ERR_MODEL_FORMAT
    // naming the key when it is present with an incompatible type or value.
    std::optional<uint64_t> get_uint(std::string_view key) const;  // any integer type, >= 0
    std::optional<int64_t> get_int(std::string_view key) const;    // any integer type in range
    std::optional<double> get_float(std::string_view key) const;   // F32, F64 or any integer
    std::optional<bool> get_bool(std::string_view key) const;
    std::optional<std::string> get_string(std::string_view key) const;
    const std::vector<std::string> *get_string_array(std::string_view key) const;
    const std::vector<int64_t> *get_int_array(std::string_view key) const;   // integer/bool
    const std::vector<double> *get_float_array(std::string_view key) const;  // F32/F64

    // ---- tensors (in file order) ----
    const std::vector<GgufTensor> &tensors() const { return tensors_; }
    const GgufTensor *find_tensor(std::string_view name) const;

private:
    GgufFile() = default;
    void parse();
    void parse_kv(GgufCursor &cur, uint64_t index);
    void parse_tensor_info(GgufCursor &cur, uint64_t index);
    void build_indexes_kv();
    void build_indexes_tensors();
    void check_tensor_data();

    std::string path_;
    const uint8_t *data_ = nullptr;
    size_t size_ = 0;
    void *mapping_ = nullptr;     // non-null when this object owns a file mapping of size_ bytes
    void *map_handle_ = nullptr;  // the OS mapping object (os::FileMap::handle)
    uint32_t version_ = 0;
    uint32_t alignment_ = GgufLimits::kDefaultAlignment;
    uint64_t data_offset_ = 0;
    std::vector<std::pair<std::string, GgufValue>> metadata_;
    std::unordered_map<std::string_view, size_t> kv_index_;  // views into metadata_ keys
    // (both indexes are built once their vector is complete, so the views stay valid)
    std::vector<GgufTensor> tensors_;
    std::unordered_map<std::string_view, size_t> tensor_index_;  // views into tensors_ names
};

}  // namespace llmkv
