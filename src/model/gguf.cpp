// GgufFile: maps a GGUF v2/v3 file and parses it through a bounds-checked cursor. Every count,
// length and offset read from the file is checked against the bytes that remain (and a cap)
// before anything is allocated or dereferenced.
#include "model/gguf.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "common/fault.h"
#include "platform/os.h"

namespace llmkv {

namespace {

constexpr uint32_t kMagic = 0x46554747u;     // "GGUF" read as a little-endian u32
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;  // key length, type, smallest value
// Name length, n_dims, one dim, type, offset.
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
constexpr uint32_t kValueTypeCount = 13;

using ull = unsigned long long;

// Up to 80 characters of `s` with control and non-ASCII bytes shown as '?', for messages.
std::string printable(std::string_view s) {
    std::string out;
    size_t n = std::min<size_t>(s.size(), 80);
    out.reserve(n + 3);
    for (size_t k = 0; k < n; ++k) {
        unsigned char c = static_cast<unsigned char>(s[k]);
        out.push_back(c >= 0x20 && c < 0x7f ? char(c) : '?');
    }
    if (s.size() > n) out += "...";
    return out;
}

// Bytes a value of scalar type `t` occupies; strings give their minimum (the length field).
uint64_t min_value_bytes(GgufValueType t) {
    switch (t) {
        case GgufValueType::U8:
        case GgufValueType::I8:
        case GgufValueType::BOOL:
            return 1;
        case GgufValueType::U16:
        case GgufValueType::I16:
            return 2;
        case GgufValueType::U32:
        case GgufValueType::I32:
        case GgufValueType::F32:
            return 4;
        case GgufValueType::U64:
        case GgufValueType::I64:
        case GgufValueType::F64:
        case GgufValueType::STRING:
            return 8;
        case GgufValueType::ARRAY:
            return 4 + 8;  // element type + count
    }
    return 1;
}

bool is_signed_type(GgufValueType t) {
    return t == GgufValueType::I8 || t == GgufValueType::I16 || t == GgufValueType::I32 ||
           t == GgufValueType::I64;
}

bool is_unsigned_type(GgufValueType t) {
    return t == GgufValueType::U8 || t == GgufValueType::U16 || t == GgufValueType::U32 ||
           t == GgufValueType::U64;
}

bool is_float_type(GgufValueType t) {
    return t == GgufValueType::F32 || t == GgufValueType::F64;
}

}  // namespace

// Reads little-endian fields from [data, data + size); every read checks that its bytes are
// present first. Error messages start with the current context ("key general.name", ...).
class GgufCursor {
public:
    GgufCursor(const uint8_t *data, size_t size, size_t pos)
        : data_(data), size_(size), pos_(pos) {}

    size_t pos() const { return pos_; }
    size_t remaining() const { return size_ - pos_; }
    const std::string &context() const { return context_; }
    void set_context(std::string context) { context_ = std::move(context); }

    // Throws unless `n` more bytes are present.
    void need(uint64_t n, const char *field) const {
        if (n > remaining()) {
            fail(LLMKV_ERR_MODEL_FORMAT,
                 "%s%s: needs %llu bytes at offset %zu but only %zu remain (file size %zu)",
                 prefix().c_str(), field, ull(n), pos_, remaining(), size_);
        }
    }

    template <typename T>
    T read(const char *field) {
        need(sizeof(T), field);
        T v;
        std::memcpy(&v, data_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    // A u64 length followed by that many bytes. The length is checked against `cap` and the
    // remaining bytes before the string is allocated. `element` >= 0 names an array element.
    std::string read_string(const char *field, uint64_t cap, int64_t element = -1) {
        uint64_t len = read<uint64_t>(field);
        if (len > cap || len > remaining()) {
            std::string what = element >= 0 ? strprintf("%s[%lld]", field, (long long)element)
                                            : std::string(field);
            if (len > cap) {
                fail(LLMKV_ERR_MODEL_FORMAT, "%s%s length %llu exceeds the limit of %llu",
                     prefix().c_str(), what.c_str(), ull(len), ull(cap));
            }
            fail(LLMKV_ERR_MODEL_FORMAT,
                 "%s%s length %llu exceeds the %zu bytes remaining at offset %zu (file size %zu)",
                 prefix().c_str(), what.c_str(), ull(len), remaining(), pos_, size_);
        }
        std::string s(reinterpret_cast<const char *>(data_ + pos_), size_t(len));
        pos_ += size_t(len);
        return s;
    }

    std::string prefix() const { return context_.empty() ? std::string() : context_ + ": "; }

private:
    const uint8_t *data_;
    size_t size_;
    size_t pos_;
    std::string context_;
};

const char *gguf_value_type_name(GgufValueType type) {
    switch (type) {
        case GgufValueType::U8:
            return "u8";
        case GgufValueType::I8:
            return "i8";
        case GgufValueType::U16:
            return "u16";
        case GgufValueType::I16:
            return "i16";
        case GgufValueType::U32:
            return "u32";
        case GgufValueType::I32:
            return "i32";
        case GgufValueType::F32:
            return "f32";
        case GgufValueType::BOOL:
            return "bool";
        case GgufValueType::STRING:
            return "string";
        case GgufValueType::ARRAY:
            return "array";
        case GgufValueType::U64:
            return "u64";
        case GgufValueType::I64:
            return "i64";
        case GgufValueType::F64:
            return "f64";
    }
    return "unknown";
}

bool GgufValue::is_integer() const {
    return is_signed_type(type) || is_unsigned_type(type);
}

size_t GgufValue::array_size() const {
    if (type != GgufValueType::ARRAY) return 0;
    if (array_type == GgufValueType::STRING) return strings.size();
    if (is_float_type(array_type)) return floats.size();
    return ints.size();
}

int64_t GgufTensor::rows() const {
    int64_t r = 1;
    for (size_t k = 1; k < dims.size(); ++k) r *= dims[k];
    return r;
}

size_t GgufTensor::row_bytes() const {
    return size_t(row_length() / tensor_type_block_elements(type)) * tensor_type_block_bytes(type);
}

namespace {

// Reads one scalar of integer/bool/float type `t` into `v` (u, i, f as GgufValue documents).
void read_number(GgufCursor &cur, GgufValueType t, GgufValue &v) {
    switch (t) {
        case GgufValueType::U8:
            v.u = cur.read<uint8_t>("u8 value");
            break;
        case GgufValueType::U16:
            v.u = cur.read<uint16_t>("u16 value");
            break;
        case GgufValueType::U32:
            v.u = cur.read<uint32_t>("u32 value");
            break;
        case GgufValueType::U64:
            v.u = cur.read<uint64_t>("u64 value");
            break;
        case GgufValueType::I8:
            v.i = cur.read<int8_t>("i8 value");
            break;
        case GgufValueType::I16:
            v.i = cur.read<int16_t>("i16 value");
            break;
        case GgufValueType::I32:
            v.i = cur.read<int32_t>("i32 value");
            break;
        case GgufValueType::I64:
            v.i = cur.read<int64_t>("i64 value");
            break;
        case GgufValueType::BOOL:
            v.u = cur.read<uint8_t>("bool value") != 0 ? 1 : 0;
            break;
        case GgufValueType::F32:
            v.f = cur.read<float>("f32 value");
            break;
        case GgufValueType::F64:
            v.f = cur.read<double>("f64 value");
            break;
        case GgufValueType::STRING:
        case GgufValueType::ARRAY:
            break;  // not numbers; callers handle them
    }
    if (is_signed_type(t)) {
        v.u = uint64_t(v.i);
    } else if (is_unsigned_type(t) || t == GgufValueType::BOOL) {
        v.i = int64_t(v.u);
    }
}

void read_array(GgufCursor &cur, GgufValue &v) {
    uint32_t raw_type = cur.read<uint32_t>("array element type");
    if (raw_type >= kValueTypeCount) {
        fail(LLMKV_ERR_MODEL_FORMAT, "%sarray element type %u is unknown", cur.prefix().c_str(),
             raw_type);
    }
    GgufValueType et = GgufValueType(raw_type);
    if (et == GgufValueType::ARRAY) {
        fail(LLMKV_ERR_MODEL_FORMAT, "%snested arrays (array of arrays) are not supported",
             cur.prefix().c_str());
    }
    v.array_type = et;
    uint64_t count = cur.read<uint64_t>("array length");
    if (count > GgufLimits::kMaxArrayLength) {
        fail(LLMKV_ERR_MODEL_FORMAT, "%sarray length %llu exceeds the limit of %llu",
             cur.prefix().c_str(), ull(count), ull(GgufLimits::kMaxArrayLength));
    }
    const uint64_t elem = min_value_bytes(et);
    if (count * elem > cur.remaining()) {  // count <= 2^30 and elem <= 8: no overflow
        fail(LLMKV_ERR_MODEL_FORMAT,
             "%sarray length %llu of %s needs at least %llu bytes but only %zu remain at "
             "offset %zu",
             cur.prefix().c_str(), ull(count), gguf_value_type_name(et), ull(count * elem),
             cur.remaining(), cur.pos());
    }
    if (et == GgufValueType::STRING) {
        v.strings.reserve(size_t(count));
        for (uint64_t k = 0; k < count; ++k) {
            v.strings.push_back(
                cur.read_string("string", GgufLimits::kMaxStringLength, int64_t(k)));
        }
    } else if (is_float_type(et)) {
        v.floats.resize(size_t(count));
        GgufValue tmp;
        for (uint64_t k = 0; k < count; ++k) {
            read_number(cur, et, tmp);
            v.floats[k] = tmp.f;
        }
    } else {
        v.ints.resize(size_t(count));
        GgufValue tmp;
        for (uint64_t k = 0; k < count; ++k) {
            read_number(cur, et, tmp);
            v.ints[k] = tmp.i;
        }
    }
}

}  // namespace

// ---- opening ------------------------------------------------------------------------------

GgufFile::~GgufFile() {
    if (mapping_ != nullptr) {
        os::FileMap m{static_cast<const uint8_t *>(mapping_), size_, map_handle_};
        os::unmap_file(m);
    }
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string &path) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->path_ = path;
    os::FileMap m;
    switch (os::map_file(path, m, fault::should_fail(fault::Site::kModelMmap))) {
        case os::MapError::kNone:
            break;
        case os::MapError::kOpen: {
            const int e = errno;
            fail(LLMKV_ERR_IO, "cannot open model file %s: %s", path.c_str(), std::strerror(e));
        }
        case os::MapError::kStat: {
            const int e = errno;
            fail(LLMKV_ERR_IO, "cannot stat model file %s: %s", path.c_str(), std::strerror(e));
        }
        case os::MapError::kNotRegular:
            fail(LLMKV_ERR_IO, "model file %s is not a regular file", path.c_str());
        case os::MapError::kMap: {
            const int e = errno;
            fail(LLMKV_ERR_IO, "cannot map model file %s: %s", path.c_str(), std::strerror(e));
        }
    }
    if (m.data != nullptr) {
        f->mapping_ = const_cast<uint8_t *>(m.data);
        f->map_handle_ = m.handle;
        f->data_ = m.data;
        f->size_ = m.size;
    }
    try {
        f->parse();
    } catch (const Error &e) {
        // Name the file in format errors too.
        throw Error(e.status(), path + ": " + e.what());
    }
    return f;
}

void GgufFile::release_pages(const void *p, size_t n) const {
    if (!mapping_ || !p || n == 0) return;
    const uintptr_t lo = reinterpret_cast<uintptr_t>(data_), hi = lo + size_;
    uintptr_t b = reinterpret_cast<uintptr_t>(p), e = b + n;
    if (b < lo || e > hi || e < b) return;
    const uintptr_t page = uintptr_t(os::page_size());
    b = (b + page - 1) & ~(page - 1);
    e &= ~(page - 1);
    if (e > b) os::drop_file_pages(reinterpret_cast<const void *>(b), e - b);
}

std::unique_ptr<GgufFile> GgufFile::from_memory(const void *data, size_t size) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->data_ = static_cast<const uint8_t *>(data);
    f->size_ = data != nullptr ? size : 0;
    f->parse();
    return f;
}

// ---- parsing ------------------------------------------------------------------------------

void GgufFile::parse() {
    if (size_ < GgufLimits::kHeaderBytes) {
        fail(LLMKV_ERR_MODEL_FORMAT,
             "file size %zu is smaller than the GGUF header (%zu bytes): not a GGUF file", size_,
             GgufLimits::kHeaderBytes);
    }
    GgufCursor cur(data_, size_, 0);
    uint32_t magic = cur.read<uint32_t>("magic");
    if (magic != kMagic) {
        fail(LLMKV_ERR_MODEL_FORMAT,
             "bad magic: bytes %02x %02x %02x %02x, expected \"GGUF\" (47 47 55 46)", data_[0],
             data_[1], data_[2], data_[3]);
    }
    version_ = cur.read<uint32_t>("version");
    if (version_ != 2 && version_ != 3) {
        if (version_ == 1) {
            fail(LLMKV_ERR_MODEL_FORMAT,
                 "version 1 is not supported (GGUF v1 files are obsolete; expected 2 or 3)");
        }
        if (version_ == 0x02000000u || version_ == 0x03000000u) {
            fail(LLMKV_ERR_MODEL_FORMAT,
                 "version %u is not supported: this is a big-endian GGUF file (expected a "
                 "little-endian version 2 or 3)",
                 version_);
        }
        fail(LLMKV_ERR_MODEL_FORMAT, "version %u is not supported (expected 2 or 3)", version_);
    }
    uint64_t tensor_count = cur.read<uint64_t>("tensor_count");
    uint64_t kv_count = cur.read<uint64_t>("kv_count");
    if (tensor_count > GgufLimits::kMaxTensors) {
        fail(LLMKV_ERR_MODEL_FORMAT, "tensor_count %llu exceeds the limit of %llu",
             ull(tensor_count), ull(GgufLimits::kMaxTensors));
    }
    if (kv_count > GgufLimits::kMaxKv) {
        fail(LLMKV_ERR_MODEL_FORMAT, "kv_count %llu exceeds the limit of %llu", ull(kv_count),
             ull(GgufLimits::kMaxKv));
    }
    // Both counts are <= 2^20, so these products cannot overflow.
    if (kv_count * kMinKvBytes > cur.remaining()) {
        fail(LLMKV_ERR_MODEL_FORMAT,
             "kv_count %llu needs at least %llu bytes but only %zu bytes follow the header",
             ull(kv_count), ull(kv_count * kMinKvBytes), cur.remaining());
    }
    if (tensor_count * kMinTensorInfoBytes > cur.remaining()) {
        fail(LLMKV_ERR_MODEL_FORMAT,
             "tensor_count %llu needs at least %llu bytes but only %zu bytes follow the header",
             ull(tensor_count), ull(tensor_count * kMinTensorInfoBytes), cur.remaining());
    }
    if (kv_count * kMinKvBytes + tensor_count * kMinTensorInfoBytes > cur.remaining()) {
        fail(LLMKV_ERR_MODEL_FORMAT,
             "kv_count %llu and tensor_count %llu need at least %llu bytes but only %zu bytes "
             "follow the header",
             ull(kv_count), ull(tensor_count),
             ull(kv_count * kMinKvBytes + tensor_count * kMinTensorInfoBytes), cur.remaining());
    }

    metadata_.reserve(size_t(kv_count));
    for (uint64_t k = 0; k < kv_count; ++k) parse_kv(cur, k);
    build_indexes_kv();

    if (const GgufValue *a = find("general.alignment")) {
        if (a->type != GgufValueType::U32) {
            fail(LLMKV_ERR_MODEL_FORMAT, "general.alignment has type %s, expected u32",
                 gguf_value_type_name(a->type));
        }
        uint64_t al = a->u;
        if (al == 0 || (al & (al - 1)) != 0) {
            fail(LLMKV_ERR_MODEL_FORMAT, "general.alignment %llu is not a power of two", ull(al));
        }
        if (al % 8 != 0) {
            fail(LLMKV_ERR_MODEL_FORMAT, "general.alignment %llu is not a multiple of 8", ull(al));
        }
        if (al > GgufLimits::kMaxAlignment) {
            fail(LLMKV_ERR_MODEL_FORMAT, "general.alignment %llu exceeds the limit of %u", ull(al),
                 GgufLimits::kMaxAlignment);
        }
        alignment_ = uint32_t(al);
    }

    tensors_.reserve(size_t(tensor_count));
    for (uint64_t k = 0; k < tensor_count; ++k) parse_tensor_info(cur, k);
    build_indexes_tensors();

    // pos <= size_ and alignment_ <= 2^20: no overflow.
    data_offset_ = (uint64_t(cur.pos()) + alignment_ - 1) / alignment_ * alignment_;
    check_tensor_data();
}

void GgufFile::parse_kv(GgufCursor &cur, uint64_t index) {
    cur.set_context(strprintf("kv %llu", ull(index)));
    std::string key = cur.read_string("key", GgufLimits::kMaxKeyLength);
    if (key.empty()) fail(LLMKV_ERR_MODEL_FORMAT, "kv %llu: key is empty", ull(index));
    cur.set_context("key " + printable(key));
    uint32_t raw_type = cur.read<uint32_t>("value type");
    if (raw_type >= kValueTypeCount) {
        fail(LLMKV_ERR_MODEL_FORMAT, "%svalue type %u is unknown", cur.prefix().c_str(), raw_type);
    }
    GgufValue v;
    v.type = GgufValueType(raw_type);
    if (v.type == GgufValueType::STRING) {
        v.str = cur.read_string("string value", GgufLimits::kMaxStringLength);
    } else if (v.type == GgufValueType::ARRAY) {
        read_array(cur, v);
    } else {
        read_number(cur, v.type, v);
    }
    metadata_.emplace_back(std::move(key), std::move(v));
    cur.set_context(std::string());
}

void GgufFile::build_indexes_kv() {
    kv_index_.reserve(metadata_.size());
    for (size_t k = 0; k < metadata_.size(); ++k) {
        auto [it, inserted] = kv_index_.emplace(std::string_view(metadata_[k].first), k);
        if (!inserted) {
            fail(LLMKV_ERR_MODEL_FORMAT, "key %s: duplicate key (kv %zu and kv %zu)",
                 printable(metadata_[k].first).c_str(), it->second, k);
        }
    }
}

void GgufFile::parse_tensor_info(GgufCursor &cur, uint64_t index) {
    cur.set_context(strprintf("tensor %llu", ull(index)));
    GgufTensor t;
    t.name = cur.read_string("name", GgufLimits::kMaxTensorNameLength);
    if (t.name.empty()) fail(LLMKV_ERR_MODEL_FORMAT, "tensor %llu: name is empty", ull(index));
    const std::string shown = printable(t.name);
    const char *nm = shown.c_str();
    cur.set_context("tensor " + shown);

    uint32_t n_dims = cur.read<uint32_t>("n_dims");
    if (n_dims < 1 || n_dims > GgufLimits::kMaxDims) {
        fail(LLMKV_ERR_MODEL_FORMAT, "tensor %s: n_dims %u out of range 1..%u", nm, n_dims,
             GgufLimits::kMaxDims);
    }
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
        uint64_t dim = cur.read<uint64_t>("dims");
        if (dim < 1 || dim > GgufLimits::kMaxDim) {
            fail(LLMKV_ERR_MODEL_FORMAT, "tensor %s: dims[%u] = %llu out of range 1..2^40", nm, d,
                 ull(dim));
        }
        if (__builtin_mul_overflow(n_elements, dim, &n_elements)) {
            fail(LLMKV_ERR_MODEL_FORMAT,
                 "tensor %s: element count overflows 64 bits at dims[%u] = %llu", nm, d, ull(dim));
        }
        t.dims.push_back(int64_t(dim));
    }
    if (n_elements > uint64_t(std::numeric_limits<int64_t>::max())) {
        fail(LLMKV_ERR_MODEL_FORMAT, "tensor %s: element count %llu exceeds 2^63 - 1", nm,
             ull(n_elements));
    }
    t.n_elements = n_elements;

    uint32_t type_id = cur.read<uint32_t>("type");
    if (!tensor_type_supported(type_id)) {
        if (const char *known = ggml_type_name(type_id)) {
            fail(LLMKV_ERR_UNSUPPORTED,
                 "tensor %s: type %s (%u) is not supported (supported: F32, F16, BF16, Q8_0, "
                 "Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)",
                 nm, known, type_id);
        }
        fail(LLMKV_ERR_MODEL_FORMAT, "tensor %s: type id %u is unknown", nm, type_id);
    }
    t.type = TensorType(type_id);
    const uint64_t block = uint64_t(tensor_type_block_elements(t.type));
    if (uint64_t(t.dims[0]) % block != 0) {
        fail(LLMKV_ERR_MODEL_FORMAT,
             "tensor %s: dims[0] = %lld is not a multiple of the %s block size %llu", nm,
             (long long)t.dims[0], tensor_type_name(t.type), ull(block));
    }
    if (__builtin_mul_overflow(n_elements / block, uint64_t(tensor_type_block_bytes(t.type)),
                               &t.n_bytes)) {
        fail(LLMKV_ERR_MODEL_FORMAT, "tensor %s: byte size of %llu %s elements overflows 64 bits",
             nm, ull(n_elements), tensor_type_name(t.type));
    }

    t.offset = cur.read<uint64_t>("offset");
    if (t.offset % alignment_ != 0) {
        fail(LLMKV_ERR_MODEL_FORMAT, "tensor %s: offset %llu is not a multiple of the alignment %u",
             nm, ull(t.offset), alignment_);
    }
    tensors_.push_back(std::move(t));
    cur.set_context(std::string());
}

void GgufFile::build_indexes_tensors() {
    tensor_index_.reserve(tensors_.size());
    for (size_t k = 0; k < tensors_.size(); ++k) {
        auto [it, inserted] = tensor_index_.emplace(std::string_view(tensors_[k].name), k);
        if (!inserted) {
            fail(LLMKV_ERR_MODEL_FORMAT, "tensor %s: duplicate name (tensors %zu and %zu)",
                 printable(tensors_[k].name).c_str(), it->second, k);
        }
    }
}

void GgufFile::check_tensor_data() {
    for (GgufTensor &t : tensors_) {
        const std::string nm = printable(t.name);
        if (data_offset_ > size_ || t.offset > size_ - data_offset_) {
            fail(LLMKV_ERR_MODEL_FORMAT,
                 "tensor %s: offset %llu (file offset %llu) is past the end of the file "
                 "(size %zu)",
                 nm.c_str(), ull(t.offset), ull(data_offset_ + t.offset), size_);
        }
        const uint64_t start = data_offset_ + t.offset;  // <= size_
        if (t.n_bytes > size_ - start) {
            fail(LLMKV_ERR_MODEL_FORMAT,
                 "tensor %s: data of %llu bytes at offset %llu (file offset %llu) extends past "
                 "the end of the file (size %zu)",
                 nm.c_str(), ull(t.n_bytes), ull(t.offset), ull(start), size_);
        }
        t.data = data_ + start;
    }
    // Data regions must not overlap: sort by offset and compare neighbours.
    std::vector<const GgufTensor *> order;
    order.reserve(tensors_.size());
    for (const GgufTensor &t : tensors_) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const GgufTensor *a, const GgufTensor *b) {
        return a->offset != b->offset ? a->offset < b->offset : a->n_bytes < b->n_bytes;
    });
    for (size_t k = 1; k < order.size(); ++k) {
        const GgufTensor &a = *order[k - 1];
        const GgufTensor &b = *order[k];
        if (a.offset + a.n_bytes > b.offset) {  // both end inside the file: no overflow
            fail(LLMKV_ERR_MODEL_FORMAT,
                 "tensor %s: data [%llu, %llu) overlaps tensor %s [%llu, %llu)",
                 printable(b.name).c_str(), ull(b.offset), ull(b.offset + b.n_bytes),
                 printable(a.name).c_str(), ull(a.offset), ull(a.offset + a.n_bytes));
        }
    }
}

// ---- lookups ------------------------------------------------------------------------------

const GgufValue *GgufFile::find(std::string_view key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensor *GgufFile::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

[[noreturn]] void wrong_type(std::string_view key, const GgufValue &v, const char *expected) {
    std::string type = gguf_value_type_name(v.type);
    if (v.type == GgufValueType::ARRAY) {
        type = strprintf("array of %s", gguf_value_type_name(v.array_type));
    }
    fail(LLMKV_ERR_MODEL_FORMAT, "metadata %s has type %s, expected %s", printable(key).c_str(),
         type.c_str(), expected);
}

}  // namespace

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
    const GgufValue *v = find(key);
    if (!v) return std::nullopt;
    if (is_unsigned_type(v->type)) return v->u;
    if (is_signed_type(v->type)) {
        if (v->i < 0) {
            fail(LLMKV_ERR_MODEL_FORMAT, "metadata %s = %lld is negative, expected >= 0",
                 printable(key).c_str(), (long long)v->i);
        }
        return uint64_t(v->i);
    }
    wrong_type(key, *v, "an unsigned integer");
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
    const GgufValue *v = find(key);
    if (!v) return std::nullopt;
    if (is_signed_type(v->type)) return v->i;
    if (is_unsigned_type(v->type)) {
        if (v->u > uint64_t(std::numeric_limits<int64_t>::max())) {
            fail(LLMKV_ERR_MODEL_FORMAT, "metadata %s = %llu does not fit in int64",
                 printable(key).c_str(), ull(v->u));
        }
        return int64_t(v->u);
    }
    wrong_type(key, *v, "an integer");
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
    const GgufValue *v = find(key);
    if (!v) return std::nullopt;
    if (is_float_type(v->type)) return v->f;
    if (is_signed_type(v->type)) return double(v->i);
    if (is_unsigned_type(v->type)) return double(v->u);
    wrong_type(key, *v, "a number");
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
    const GgufValue *v = find(key);
    if (!v) return std::nullopt;
    if (v->type == GgufValueType::BOOL) return v->u != 0;
    wrong_type(key, *v, "bool");
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
    const GgufValue *v = find(key);
    if (!v) return std::nullopt;
    if (v->type == GgufValueType::STRING) return v->str;
    wrong_type(key, *v, "string");
}

const std::vector<std::string> *GgufFile::get_string_array(std::string_view key) const {
    const GgufValue *v = find(key);
    if (!v) return nullptr;
    if (v->type == GgufValueType::ARRAY && v->array_type == GgufValueType::STRING) {
        return &v->strings;
    }
    wrong_type(key, *v, "array of string");
}

const std::vector<int64_t> *GgufFile::get_int_array(std::string_view key) const {
    const GgufValue *v = find(key);
    if (!v) return nullptr;
    if (v->type == GgufValueType::ARRAY &&
        (is_signed_type(v->array_type) || is_unsigned_type(v->array_type) ||
         v->array_type == GgufValueType::BOOL)) {
        return &v->ints;
    }
    wrong_type(key, *v, "array of integers");
}

const std::vector<double> *GgufFile::get_float_array(std::string_view key) const {
    const GgufValue *v = find(key);
    if (!v) return nullptr;
    if (v->type == GgufValueType::ARRAY && is_float_type(v->array_type)) return &v->floats;
    wrong_type(key, *v, "array of f32/f64");
}

}  // namespace llmkv
