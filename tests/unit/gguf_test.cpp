// Tests of the GGUF reader: round trips of every metadata and tensor type, one test per class of
// malformed file (status and message naming the field), truncation and byte-flip robustness,
// and (when present) the real SmolLM2 model.
#include "model/gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/half.h"
#include "gguf_writer.h"
#include "quant_reference.h"

namespace llmkv {
namespace {

using ::testing::HasSubstr;

struct Failure {
    llmkv_status status = LLMKV_OK;
    std::string message;
};

// Parses `buf` (copied into an exactly-sized heap block, so sanitizers see any over-read) and
// returns the error it must throw.
Failure parse_error(const std::vector<uint8_t> &buf) {
    std::vector<uint8_t> copy(buf);
    try {
        GgufFile::from_memory(copy.data(), copy.size());
    } catch (const Error &e) {
        return Failure{e.status(), e.what()};
    }
    ADD_FAILURE() << "expected the GGUF image to be rejected";
    return Failure{};
}

#define EXPECT_GGUF_ERROR(buf, expected_status, substr)      \
    do {                                                     \
        Failure f_ = parse_error(buf);                       \
        EXPECT_EQ(f_.status, expected_status) << f_.message; \
        EXPECT_THAT(f_.message, HasSubstr(substr));          \
    } while (0)

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float &x : v) x = dist(rng);
    return v;
}

struct TensorSpec {
    std::string name;
    std::vector<int64_t> dims;
    TensorType type;
};

const std::vector<TensorSpec> &tensor_specs() {
    static const std::vector<TensorSpec> specs = {
        {"t.f32", {64, 3}, TensorType::F32},   {"t.f16", {32, 2, 2}, TensorType::F16},
        {"t.bf16", {16}, TensorType::BF16},    {"t.q8_0", {64, 4}, TensorType::Q8_0},
        {"t.q4_0", {96, 2}, TensorType::Q4_0}, {"t.q4_1", {32, 2, 2, 2}, TensorType::Q4_1},
    };
    return specs;
}

int64_t element_count(const std::vector<int64_t> &dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
}

// Metadata of every value type (scalar and array) plus one tensor of each supported type.
GgufWriter full_writer() {
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    w.add_uint8("v.u8", 200);
    w.add_int8("v.i8", -100);
    w.add_uint16("v.u16", 60000);
    w.add_int16("v.i16", -30000);
    w.add_uint32("v.u32", 4000000000u);
    w.add_int32("v.i32", -2000000000);
    w.add_uint64("v.u64", 0xfedcba9876543210ull);
    w.add_int64("v.i64", -0x123456789abcll);
    w.add_float32("v.f32", 1.5f);
    w.add_float64("v.f64", -2.25e100);
    w.add_bool("v.bool", true);
    w.add_string("v.string", "hello, \xc3\xa9t\xc3\xa9");
    w.add_string("v.empty", "");
    w.add_string_array("a.strings", {"<s>", "", "abc", std::string("nul\0in", 6)});
    w.add_float32_array("a.f32", {0.5f, -1.0f, 3.25f});
    w.add_float64_array("a.f64", {1e-300, 2.0});
    w.add_int32_array("a.i32", {-1, 0, 2147483647});
    w.add_uint32_array("a.u32", {4294967295u, 7});
    w.add_int64_array("a.i64", {-9000000000ll});
    w.add_uint8_array("a.u8", {1, 255});
    w.add_bool_array("a.bool", {true, false, true});
    w.add_int32_array("a.empty", {});
    uint32_t seed = 1;
    for (const TensorSpec &s : tensor_specs()) {
        w.add_tensor_f32(s.name, s.dims, random_floats(size_t(element_count(s.dims)), seed++),
                         s.type);
    }
    return w;
}

// A small valid file: a few kvs and two tensors.
GgufWriter small_writer() {
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    w.add_uint32("llama.block_count", 2);
    w.add_string_array("tokenizer.ggml.tokens", {"a", "bb", "ccc"});
    w.add_int32_array("tokenizer.ggml.token_type", {1, 1, 3});
    w.add_tensor_f32("first.weight", {32, 2}, random_floats(64, 7), TensorType::Q8_0);
    w.add_tensor_f32("second.weight", {8}, random_floats(8, 8), TensorType::F32);
    return w;
}

std::string temp_path(const std::string &name) {
    return (std::filesystem::path(::testing::TempDir()) / name).string();
}

// ---- valid files ------------------------------------------------------------------------

TEST(GgufReader, RoundTripsEveryMetadataAndTensorTypeThroughAFile) {
    GgufWriter w = full_writer();
    const std::string path = temp_path("llmkv_gguf_roundtrip.gguf");
    w.write_file(path);
    std::unique_ptr<GgufFile> f = GgufFile::open(path);
    std::filesystem::remove(path);

    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->path(), path);
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_EQ(f->file_size(), w.layout().size);
    EXPECT_EQ(f->data_offset(), w.layout().data_offset);

    // Metadata in file order.
    const auto &md = f->metadata();
    ASSERT_EQ(md.size(), w.kv_count());
    EXPECT_EQ(md[0].first, "general.architecture");
    EXPECT_EQ(md[1].first, "v.u8");
    EXPECT_EQ(md.back().first, "a.empty");

    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    EXPECT_EQ(f->find("v.u8")->type, GgufValueType::U8);
    EXPECT_EQ(f->get_uint("v.u8"), 200u);
    EXPECT_EQ(f->get_int("v.i8"), -100);
    EXPECT_EQ(f->get_uint("v.u16"), 60000u);
    EXPECT_EQ(f->get_int("v.i16"), -30000);
    EXPECT_EQ(f->get_uint("v.u32"), 4000000000u);
    EXPECT_EQ(f->get_int("v.i32"), -2000000000);
    EXPECT_EQ(f->get_uint("v.u64"), 0xfedcba9876543210ull);
    EXPECT_EQ(f->get_int("v.i64"), -0x123456789abcll);
    EXPECT_EQ(f->get_float("v.f32"), 1.5);
    EXPECT_EQ(f->get_float("v.f64"), -2.25e100);
    EXPECT_EQ(f->get_bool("v.bool"), true);
    EXPECT_EQ(f->get_string("v.string"), "hello, \xc3\xa9t\xc3\xa9");
    EXPECT_EQ(f->get_string("v.empty"), "");

    const std::vector<std::string> *strings = f->get_string_array("a.strings");
    ASSERT_NE(strings, nullptr);
    EXPECT_EQ(*strings, (std::vector<std::string>{"<s>", "", "abc", std::string("nul\0in", 6)}));
    EXPECT_EQ(*f->get_float_array("a.f32"), (std::vector<double>{0.5, -1.0, 3.25}));
    EXPECT_EQ(*f->get_float_array("a.f64"), (std::vector<double>{1e-300, 2.0}));
    EXPECT_EQ(*f->get_int_array("a.i32"), (std::vector<int64_t>{-1, 0, 2147483647}));
    EXPECT_EQ(*f->get_int_array("a.u32"), (std::vector<int64_t>{4294967295ll, 7}));
    EXPECT_EQ(*f->get_int_array("a.i64"), (std::vector<int64_t>{-9000000000ll}));
    EXPECT_EQ(*f->get_int_array("a.u8"), (std::vector<int64_t>{1, 255}));
    EXPECT_EQ(*f->get_int_array("a.bool"), (std::vector<int64_t>{1, 0, 1}));
    EXPECT_TRUE(f->get_int_array("a.empty")->empty());
    EXPECT_EQ(f->find("a.i32")->array_type, GgufValueType::I32);
    EXPECT_EQ(f->find("a.strings")->array_size(), 4u);

    // Tensors: shapes, types, sizes, data in place and equal to what was written.
    ASSERT_EQ(f->tensors().size(), tensor_specs().size());
    const uint8_t *begin = f->data();
    const uint8_t *end = begin + f->file_size();
    uint32_t seed = 1;
    for (size_t k = 0; k < tensor_specs().size(); ++k) {
        const TensorSpec &s = tensor_specs()[k];
        SCOPED_TRACE(s.name);
        const GgufTensor &t = f->tensors()[k];
        EXPECT_EQ(f->find_tensor(s.name), &t);
        EXPECT_EQ(t.name, s.name);
        EXPECT_EQ(t.dims, s.dims);
        EXPECT_EQ(t.type, s.type);
        const int64_t n = element_count(s.dims);
        EXPECT_EQ(t.n_elements, uint64_t(n));
        EXPECT_EQ(t.n_bytes, tensor_bytes_reference(s.type, n));
        EXPECT_EQ(t.row_length(), s.dims[0]);
        EXPECT_EQ(t.rows(), n / s.dims[0]);
        EXPECT_EQ(t.row_bytes() * size_t(t.rows()), t.n_bytes);
        EXPECT_EQ(t.offset % 32, 0u);
        EXPECT_EQ(t.data, begin + f->data_offset() + t.offset);
        EXPECT_GE(t.data, begin);
        EXPECT_LE(t.data + t.n_bytes, end);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 32, 0u);  // mmap is page-aligned

        std::vector<float> original = random_floats(size_t(n), seed++);
        std::vector<uint8_t> encoded = quantize_reference(s.type, original.data(), n);
        EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.n_bytes), encoded);
        std::vector<float> decoded = dequantize_reference(s.type, t.data, n);
        for (int64_t e = 0; e < n; ++e) {
            // 4-bit quantization of N(0,1) data: within about a quarter of the block range.
            EXPECT_NEAR(decoded[e], original[e], 0.5f) << "element " << e;
        }
    }
    EXPECT_EQ(f->find_tensor("missing"), nullptr);
    EXPECT_EQ(f->find("missing"), nullptr);
}

TEST(GgufReader, OpensVersion2Files) {
    GgufWriter w = small_writer();
    w.set_version(2);
    std::vector<uint8_t> buf = w.build();
    std::unique_ptr<GgufFile> f = GgufFile::from_memory(buf.data(), buf.size());
    EXPECT_EQ(f->version(), 2u);
    EXPECT_EQ(f->tensors().size(), 2u);
    EXPECT_EQ(f->get_uint("llama.block_count"), 2u);
}

TEST(GgufReader, FromMemoryReferencesTensorDataInPlace) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    std::unique_ptr<GgufFile> f = GgufFile::from_memory(buf.data(), buf.size());
    EXPECT_EQ(f->data(), buf.data());
    EXPECT_EQ(f->path(), "");
    ASSERT_EQ(f->tensors().size(), 2u);
    EXPECT_EQ(f->tensors()[0].data, buf.data() + lay.data_offset + lay.tensor_data_offset[0]);
    EXPECT_EQ(f->tensors()[1].data, buf.data() + lay.data_offset + lay.tensor_data_offset[1]);
}

TEST(GgufReader, HonoursACustomAlignment) {
    GgufWriter w = small_writer();
    w.set_alignment(256);
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = w.build(&lay);
    std::unique_ptr<GgufFile> f = GgufFile::from_memory(buf.data(), buf.size());
    EXPECT_EQ(f->alignment(), 256u);
    EXPECT_EQ(f->data_offset() % 256, 0u);
    EXPECT_EQ(f->data_offset(), lay.data_offset);
    for (const GgufTensor &t : f->tensors()) EXPECT_EQ(t.offset % 256, 0u) << t.name;
}

TEST(GgufReader, AcceptsAFileWithNoTensorsAndNoMetadata) {
    std::vector<uint8_t> buf = GgufWriter().build();
    std::unique_ptr<GgufFile> f = GgufFile::from_memory(buf.data(), buf.size());
    EXPECT_TRUE(f->metadata().empty());
    EXPECT_TRUE(f->tensors().empty());
}

TEST(GgufReader, TypedGettersConvertCompatibleTypesAndRejectOthers) {
    GgufWriter w;
    w.add_int32("neg", -5);
    w.add_int32("pos", 5);
    w.add_uint64("big", 0xffffffffffffffffull);
    w.add_string("str", "x");
    w.add_float32("flt", 0.25f);
    w.add_bool("flag", false);
    w.add_int32_array("ints", {1});
    std::vector<uint8_t> buf = w.build();
    std::unique_ptr<GgufFile> f = GgufFile::from_memory(buf.data(), buf.size());

    EXPECT_EQ(f->get_uint("pos"), 5u);
    EXPECT_EQ(f->get_float("pos"), 5.0);
    EXPECT_EQ(f->get_int("neg"), -5);
    EXPECT_EQ(f->get_float("flt"), 0.25);
    EXPECT_EQ(f->get_bool("flag"), false);
    EXPECT_EQ(f->get_uint("absent"), std::nullopt);
    EXPECT_EQ(f->get_string("absent"), std::nullopt);
    EXPECT_EQ(f->get_string_array("absent"), nullptr);
    EXPECT_EQ(f->get_float_array("absent"), nullptr);

    auto expect_type_error = [&](auto fn, const char *substr) {
        try {
            fn();
            ADD_FAILURE() << "expected an error mentioning " << substr;
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), LLMKV_ERR_MODEL_FORMAT);
            EXPECT_THAT(e.what(), HasSubstr(substr));
        }
    };
    expect_type_error([&] { f->get_uint("neg"); }, "metadata neg = -5 is negative");
    expect_type_error([&] { f->get_int("big"); }, "metadata big = 18446744073709551615");
    expect_type_error([&] { f->get_uint("str"); }, "metadata str has type string");
    expect_type_error([&] { f->get_string("pos"); }, "metadata pos has type i32, expected string");
    expect_type_error([&] { f->get_bool("pos"); }, "metadata pos has type i32, expected bool");
    expect_type_error([&] { f->get_float("str"); }, "metadata str has type string");
    expect_type_error([&] { f->get_uint("flt"); }, "metadata flt has type f32");
    expect_type_error([&] { f->get_string_array("ints"); }, "metadata ints has type array of i32");
    expect_type_error([&] { f->get_float_array("ints"); }, "array of i32, expected array of f32");
    expect_type_error([&] { f->get_int_array("str"); }, "metadata str has type string");
}

// ---- malformed header --------------------------------------------------------------------

TEST(GgufMalformed, FileShorterThanTheHeaderIsRejected) {
    std::vector<uint8_t> buf = small_writer().build();
    for (size_t n = 0; n < 24; ++n) {
        SCOPED_TRACE(n);
        EXPECT_GGUF_ERROR(std::vector<uint8_t>(buf.begin(), buf.begin() + n),
                          LLMKV_ERR_MODEL_FORMAT, "smaller than the GGUF header");
    }
    EXPECT_THROW(GgufFile::from_memory(nullptr, 0), Error);
}

TEST(GgufMalformed, BadMagicIsRejected) {
    std::vector<uint8_t> buf = small_writer().build();
    buf[3] = 'G';
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "bad magic: bytes 47 47 55 47");
}

TEST(GgufMalformed, Version1IsRejected) {
    std::vector<uint8_t> buf = small_writer().build();
    patch_u32(buf, GgufWriter::Layout::kVersionOffset, 1);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "version 1 is not supported");
}

TEST(GgufMalformed, UnknownVersionsAreRejected) {
    std::vector<uint8_t> buf = small_writer().build();
    patch_u32(buf, GgufWriter::Layout::kVersionOffset, 4);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "version 4 is not supported");
    patch_u32(buf, GgufWriter::Layout::kVersionOffset, 0);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "version 0 is not supported");
    patch_u32(buf, GgufWriter::Layout::kVersionOffset, 0x03000000u);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "big-endian");
}

TEST(GgufMalformed, TensorCountAboveTheCapIsRejected) {
    std::vector<uint8_t> buf = small_writer().build();
    patch_u64(buf, GgufWriter::Layout::kTensorCountOffset, (1ull << 20) + 1);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "tensor_count 1048577 exceeds the limit");
    patch_u64(buf, GgufWriter::Layout::kTensorCountOffset, ~0ull);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "tensor_count 18446744073709551615 exceeds");
}

TEST(GgufMalformed, KvCountAboveTheCapIsRejected) {
    std::vector<uint8_t> buf = small_writer().build();
    patch_u64(buf, GgufWriter::Layout::kKvCountOffset, 1ull << 40);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "kv_count 1099511627776 exceeds the limit");
}

TEST(GgufMalformed, CountsNeedingMoreBytesThanTheFileHasAreRejected) {
    std::vector<uint8_t> buf = small_writer().build();
    std::vector<uint8_t> kv = buf;
    patch_u64(kv, GgufWriter::Layout::kKvCountOffset, 100000);
    EXPECT_GGUF_ERROR(kv, LLMKV_ERR_MODEL_FORMAT, "kv_count 100000 needs at least 1300000 bytes");
    std::vector<uint8_t> tc = buf;
    patch_u64(tc, GgufWriter::Layout::kTensorCountOffset, 100000);
    EXPECT_GGUF_ERROR(tc, LLMKV_ERR_MODEL_FORMAT,
                      "tensor_count 100000 needs at least 3200000 bytes");
}

TEST(GgufMalformed, TensorCountLargerThanTheInfosPresentIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    patch_u64(buf, GgufWriter::Layout::kTensorCountOffset, 3);  // only two infos follow
    Failure f = parse_error(buf);
    EXPECT_EQ(f.status, LLMKV_ERR_MODEL_FORMAT) << f.message;
    EXPECT_THAT(f.message, HasSubstr("tensor 2"));
}

// ---- malformed metadata --------------------------------------------------------------------

TEST(GgufMalformed, KeyLengthAboveTheCapIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    patch_u64(buf, lay.kv_offset[1], 70000);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "kv 1: key length 70000 exceeds the limit");
}

TEST(GgufMalformed, KeyLengthPastTheEndOfTheFileIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    patch_u64(buf, lay.kv_offset[1], 60000);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "kv 1: key length 60000 exceeds the");
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "bytes remaining");
}

TEST(GgufMalformed, EmptyKeyIsRejected) {
    GgufWriter w;
    w.add_uint32("", 1);
    EXPECT_GGUF_ERROR(w.build(), LLMKV_ERR_MODEL_FORMAT, "kv 0: key is empty");
}

TEST(GgufMalformed, StringValueLengthPastTheEndIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    patch_u64(buf, lay.kv_value_offset[0], 1u << 20);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT,
                      "key general.architecture: string value length 1048576 exceeds the");
}

TEST(GgufMalformed, StringValueLengthAboveTheCapIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    patch_u64(buf, lay.kv_value_offset[0], (1ull << 30) + 1);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT,
                      "string value length 1073741825 exceeds the limit of 1073741824");
    patch_u64(buf, lay.kv_value_offset[0], ~0ull);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "string value length 18446744073709551615");
}

TEST(GgufMalformed, UnknownValueTypeIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    patch_u32(buf, lay.kv_type_offset[1], 13);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT,
                      "key llama.block_count: value type 13 is unknown");
}

TEST(GgufMalformed, UnknownArrayElementTypeIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    patch_u32(buf, lay.kv_value_offset[3], 99);  // tokenizer.ggml.token_type element type
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT,
                      "key tokenizer.ggml.token_type: array element type 99 is unknown");
}

TEST(GgufMalformed, NestedArraysAreRejected) {
    GgufWriter w;
    std::vector<uint8_t> payload = {9, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,  // array of 1 array
                                    4, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,  // of 1 u32
                                    7, 0, 0, 0};
    w.add_raw_kv("nested", 9, payload);
    EXPECT_GGUF_ERROR(w.build(), LLMKV_ERR_MODEL_FORMAT, "key nested: nested arrays");
}

TEST(GgufMalformed, ArrayLengthPastTheEndIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    patch_u64(buf, lay.kv_value_offset[3] + 4, 1u << 24);  // i32 elements: 64 MiB needed
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT,
                      "key tokenizer.ggml.token_type: array length 16777216 of i32 needs at "
                      "least 67108864 bytes");
}

TEST(GgufMalformed, ArrayLengthAboveTheCapIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    patch_u64(buf, lay.kv_value_offset[3] + 4, ~0ull);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT,
                      "array length 18446744073709551615 exceeds the limit of 1073741824");
}

TEST(GgufMalformed, StringArrayElementLengthPastTheEndIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    // tokens = {"a", "bb", "ccc"}: element 2's length field follows 12 bytes of header,
    // 9 bytes of "a", 10 bytes of "bb".
    size_t elem2 = lay.kv_value_offset[2] + 12 + 9 + 10;
    ASSERT_EQ(peek_u64(buf, elem2), 3u);
    patch_u64(buf, elem2, 1u << 20);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT,
                      "key tokenizer.ggml.tokens: string[2] length 1048576 exceeds the");
}

TEST(GgufMalformed, DuplicateKeysAreRejected) {
    GgufWriter w = small_writer();
    w.add_uint32("llama.block_count", 3);
    EXPECT_GGUF_ERROR(w.build(), LLMKV_ERR_MODEL_FORMAT,
                      "key llama.block_count: duplicate key (kv 1 and kv 4)");
}

TEST(GgufMalformed, AlignmentOfAnotherTypeIsRejected) {
    GgufWriter w = small_writer();
    w.add_uint64("general.alignment", 32);
    EXPECT_GGUF_ERROR(w.build(), LLMKV_ERR_MODEL_FORMAT,
                      "general.alignment has type u64, expected u32");
}

TEST(GgufMalformed, AlignmentThatIsNotAPowerOfTwoIsRejected) {
    for (uint32_t a : {0u, 48u, 96u}) {
        GgufWriter w = small_writer();
        w.add_uint32("general.alignment", a);
        EXPECT_GGUF_ERROR(w.build(), LLMKV_ERR_MODEL_FORMAT,
                          "general.alignment " + std::to_string(a) + " is not a power of two");
    }
}

TEST(GgufMalformed, AlignmentBelowEightIsRejected) {
    GgufWriter w = small_writer();
    w.add_uint32("general.alignment", 4);
    EXPECT_GGUF_ERROR(w.build(), LLMKV_ERR_MODEL_FORMAT,
                      "general.alignment 4 is not a multiple of 8");
}

TEST(GgufMalformed, AlignmentAboveTheCapIsRejected) {
    GgufWriter w = small_writer();
    w.add_uint32("general.alignment", 1u << 21);
    EXPECT_GGUF_ERROR(w.build(), LLMKV_ERR_MODEL_FORMAT,
                      "general.alignment 2097152 exceeds the limit of 1048576");
}

// ---- malformed tensor infos ------------------------------------------------------------------

TEST(GgufMalformed, TensorNameLengthPastTheEndIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    patch_u64(buf, lay.tensor_info_offset[1], 60000);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "tensor 1: name length 60000 exceeds the");
    patch_u64(buf, lay.tensor_info_offset[1], 1ull << 40);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "tensor 1: name length 1099511627776");
}

TEST(GgufMalformed, EmptyTensorNameIsRejected) {
    GgufWriter w;
    w.add_tensor_f32("", {4}, {1, 2, 3, 4});
    EXPECT_GGUF_ERROR(w.build(), LLMKV_ERR_MODEL_FORMAT, "tensor 0: name is empty");
}

TEST(GgufMalformed, DuplicateTensorNamesAreRejected) {
    GgufWriter w = small_writer();
    w.add_tensor_f32("first.weight", {4}, {1, 2, 3, 4});
    EXPECT_GGUF_ERROR(w.build(), LLMKV_ERR_MODEL_FORMAT,
                      "tensor first.weight: duplicate name (tensors 0 and 2)");
}

TEST(GgufMalformed, NDimsOutsideOneToFourIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    for (uint32_t n : {0u, 5u, 0xffffffffu}) {
        patch_u32(buf, lay.tensor_n_dims_offset[0], n);
        EXPECT_GGUF_ERROR(
            buf, LLMKV_ERR_MODEL_FORMAT,
            "tensor first.weight: n_dims " + std::to_string(n) + " out of range 1..4");
    }
}

TEST(GgufMalformed, DimensionOfZeroIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    patch_u64(buf, lay.tensor_dims_offset[0] + 8, 0);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT,
                      "tensor first.weight: dims[1] = 0 out of range 1..2^40");
}

TEST(GgufMalformed, DimensionAboveTwoToTheFortyIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    patch_u64(buf, lay.tensor_dims_offset[0], (1ull << 40) + 32);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT,
                      "tensor first.weight: dims[0] = 1099511627808 out of range");
}

TEST(GgufMalformed, ElementCountOverflowIsRejected) {
    GgufWriter w;
    w.add_tensor_raw("huge", {1ull << 40, 1ull << 40}, uint32_t(TensorType::F32), {});
    EXPECT_GGUF_ERROR(w.build(), LLMKV_ERR_MODEL_FORMAT,
                      "tensor huge: element count overflows 64 bits at dims[1]");
    GgufWriter w2;
    w2.add_tensor_raw("huge", {1ull << 40, 1ull << 23}, uint32_t(TensorType::F32), {});
    EXPECT_GGUF_ERROR(w2.build(), LLMKV_ERR_MODEL_FORMAT,
                      "tensor huge: element count 9223372036854775808 exceeds 2^63 - 1");
}

TEST(GgufMalformed, ByteSizeOverflowIsRejected) {
    GgufWriter w;
    w.add_tensor_raw("huge", {1ull << 40, 1ull << 22}, uint32_t(TensorType::F32), {});
    EXPECT_GGUF_ERROR(w.build(), LLMKV_ERR_MODEL_FORMAT,
                      "tensor huge: byte size of 4611686018427387904 F32 elements overflows");
}

TEST(GgufMalformed, UnknownTensorTypeIdIsAFormatError) {
    for (uint32_t id : {4u, 5u, 40u, 77u, 0xffffffffu}) {
        GgufWriter w;
        w.add_tensor_raw("x", {32}, id, std::vector<uint8_t>(128));
        EXPECT_GGUF_ERROR(w.build(), LLMKV_ERR_MODEL_FORMAT,
                          "tensor x: type id " + std::to_string(id) + " is unknown");
    }
}

TEST(GgufMalformed, KnownButUnsupportedTensorTypeIsUnsupported) {
    GgufWriter w;
    w.add_tensor_raw("blk.0.ffn_down.weight", {256}, 16, std::vector<uint8_t>(66));
    EXPECT_GGUF_ERROR(w.build(), LLMKV_ERR_UNSUPPORTED,
                      "tensor blk.0.ffn_down.weight: type IQ2_XXS (16) is not supported");
    for (uint32_t id = 0; id < kGgmlTypeIdLimit; ++id) {
        if (tensor_type_supported(id) || ggml_type_name(id) == nullptr) continue;
        GgufWriter wi;
        wi.add_tensor_raw("x", {256}, id, std::vector<uint8_t>(1024));
        EXPECT_GGUF_ERROR(wi.build(), LLMKV_ERR_UNSUPPORTED,
                          std::string("type ") + ggml_type_name(id) + " (" + std::to_string(id) +
                              ") is not supported");
    }
}

TEST(GgufMalformed, RowLengthNotAMultipleOfTheBlockSizeIsRejected) {
    GgufWriter w;
    w.add_tensor_raw("q", {48, 2}, uint32_t(TensorType::Q4_0), std::vector<uint8_t>(54));
    EXPECT_GGUF_ERROR(w.build(), LLMKV_ERR_MODEL_FORMAT,
                      "tensor q: dims[0] = 48 is not a multiple of the Q4_0 block size 32");
}

// The k-quants pack 256 elements per super-block: a row of 32 (a whole block for Q4_0) or of
// 320 is not a whole number of them, whatever the byte size says.
TEST(GgufMalformed, KQuantRowLengthNotAMultipleOf256IsRejected) {
    const TensorType kquants[] = {TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K,
                                  TensorType::Q5_K, TensorType::Q6_K};
    for (TensorType t : kquants) {
        for (int64_t row : {32, 128, 320}) {
            GgufWriter w;
            w.add_tensor_raw("k", {uint64_t(row), 2}, uint32_t(t),
                             std::vector<uint8_t>(tensor_type_block_bytes(t) * 4));
            EXPECT_GGUF_ERROR(w.build(), LLMKV_ERR_MODEL_FORMAT,
                              "tensor k: dims[0] = " + std::to_string(row) +
                                  " is not a multiple of the " + tensor_type_name(t) +
                                  " block size 256");
        }
    }
    for (TensorType t :
         {TensorType::Q5_0, TensorType::Q5_1, TensorType::IQ4_NL, TensorType::MXFP4}) {
        GgufWriter w;
        w.add_tensor_raw("q", {48, 2}, uint32_t(t), std::vector<uint8_t>(64));
        EXPECT_GGUF_ERROR(w.build(), LLMKV_ERR_MODEL_FORMAT,
                          std::string("tensor q: dims[0] = 48 is not a multiple of the ") +
                              tensor_type_name(t) + " block size 32");
    }
}

// The byte size follows from the block geometry; data shorter than that is caught, and a
// well-formed tensor of each new type reads back with the right sizes.
TEST(GgufMalformed, KQuantDataShorterThanItsBlocksIsRejected) {
    const TensorType types[] = {TensorType::Q5_0,  TensorType::Q5_1, TensorType::IQ4_NL,
                                TensorType::MXFP4, TensorType::Q2_K, TensorType::Q3_K,
                                TensorType::Q4_K,  TensorType::Q5_K, TensorType::Q6_K};
    for (TensorType t : types) {
        const uint64_t row = 512;
        const size_t bytes =
            size_t(row / uint64_t(tensor_type_block_elements(t))) * tensor_type_block_bytes(t);
        {
            GgufWriter w;
            w.add_tensor_raw("t", {row, 3}, uint32_t(t), std::vector<uint8_t>(bytes * 3, 0x11));
            const std::vector<uint8_t> buf = w.build();
            std::unique_ptr<GgufFile> f = GgufFile::from_memory(buf.data(), buf.size());
            const GgufTensor *ti = f->find_tensor("t");
            ASSERT_NE(ti, nullptr) << tensor_type_name(t);
            EXPECT_EQ(ti->type, t);
            EXPECT_EQ(ti->row_bytes(), bytes);
            EXPECT_EQ(ti->n_bytes, bytes * 3);
        }
        GgufWriter w;
        w.add_tensor_raw("t", {row, 3}, uint32_t(t), std::vector<uint8_t>(bytes * 3, 0x11));
        std::vector<uint8_t> buf = w.build();
        buf.resize(buf.size() - 1);  // the last byte of the tensor's data is missing
        EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "extends past the end of the file");
    }
}

TEST(GgufMalformed, MisalignedTensorOffsetIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    patch_u64(buf, lay.tensor_offset_offset[1], lay.tensor_data_offset[1] + 8);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT,
                      "tensor second.weight: offset " +
                          std::to_string(lay.tensor_data_offset[1] + 8) +
                          " is not a multiple of the alignment 32");
}

TEST(GgufMalformed, TensorOffsetPastTheEndIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    for (uint64_t off : {uint64_t(1) << 20, ~uint64_t(31)}) {
        patch_u64(buf, lay.tensor_offset_offset[0], off);
        EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT,
                          "tensor first.weight: offset " + std::to_string(off));
        EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "is past the end of the file");
    }
}

TEST(GgufMalformed, TensorDataExtendingPastTheEndIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    buf.resize(buf.size() - 1);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT,
                      "tensor second.weight: data of 32 bytes at offset " +
                          std::to_string(lay.tensor_data_offset[1]));
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT, "extends past the end of the file");
}

TEST(GgufMalformed, OverlappingTensorDataIsRejected) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = small_writer().build(&lay);
    patch_u64(buf, lay.tensor_offset_offset[1], lay.tensor_data_offset[0]);
    EXPECT_GGUF_ERROR(buf, LLMKV_ERR_MODEL_FORMAT,
                      "tensor first.weight: data [0, 68) overlaps tensor second.weight [0, 32)");
}

TEST(GgufMalformed, FileErrorsNameThePath) {
    std::vector<uint8_t> buf = small_writer().build();
    patch_u32(buf, GgufWriter::Layout::kVersionOffset, 9);
    const std::string path = temp_path("llmkv_gguf_bad_version.gguf");
    {
        std::FILE *f = std::fopen(path.c_str(), "wb");
        ASSERT_NE(f, nullptr);
        ASSERT_EQ(std::fwrite(buf.data(), 1, buf.size(), f), buf.size());
        std::fclose(f);
    }
    try {
        GgufFile::open(path);
        ADD_FAILURE() << "expected an error";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLMKV_ERR_MODEL_FORMAT);
        EXPECT_THAT(e.what(), HasSubstr(path + ": version 9 is not supported"));
    }
    std::filesystem::remove(path);
}

TEST(GgufMalformed, EmptyFileOnDiskIsAFormatError) {
    const std::string path = temp_path("llmkv_gguf_empty.gguf");
    std::FILE *f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
    try {
        GgufFile::open(path);
        ADD_FAILURE() << "expected an error";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLMKV_ERR_MODEL_FORMAT);
        EXPECT_THAT(e.what(), HasSubstr("file size 0 is smaller than the GGUF header"));
    }
    std::filesystem::remove(path);
}

// ---- IO errors ------------------------------------------------------------------------------

TEST(GgufIo, NonexistentPathIsAnIoError) {
    const std::string path = temp_path("llmkv_gguf_does_not_exist.gguf");
    try {
        GgufFile::open(path);
        ADD_FAILURE() << "expected an error";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLMKV_ERR_IO);
        EXPECT_THAT(e.what(), HasSubstr(path));
        EXPECT_THAT(e.what(), HasSubstr("No such file or directory"));
    }
}

TEST(GgufIo, DirectoryIsAnIoError) {
    try {
        GgufFile::open(::testing::TempDir());
        ADD_FAILURE() << "expected an error";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLMKV_ERR_IO);
        EXPECT_THAT(e.what(), HasSubstr("is not a regular file"));
    }
}

// ---- robustness ------------------------------------------------------------------------------

TEST(GgufRobustness, EveryTruncationIsAFormatError) {
    GgufWriter::Layout lay;
    std::vector<uint8_t> buf = full_writer().build(&lay);
    ASSERT_EQ(lay.data_end, buf.size());
    size_t checked = 0;
    for (size_t n = 0; n < buf.size(); n += (n < lay.data_offset + 64 ? 1 : 7)) {
        std::vector<uint8_t> cut(buf.begin(), buf.begin() + n);
        try {
            GgufFile::from_memory(cut.data(), cut.size());
            ADD_FAILURE() << "truncation to " << n << " bytes was accepted";
        } catch (const Error &e) {
            ASSERT_EQ(e.status(), LLMKV_ERR_MODEL_FORMAT) << "at " << n << ": " << e.what();
        }
        ++checked;
    }
    EXPECT_GT(checked, lay.data_offset);
}

TEST(GgufRobustness, RandomByteFlipsNeverCrash) {
    GgufWriter::Layout lay;
    const std::vector<uint8_t> buf = full_writer().build(&lay);
    std::mt19937 rng(12345);
    std::uniform_int_distribution<size_t> header_pos(0, lay.data_offset - 1);
    std::uniform_int_distribution<size_t> any_pos(0, buf.size() - 1);
    std::uniform_int_distribution<int> bit(0, 7);
    std::uniform_int_distribution<int> count(1, 4);
    int accepted = 0, rejected = 0;
    for (int iter = 0; iter < 4000; ++iter) {
        std::vector<uint8_t> mutated(buf);
        int flips = count(rng);
        for (int k = 0; k < flips; ++k) {
            size_t pos = (iter % 4 == 3) ? any_pos(rng) : header_pos(rng);
            if (iter % 8 == 1) {
                mutated[pos] = uint8_t(rng());  // whole-byte replacement
            } else {
                mutated[pos] ^= uint8_t(1u << bit(rng));
            }
        }
        try {
            std::unique_ptr<GgufFile> f = GgufFile::from_memory(mutated.data(), mutated.size());
            ++accepted;
            for (const GgufTensor &t : f->tensors()) {
                ASSERT_GE(t.data, mutated.data());
                ASSERT_LE(t.data + t.n_bytes, mutated.data() + mutated.size());
            }
        } catch (const Error &e) {
            ++rejected;
            ASSERT_TRUE(e.status() == LLMKV_ERR_MODEL_FORMAT || e.status() == LLMKV_ERR_UNSUPPORTED)
                << e.what();
        }
    }
    EXPECT_GT(rejected, 0);
    EXPECT_GT(accepted, 0);
}

// ---- reference quantizers --------------------------------------------------------------------

TEST(GgufQuantReference, QuantizersStayWithinHalfAStepOfTheInput) {
    std::vector<float> x = random_floats(256, 99, 3.0f);
    for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1}) {
        SCOPED_TRACE(tensor_type_name(t));
        std::vector<uint8_t> q = quantize_reference(t, x.data(), 256);
        ASSERT_EQ(q.size(), tensor_bytes_reference(t, 256));
        std::vector<float> y = dequantize_reference(t, q.data(), 256);
        for (int b = 0; b < 256 / 32; ++b) {
            float lo = x[b * 32], hi = x[b * 32], amax = 0;
            for (int j = 0; j < 32; ++j) {
                lo = std::min(lo, x[b * 32 + j]);
                hi = std::max(hi, x[b * 32 + j]);
                amax = std::max(amax, std::fabs(x[b * 32 + j]));
            }
            float step = t == TensorType::Q8_0   ? amax / 127
                         : t == TensorType::Q4_0 ? amax / 8
                                                 : (hi - lo) / 15;
            // Half a step (Q4_0: a whole step, as the side opposite the largest magnitude is
            // clipped at 7 * d), plus slack for d and m being stored as fp16.
            float tolerance = (t == TensorType::Q4_0 ? 1.0f : 0.5f) * step + 0.01f * amax;
            for (int j = 0; j < 32; ++j) {
                EXPECT_NEAR(y[b * 32 + j], x[b * 32 + j], tolerance) << "element " << b * 32 + j;
            }
        }
    }
}

TEST(GgufQuantReference, Q4NibbleLayoutPutsElementJInLowAndJPlus16InHighNibble) {
    std::vector<float> x(32, 0.0f);
    x[0] = -8.0f;  // largest magnitude: d = 1
    x[16] = 7.0f;
    x[3] = 2.0f;
    std::vector<uint8_t> q = quantize_reference(TensorType::Q4_0, x.data(), 32);
    BlockQ4_0 blk;
    std::memcpy(&blk, q.data(), sizeof(blk));
    EXPECT_EQ(fp16_to_fp32(blk.d), 1.0f);
    EXPECT_EQ(blk.qs[0], 0x00 | (15 << 4));  // x[0] = -8 -> 0, x[16] = 7 -> 15
    EXPECT_EQ(blk.qs[3], 10 | (8 << 4));     // x[3] = 2 -> 10, x[19] = 0 -> 8
    EXPECT_EQ(dequantize_reference(TensorType::Q4_0, q.data(), 32), x);
}

TEST(GgufQuantReference, AllZeroBlocksEncodeAndDecodeToZero) {
    std::vector<float> x(64, 0.0f);
    for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1, TensorType::F16,
                         TensorType::BF16, TensorType::F32}) {
        std::vector<uint8_t> q = quantize_reference(t, x.data(), 64);
        EXPECT_EQ(dequantize_reference(t, q.data(), 64), x) << tensor_type_name(t);
    }
    EXPECT_THROW(quantize_reference(TensorType::Q8_0, x.data(), 48), std::invalid_argument);
}

// ---- the real model ---------------------------------------------------------------------------

std::string real_model_path() {
    if (const char *env = std::getenv("LLMKV_MODEL"); env != nullptr && *env != '\0') return env;
    return LLMKV_TEST_FIXTURES_DIR "/../../models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(GgufRealModel, OpensTheModelFileQuicklyWithConsistentTensors) {
    const std::string path = real_model_path();
    if (!std::filesystem::exists(path)) {
        GTEST_SKIP() << "model file " << path << " not found (set LLMKV_MODEL to a GGUF file)";
    }
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<GgufFile> f = GgufFile::open(path);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RecordProperty("open_seconds", std::to_string(seconds));
    EXPECT_LT(seconds, 5.0) << "opening took " << seconds << " s";
    EXPECT_TRUE(f->version() == 2 || f->version() == 3);
    EXPECT_FALSE(f->tensors().empty());
    const uint8_t *end = f->data() + f->file_size();
    for (const GgufTensor &t : f->tensors()) {
        ASSERT_LE(t.data + t.n_bytes, end) << t.name;
        EXPECT_EQ(t.offset % f->alignment(), 0u) << t.name;
    }

    if (path.find("SmolLM2-135M-Instruct.Q4_1.gguf") == std::string::npos) return;
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->tensors().size(), 272u);
    EXPECT_EQ(f->metadata().size(), 33u);
    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    ASSERT_NE(f->get_string_array("tokenizer.ggml.tokens"), nullptr);
    EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens")->size(), 49152u);
    ASSERT_NE(f->get_string_array("tokenizer.ggml.merges"), nullptr);
    EXPECT_EQ(f->get_string_array("tokenizer.ggml.merges")->size(), 48900u);
    EXPECT_EQ(f->get_uint("llama.block_count"), 30u);
    EXPECT_EQ(f->get_uint("llama.embedding_length"), 576u);

    const GgufTensor *embd = f->find_tensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);
    EXPECT_EQ(embd->type, TensorType::Q8_0);
    EXPECT_EQ(embd->dims, (std::vector<int64_t>{576, 49152}));
    EXPECT_EQ(embd->row_bytes(), 576u / 32 * 34);
    const GgufTensor *norm = f->find_tensor("blk.0.attn_norm.weight");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->type, TensorType::F32);
    const GgufTensor *q = f->find_tensor("blk.0.attn_q.weight");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->type, TensorType::Q4_1);
    EXPECT_EQ(q->dims, (std::vector<int64_t>{576, 576}));
    std::printf("opened %s in %.3f s\n", path.c_str(), seconds);
}

}  // namespace
}  // namespace llmkv
