// GgufWriter: serializes metadata and tensors into a GGUF image (header, kvs, tensor infos,
// padding, aligned tensor data) and reports where each field landed.
#include "gguf_writer.h"

#include <cstdio>
#include <stdexcept>

namespace llmkv {

namespace {

// GGUF metadata value type ids.
enum : uint32_t {
    kU8 = 0,
    kI8 = 1,
    kU16 = 2,
    kI16 = 3,
    kU32 = 4,
    kI32 = 5,
    kF32 = 6,
    kBool = 7,
    kString = 8,
    kArray = 9,
    kU64 = 10,
    kI64 = 11,
    kF64 = 12,
};

template <typename T>
void put(std::vector<uint8_t> &out, T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.insert(out.end(), b, b + sizeof(T));
}

void put_string(std::vector<uint8_t> &out, const std::string &s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
}

template <typename T>
std::vector<uint8_t> scalar(T v) {
    std::vector<uint8_t> out;
    put<T>(out, v);
    return out;
}

template <typename T>
std::vector<uint8_t> array(uint32_t elem_type, const std::vector<T> &v) {
    std::vector<uint8_t> out;
    put<uint32_t>(out, elem_type);
    put<uint64_t>(out, v.size());
    for (const T &x : v) put<T>(out, x);
    return out;
}

void pad_to(std::vector<uint8_t> &out, uint64_t alignment) {
    while (out.size() % alignment != 0) out.push_back(0);
}

uint64_t align_up(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

}  // namespace

void GgufWriter::add_kv(const std::string &key, uint32_t type, std::vector<uint8_t> payload) {
    kvs_.push_back(Kv{key, type, std::move(payload)});
}

void GgufWriter::set_alignment(uint32_t alignment) {
    if (alignment == 0) throw std::invalid_argument("GgufWriter: alignment 0");
    alignment_ = alignment;
    for (Kv &kv : kvs_) {
        if (kv.key == "general.alignment") {
            kv.type = kU32;
            kv.payload = scalar<uint32_t>(alignment);
            return;
        }
    }
    add_kv("general.alignment", kU32, scalar<uint32_t>(alignment));
}

void GgufWriter::add_uint8(const std::string &k, uint8_t v) {
    add_kv(k, kU8, scalar(v));
}
void GgufWriter::add_int8(const std::string &k, int8_t v) {
    add_kv(k, kI8, scalar(v));
}
void GgufWriter::add_uint16(const std::string &k, uint16_t v) {
    add_kv(k, kU16, scalar(v));
}
void GgufWriter::add_int16(const std::string &k, int16_t v) {
    add_kv(k, kI16, scalar(v));
}
void GgufWriter::add_uint32(const std::string &k, uint32_t v) {
    add_kv(k, kU32, scalar(v));
}
void GgufWriter::add_int32(const std::string &k, int32_t v) {
    add_kv(k, kI32, scalar(v));
}
void GgufWriter::add_uint64(const std::string &k, uint64_t v) {
    add_kv(k, kU64, scalar(v));
}
void GgufWriter::add_int64(const std::string &k, int64_t v) {
    add_kv(k, kI64, scalar(v));
}
void GgufWriter::add_float32(const std::string &k, float v) {
    add_kv(k, kF32, scalar(v));
}
void GgufWriter::add_float64(const std::string &k, double v) {
    add_kv(k, kF64, scalar(v));
}
void GgufWriter::add_bool(const std::string &k, bool v) {
    add_kv(k, kBool, scalar<uint8_t>(v ? 1 : 0));
}
void GgufWriter::add_string(const std::string &k, const std::string &v) {
    std::vector<uint8_t> p;
    put_string(p, v);
    add_kv(k, kString, std::move(p));
}

void GgufWriter::add_string_array(const std::string &k, const std::vector<std::string> &v) {
    std::vector<uint8_t> p;
    put<uint32_t>(p, kString);
    put<uint64_t>(p, v.size());
    for (const std::string &s : v) put_string(p, s);
    add_kv(k, kArray, std::move(p));
}
void GgufWriter::add_float32_array(const std::string &k, const std::vector<float> &v) {
    add_kv(k, kArray, array(kF32, v));
}
void GgufWriter::add_float64_array(const std::string &k, const std::vector<double> &v) {
    add_kv(k, kArray, array(kF64, v));
}
void GgufWriter::add_int32_array(const std::string &k, const std::vector<int32_t> &v) {
    add_kv(k, kArray, array(kI32, v));
}
void GgufWriter::add_uint32_array(const std::string &k, const std::vector<uint32_t> &v) {
    add_kv(k, kArray, array(kU32, v));
}
void GgufWriter::add_int64_array(const std::string &k, const std::vector<int64_t> &v) {
    add_kv(k, kArray, array(kI64, v));
}
void GgufWriter::add_uint8_array(const std::string &k, const std::vector<uint8_t> &v) {
    add_kv(k, kArray, array(kU8, v));
}
void GgufWriter::add_bool_array(const std::string &k, const std::vector<bool> &v) {
    std::vector<uint8_t> bytes(v.begin(), v.end());
    add_kv(k, kArray, array(kBool, bytes));
}

void GgufWriter::add_raw_kv(const std::string &key, uint32_t type_id,
                            const std::vector<uint8_t> &payload) {
    add_kv(key, type_id, payload);
}

void GgufWriter::add_tensor(const std::string &name, const std::vector<int64_t> &dims,
                            TensorType type, std::vector<uint8_t> bytes) {
    if (dims.empty()) throw std::invalid_argument("GgufWriter: tensor " + name + " has no dims");
    int64_t n = 1;
    std::vector<uint64_t> udims;
    for (int64_t d : dims) {
        if (d < 1) throw std::invalid_argument("GgufWriter: tensor " + name + " has a dim < 1");
        n *= d;
        udims.push_back(uint64_t(d));
    }
    if (dims[0] % tensor_type_block_elements(type) != 0) {
        throw std::invalid_argument("GgufWriter: tensor " + name +
                                    ": dims[0] is not a multiple of the block size");
    }
    size_t expected = tensor_bytes_reference(type, n);
    if (bytes.size() != expected) {
        throw std::invalid_argument("GgufWriter: tensor " + name + " has " +
                                    std::to_string(bytes.size()) + " bytes, expected " +
                                    std::to_string(expected));
    }
    add_tensor_raw(name, udims, uint32_t(type), std::move(bytes));
}

void GgufWriter::add_tensor_raw(const std::string &name, const std::vector<uint64_t> &dims,
                                uint32_t type_id, std::vector<uint8_t> bytes) {
    tensors_.push_back(Tensor{name, dims, type_id, std::move(bytes)});
}

void GgufWriter::add_tensor_f32(const std::string &name, const std::vector<int64_t> &dims,
                                const std::vector<float> &values, TensorType as) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    if (int64_t(values.size()) != n) {
        throw std::invalid_argument("GgufWriter: tensor " + name + " has " +
                                    std::to_string(values.size()) + " values, dims need " +
                                    std::to_string(n));
    }
    add_tensor(name, dims, as, quantize_reference(as, values.data(), n));
}

std::vector<uint8_t> GgufWriter::build(Layout *layout) const {
    Layout lay;
    std::vector<uint8_t> out;
    put<uint32_t>(out, 0x46554747u);  // "GGUF"
    put<uint32_t>(out, version_);
    put<uint64_t>(out, tensors_.size());
    put<uint64_t>(out, kvs_.size());
    for (const Kv &kv : kvs_) {
        lay.kv_offset.push_back(out.size());
        put_string(out, kv.key);
        lay.kv_type_offset.push_back(out.size());
        put<uint32_t>(out, kv.type);
        lay.kv_value_offset.push_back(out.size());
        out.insert(out.end(), kv.payload.begin(), kv.payload.end());
    }
    uint64_t data_pos = 0;
    for (const Tensor &t : tensors_) {
        lay.tensor_info_offset.push_back(out.size());
        put_string(out, t.name);
        lay.tensor_n_dims_offset.push_back(out.size());
        put<uint32_t>(out, uint32_t(t.dims.size()));
        lay.tensor_dims_offset.push_back(out.size());
        for (uint64_t d : t.dims) put<uint64_t>(out, d);
        lay.tensor_type_offset.push_back(out.size());
        put<uint32_t>(out, t.type);
        lay.tensor_offset_offset.push_back(out.size());
        data_pos = align_up(data_pos, alignment_);
        put<uint64_t>(out, data_pos);
        lay.tensor_data_offset.push_back(data_pos);
        data_pos += t.bytes.size();
    }
    lay.tensor_infos_end = out.size();
    pad_to(out, alignment_);
    lay.data_offset = out.size();
    for (size_t k = 0; k < tensors_.size(); ++k) {
        out.resize(lay.data_offset + lay.tensor_data_offset[k], 0);
        out.insert(out.end(), tensors_[k].bytes.begin(), tensors_[k].bytes.end());
    }
    lay.data_end = out.size();
    lay.size = out.size();
    if (layout != nullptr) *layout = std::move(lay);
    return out;
}

GgufWriter::Layout GgufWriter::layout() const {
    Layout lay;
    build(&lay);
    return lay;
}

void GgufWriter::write_file(const std::string &path) const {
    std::vector<uint8_t> bytes = build();
    std::FILE *f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) throw std::runtime_error("GgufWriter: cannot create " + path);
    size_t written = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
    int closed = std::fclose(f);
    if (written != bytes.size() || closed != 0) {
        throw std::runtime_error("GgufWriter: cannot write " + path);
    }
}

}  // namespace llmkv
