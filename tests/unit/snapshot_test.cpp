// Snapshot files (kv/snapshot.h): round trips, and that every corruption, truncation or
// mismatch with the engine's expectations is a typed error, never a crash or wrong data.
#include "kv/snapshot.h"

#include <flatbuffers/flatbuffers.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "platform/os.h"
#include "snapshot_generated.h"

namespace llmkv {
namespace {

class SnapshotTest : public ::testing::Test {
protected:
    void SetUp() override {
        static std::atomic<unsigned> counter{0};
        dir_ = ::testing::TempDir() + "llmkv_snapshot_" + std::to_string(os::process_id()) + "_" +
               std::to_string(counter.fetch_add(1));
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
        ASSERT_TRUE(std::filesystem::create_directory(dir_, ec)) << dir_ << ": " << ec.message();
    }
    void TearDown() override {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    std::string path(const std::string &name) const { return dir_ + "/" + name; }
    std::vector<std::string> dir_entries() const {
        std::vector<std::string> out;
        std::error_code ec;
        for (const auto &e : std::filesystem::directory_iterator(dir_, ec))
            out.push_back(e.path().filename().string());
        return out;
    }
    std::string dir_;
};

SnapshotMeta make_meta(uint32_t n_cached, uint64_t block_bytes, uint64_t tail_bytes,
                       uint32_t seed = 1) {
    SnapshotMeta m;
    m.model_fingerprint = "sha256:0123abcd";
    m.codec = snapshot_codec_string(3, 3, false, false);
    m.block_tokens = 16;
    m.n_layers = 2;
    m.n_kv_heads = 2;
    m.head_dim = 8;
    m.dtype_k = 3;
    m.dtype_v = 3;
    m.residual_tokens = 4;
    m.block_bytes = block_bytes;
    m.tail_bytes = tail_bytes;
    m.n_cached = n_cached;
    std::mt19937 rng(seed);
    for (uint32_t i = 0; i < n_cached + 3; ++i) m.tokens.push_back(int32_t(rng() % 32000));
    return m;
}

struct Payload {
    std::vector<std::vector<uint8_t>> blocks;
    std::vector<uint8_t> tail;
    std::vector<const uint8_t *> block_ptrs() const {
        std::vector<const uint8_t *> out;
        for (const auto &b : blocks) out.push_back(b.data());
        return out;
    }
};

Payload make_payload(const SnapshotMeta &m, uint32_t seed) {
    std::mt19937 rng(seed);
    Payload p;
    p.blocks.resize(m.sealed_blocks());
    for (auto &b : p.blocks) {
        b.resize(m.block_bytes);
        for (auto &x : b) x = uint8_t(rng());
    }
    p.tail.resize(m.tail_bytes);
    for (auto &x : p.tail) x = uint8_t(rng());
    return p;
}

void write_with(const std::string &p, const SnapshotMeta &m, const Payload &pl) {
    write_snapshot(p, m, pl.block_ptrs(), pl.tail.empty() ? nullptr : pl.tail.data());
}

std::vector<uint8_t> read_bytes(const std::string &p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)),
                                std::istreambuf_iterator<char>());
}

void write_bytes(const std::string &p, const std::vector<uint8_t> &bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char *>(bytes.data()), std::streamsize(bytes.size()));
}

// Reads and expects Error(status); returns its message.
std::string read_error(const std::string &p, const SnapshotMeta &expected, llmkv_status status) {
    try {
        (void)read_snapshot(p, expected);
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), status) << e.what();
        return e.what();
    }
    ADD_FAILURE() << "read_snapshot succeeded on " << p;
    return "";
}

void expect_same(const LoadedSnapshot &s, const SnapshotMeta &m, const Payload &pl) {
    const SnapshotMeta &r = s.meta();
    EXPECT_EQ(r.model_fingerprint, m.model_fingerprint);
    EXPECT_EQ(r.codec, m.codec);
    EXPECT_EQ(r.block_tokens, m.block_tokens);
    EXPECT_EQ(r.n_layers, m.n_layers);
    EXPECT_EQ(r.n_kv_heads, m.n_kv_heads);
    EXPECT_EQ(r.head_dim, m.head_dim);
    EXPECT_EQ(r.dtype_k, m.dtype_k);
    EXPECT_EQ(r.dtype_v, m.dtype_v);
    EXPECT_EQ(r.rotate_k, m.rotate_k);
    EXPECT_EQ(r.rotate_v, m.rotate_v);
    EXPECT_EQ(r.residual_tokens, m.residual_tokens);
    EXPECT_EQ(r.block_bytes, m.block_bytes);
    EXPECT_EQ(r.tail_bytes, m.tail_bytes);
    EXPECT_EQ(r.n_cached, m.n_cached);
    EXPECT_EQ(r.tokens, m.tokens);
    ASSERT_EQ(s.n_blocks(), pl.blocks.size());
    for (size_t i = 0; i < pl.blocks.size(); ++i)
        EXPECT_EQ(std::memcmp(s.block(i), pl.blocks[i].data(), m.block_bytes), 0) << "block " << i;
    if (m.tail_bytes == 0) {
        EXPECT_EQ(s.tail(), nullptr);
    } else {
        ASSERT_NE(s.tail(), nullptr);
        EXPECT_EQ(std::memcmp(s.tail(), pl.tail.data(), m.tail_bytes), 0);
    }
}

uint32_t le32(const std::vector<uint8_t> &b, size_t at) {
    return uint32_t(b[at]) | uint32_t(b[at + 1]) << 8 | uint32_t(b[at + 2]) << 16 |
           uint32_t(b[at + 3]) << 24;
}

// Paths are UTF-8 on every OS (Windows: converted for the wide file calls): a directory and
// a file named outside ASCII round-trip, and replacing such a file leaves no temp file.
TEST_F(SnapshotTest, Utf8PathsRoundTrip) {
    const auto u8 = [](const std::string &utf8) {
        return std::filesystem::path(std::u8string(utf8.begin(), utf8.end()));
    };
    const std::string dir =
        path("d\xc3\xa9j\xc3\xa0 vu \xe6\x97\xa5\xe6\x9c\xac");  // "déjà vu 日本"
    ASSERT_TRUE(std::filesystem::create_directory(u8(dir)));
    const std::string p = dir +
                          "/pr\xc3\xa9"
                          "fixe \xf0\x9f\x98\x80.snap";  // "préfixe 😀.snap"
    SnapshotMeta m = make_meta(37, 512 + 3, 777, 5);
    Payload pl = make_payload(m, 5);
    write_with(p, m, pl);
    write_with(p, m, pl);  // the atomic replace of an existing file
    LoadedSnapshot s = read_snapshot(p, m);
    expect_same(s, m, pl);
    size_t files = 0;
    for (const auto &e : std::filesystem::directory_iterator(u8(dir))) {
        EXPECT_EQ(e.path().filename(), u8("pr\xc3\xa9"
                                          "fixe \xf0\x9f\x98\x80.snap"));
        ++files;
    }
    EXPECT_EQ(files, 1u);
}

TEST_F(SnapshotTest, RoundTripReturnsIdenticalMetaAndBytes) {
    // n_cached: 0 and <= residual (no block), exactly one block, several blocks, a partial tail.
    const uint32_t cases[] = {0, 3, 4, 20, 21, 37, 4 + 16 * 5, 4 + 16 * 9 + 7};
    uint32_t seed = 10;
    for (uint32_t n_cached : cases) {
        for (uint64_t tail_bytes : {uint64_t(0), uint64_t(777)}) {
            SCOPED_TRACE(testing::Message() << "n_cached " << n_cached << " tail " << tail_bytes);
            SnapshotMeta m = make_meta(n_cached, 512 + 3, tail_bytes, seed);
            m.rotate_v = (seed & 1) != 0;
            m.codec = snapshot_codec_string(m.dtype_k, m.dtype_v, m.rotate_k, m.rotate_v);
            Payload pl = make_payload(m, seed++);
            const std::string p = path("rt.snap");
            write_with(p, m, pl);
            const auto bytes = read_bytes(p);
            ASSERT_GE(bytes.size(), 4096u);
            EXPECT_EQ(std::memcmp(bytes.data(), "LLMKVSNP", 8), 0);
            EXPECT_EQ(le32(bytes, 8), 1u);
            EXPECT_EQ(bytes.size(), 4096 + pl.blocks.size() * m.block_bytes + tail_bytes);
            LoadedSnapshot s = read_snapshot(p, m);
            expect_same(s, m, pl);
            LoadedSnapshot moved = std::move(s);  // pointers survive a move
            expect_same(moved, m, pl);
        }
    }
    EXPECT_EQ(dir_entries().size(), 1u);  // no temp file left behind
}

TEST_F(SnapshotTest, CodecStringNamesDtypesAndRotations) {
    EXPECT_EQ(snapshot_codec_string(3, 3, false, false), "k=int8 v=int8 rot_k=0 rot_v=0");
    EXPECT_EQ(snapshot_codec_string(4, 0, true, false), "k=int4 v=f16 rot_k=1 rot_v=0");
}

TEST_F(SnapshotTest, OverwriteReplacesTheFileAtomically) {
    SnapshotMeta m1 = make_meta(40, 64, 16, 1);
    SnapshotMeta m2 = make_meta(90, 64, 16, 2);
    Payload p1 = make_payload(m1, 1), p2 = make_payload(m2, 2);
    write_with(path("a.snap"), m1, p1);
    write_with(path("a.snap"), m2, p2);
    expect_same(read_snapshot(path("a.snap"), m2), m2, p2);
    EXPECT_EQ(dir_entries().size(), 1u);
}

TEST_F(SnapshotTest, TruncationAtAnyOffsetIsAFormatError) {
    SnapshotMeta m = make_meta(4 + 16 * 3 + 2, 300, 100);
    Payload pl = make_payload(m, 5);
    const std::string p = path("t.snap");
    write_with(p, m, pl);
    const auto full = read_bytes(p);
    ASSERT_EQ(full.size(), 4096u + 3 * 300 + 100);
    std::vector<size_t> lengths;
    for (size_t len = 0; len < 4096 + 64; ++len) lengths.push_back(len);
    for (size_t len = 4096 + 64; len < full.size(); len += 7) lengths.push_back(len);
    lengths.push_back(full.size() - 1);
    // Longest first: truncate(2) only ever shortens the file, never pads it with zeros.
    std::sort(lengths.rbegin(), lengths.rend());
    for (size_t len : lengths) {
        std::filesystem::resize_file(p, len);
        const std::string msg = read_error(p, m, LLMKV_ERR_SNAPSHOT_FORMAT);
        if (HasFailure()) FAIL() << "length " << len << ": " << msg;
    }
    write_bytes(p, full);
    std::filesystem::resize_file(p, 100);
    const std::string msg = read_error(p, m, LLMKV_ERR_SNAPSHOT_FORMAT);
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST_F(SnapshotTest, ExtraTrailingBytesAreAFormatError) {
    SnapshotMeta m = make_meta(40, 128, 50);
    Payload pl = make_payload(m, 6);
    const std::string p = path("x.snap");
    write_with(p, m, pl);
    auto bytes = read_bytes(p);
    bytes.push_back(0);
    write_bytes(p, bytes);
    EXPECT_NE(read_error(p, m, LLMKV_ERR_SNAPSHOT_FORMAT).find("trailing"), std::string::npos);
}

TEST_F(SnapshotTest, FlippedByteInPreambleMetadataOrPaddingIsAFormatError) {
    SnapshotMeta m = make_meta(40, 128, 50);
    Payload pl = make_payload(m, 7);
    const std::string p = path("f.snap");
    write_with(p, m, pl);
    const auto orig = read_bytes(p);
    for (size_t at = 0; at < 4096; ++at) {
        auto bytes = orig;
        bytes[at] ^= uint8_t(1u << (at % 8));
        write_bytes(p, bytes);
        const std::string msg = read_error(p, m, LLMKV_ERR_SNAPSHOT_FORMAT);
        if (HasFailure()) FAIL() << "offset " << at << ": " << msg;
    }
    auto bytes = orig;
    bytes[0] ^= 0xff;
    write_bytes(p, bytes);
    EXPECT_NE(read_error(p, m, LLMKV_ERR_SNAPSHOT_FORMAT).find("magic"), std::string::npos);
    bytes = orig;
    bytes[8] = 2;
    write_bytes(p, bytes);
    EXPECT_NE(read_error(p, m, LLMKV_ERR_SNAPSHOT_FORMAT).find("version"), std::string::npos);
    bytes = orig;
    bytes[40] ^= 0x10;  // inside the flatbuffer
    write_bytes(p, bytes);
    EXPECT_NE(read_error(p, m, LLMKV_ERR_SNAPSHOT_FORMAT).find("metadata checksum"),
              std::string::npos);
}

TEST_F(SnapshotTest, FlippedByteInEachBlockOrTailIsACaughtChecksumMismatch) {
    SnapshotMeta m = make_meta(4 + 16 * 4, 200, 90);
    Payload pl = make_payload(m, 8);
    const std::string p = path("b.snap");
    write_with(p, m, pl);
    const auto orig = read_bytes(p);
    for (size_t i = 0; i < 4; ++i) {
        for (size_t off : {size_t(0), size_t(77), size_t(199)}) {
            auto bytes = orig;
            bytes[4096 + i * 200 + off] ^= 0x01;
            write_bytes(p, bytes);
            const std::string msg = read_error(p, m, LLMKV_ERR_SNAPSHOT_FORMAT);
            EXPECT_NE(msg.find("block " + std::to_string(i) + " checksum mismatch"),
                      std::string::npos)
                << msg;
        }
    }
    for (size_t off : {size_t(0), size_t(45), size_t(89)}) {
        auto bytes = orig;
        bytes[4096 + 4 * 200 + off] ^= 0x80;
        write_bytes(p, bytes);
        EXPECT_NE(read_error(p, m, LLMKV_ERR_SNAPSHOT_FORMAT).find("tail checksum mismatch"),
                  std::string::npos);
    }
}

TEST_F(SnapshotTest, MismatchWithTheEngineIsAFormatErrorNamingTheField) {
    SnapshotMeta m = make_meta(60, 128, 50);
    Payload pl = make_payload(m, 9);
    const std::string p = path("m.snap");
    write_with(p, m, pl);
    struct Case {
        const char *what;
        std::function<void(SnapshotMeta &)> change;
    };
    const Case cases[] = {
        {"model fingerprint differs (file sha256:0123abcd, engine other)",
         [](SnapshotMeta &e) { e.model_fingerprint = "other"; }},
        {"codec differs",
         [](SnapshotMeta &e) { e.codec = snapshot_codec_string(4, 4, true, true); }},
        {"block_tokens differs", [](SnapshotMeta &e) { e.block_tokens = 32; }},
        {"n_layers differs", [](SnapshotMeta &e) { e.n_layers = 3; }},
        {"n_kv_heads differs", [](SnapshotMeta &e) { e.n_kv_heads = 4; }},
        {"head_dim differs", [](SnapshotMeta &e) { e.head_dim = 64; }},
        {"dtype_k differs", [](SnapshotMeta &e) { e.dtype_k = 4; }},
        {"dtype_v differs", [](SnapshotMeta &e) { e.dtype_v = 0; }},
        {"rotate_k differs", [](SnapshotMeta &e) { e.rotate_k = true; }},
        {"rotate_v differs", [](SnapshotMeta &e) { e.rotate_v = true; }},
        {"residual_tokens differs", [](SnapshotMeta &e) { e.residual_tokens = 0; }},
        {"block_bytes differs", [](SnapshotMeta &e) { e.block_bytes = 256; }},
        {"tail_bytes differs", [](SnapshotMeta &e) { e.tail_bytes = 0; }},
    };
    for (const Case &c : cases) {
        SnapshotMeta expected = m;
        c.change(expected);
        EXPECT_NE(read_error(p, expected, LLMKV_ERR_SNAPSHOT_FORMAT).find(c.what),
                  std::string::npos)
            << c.what;
    }
    // tokens and n_cached are the file's to say.
    SnapshotMeta expected = m;
    expected.tokens.clear();
    expected.n_cached = 0;
    expect_same(read_snapshot(p, expected), m, pl);
}

TEST_F(SnapshotTest, RandomByteFlipsYieldIdenticalContentOrAFormatError) {
    SnapshotMeta m = make_meta(4 + 16 * 2 + 5, 64, 40);
    Payload pl = make_payload(m, 11);
    const std::string p = path("r.snap");
    write_with(p, m, pl);
    const auto orig = read_bytes(p);
    std::mt19937 rng(1234);
    int ok = 0, rejected = 0;
    for (int iter = 0; iter < 3000; ++iter) {
        auto bytes = orig;
        const int n_flips = 1 + int(rng() % 3);
        for (int f = 0; f < n_flips; ++f) {
            // Half the flips land in the metadata, the rest anywhere.
            const size_t at = (rng() & 1) ? rng() % 512 : rng() % bytes.size();
            bytes[at] ^= uint8_t(1 + rng() % 255);
        }
        write_bytes(p, bytes);
        try {
            LoadedSnapshot s = read_snapshot(p, m);
            expect_same(s, m, pl);
            ++ok;
        } catch (const Error &e) {
            ASSERT_EQ(e.status(), LLMKV_ERR_SNAPSHOT_FORMAT) << e.what();
            ++rejected;
        }
        if (HasFailure()) FAIL() << "iteration " << iter;
    }
    EXPECT_GT(rejected, 2900);
    (void)ok;
}

// Builds a file whose metadata is valid flatbuffers with a correct metadata checksum, but
// whose fields say what `edit` makes them say: checks the field validation behind the checksum.
std::vector<uint8_t> craft(const SnapshotMeta &m, const Payload &pl,
                           const std::function<void(fb::SnapshotBuilder &)> &edit,
                           bool garbage_fb = false) {
    std::vector<uint64_t> sums;
    for (const auto &b : pl.blocks) sums.push_back(XXH3_64bits(b.data(), b.size()));
    flatbuffers::FlatBufferBuilder fbb;
    fbb.ForceDefaults(true);
    auto fp = fbb.CreateString(m.model_fingerprint);
    auto codec = fbb.CreateString(m.codec);
    auto tokens = fbb.CreateVector(m.tokens);
    auto vsums = fbb.CreateVector(sums);
    fb::SnapshotBuilder b(fbb);
    b.add_format_version(1);
    b.add_model_fingerprint(fp);
    b.add_codec(codec);
    b.add_block_tokens(m.block_tokens);
    b.add_n_layers(m.n_layers);
    b.add_n_kv_heads(m.n_kv_heads);
    b.add_head_dim(m.head_dim);
    b.add_dtype_k(m.dtype_k);
    b.add_dtype_v(m.dtype_v);
    b.add_rotate_k(m.rotate_k);
    b.add_rotate_v(m.rotate_v);
    b.add_residual_tokens(m.residual_tokens);
    b.add_block_bytes(m.block_bytes);
    b.add_tail_bytes(m.tail_bytes);
    b.add_n_cached(m.n_cached);
    b.add_n_blocks(uint32_t(pl.blocks.size()));
    b.add_tokens(tokens);
    b.add_payload_offset(4096);
    b.add_block_checksums(vsums);
    b.add_tail_checksum(XXH3_64bits(pl.tail.data(), pl.tail.size()));
    edit(b);  // later adds of a field win in the vtable
    fbb.Finish(b.Finish(), fb::SnapshotIdentifier());
    std::vector<uint8_t> fbytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
    if (garbage_fb) {
        fbytes[0] = 0xf0;  // root offset far outside the buffer
        fbytes[1] = 0xff;
    }
    std::vector<uint8_t> out(4096, 0);
    std::memcpy(out.data(), "LLMKVSNP", 8);
    out[8] = 1;
    const uint32_t len = uint32_t(fbytes.size());
    for (int i = 0; i < 4; ++i) out[12 + i] = uint8_t(len >> (8 * i));
    std::memcpy(out.data() + 16, fbytes.data(), len);
    const uint64_t sum = XXH3_64bits(out.data(), 16 + len);
    const size_t sum_at = 16 + (len + 7) / 8 * 8;
    for (int i = 0; i < 8; ++i) out[sum_at + i] = uint8_t(sum >> (8 * i));
    for (const auto &blk : pl.blocks) out.insert(out.end(), blk.begin(), blk.end());
    out.insert(out.end(), pl.tail.begin(), pl.tail.end());
    return out;
}

TEST_F(SnapshotTest, InconsistentFieldsBehindAValidChecksumAreAFormatError) {
    SnapshotMeta m = make_meta(4 + 16 * 2, 64, 40);
    Payload pl = make_payload(m, 12);
    const std::string p = path("c.snap");
    // The crafting itself produces a valid file.
    write_bytes(p, craft(m, pl, [](fb::SnapshotBuilder &) {}));
    expect_same(read_snapshot(p, m), m, pl);

    struct Case {
        const char *what;
        std::function<void(fb::SnapshotBuilder &)> edit;
        bool garbage = false;
    };
    const Case cases[] = {
        {"flatbuffer verification failed", [](fb::SnapshotBuilder &) {}, true},
        {"n_blocks 3", [](fb::SnapshotBuilder &b) { b.add_n_blocks(3); }},
        {"n_blocks 2, but n_cached 20 gives 1", [](fb::SnapshotBuilder &b) { b.add_n_cached(20); }},
        {"not 4096-aligned", [](fb::SnapshotBuilder &b) { b.add_payload_offset(4095); }},
        {"beyond file size",
         [](fb::SnapshotBuilder &b) { b.add_payload_offset(uint64_t(1) << 40); }},
        {"overlaps the metadata", [](fb::SnapshotBuilder &b) { b.add_payload_offset(0); }},
        {"block_tokens 0 out of range", [](fb::SnapshotBuilder &b) { b.add_block_tokens(0); }},
        {"block_tokens 2048 out of range",
         [](fb::SnapshotBuilder &b) { b.add_block_tokens(2048); }},
        {"dtype k=6", [](fb::SnapshotBuilder &b) { b.add_dtype_k(6); }},
        {"metadata format version 2", [](fb::SnapshotBuilder &b) { b.add_format_version(2); }},
        {"39 tokens stored for n_cached 100", [](fb::SnapshotBuilder &b) { b.add_n_cached(100); }},
        {"tail checksum mismatch", [](fb::SnapshotBuilder &b) { b.add_tail_checksum(1); }},
    };
    for (const Case &c : cases) {
        write_bytes(p, craft(m, pl, c.edit, c.garbage));
        const std::string msg = read_error(p, m, LLMKV_ERR_SNAPSHOT_FORMAT);
        EXPECT_NE(msg.find(c.what), std::string::npos) << c.what << " / " << msg;
    }
    // Sizes whose product overflows 64 bits are rejected, not wrapped.
    SnapshotMeta huge = m;
    huge.block_bytes = uint64_t(1) << 63;
    write_bytes(p, craft(huge, pl, [](fb::SnapshotBuilder &) {}));
    const std::string msg = read_error(p, huge, LLMKV_ERR_SNAPSHOT_FORMAT);
    EXPECT_NE(msg.find("overflow"), std::string::npos) << msg;
}

TEST_F(SnapshotTest, MissingFileIsAnIoError) {
    SnapshotMeta m = make_meta(40, 64, 8);
    read_error(path("absent.snap"), m, LLMKV_ERR_IO);
    read_error(dir_, m, LLMKV_ERR_IO);  // a directory is not a snapshot file
}

TEST_F(SnapshotTest, WriteToAnUnwritablePathIsAnIoErrorAndLeavesNothing) {
    SnapshotMeta m = make_meta(40, 64, 8);
    Payload pl = make_payload(m, 13);
    try {
        write_with(path("no/such/dir/x.snap"), m, pl);
        ADD_FAILURE() << "write succeeded";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLMKV_ERR_IO) << e.what();
    }
    // Renaming onto a directory fails after the data is written: the temp file is removed.
    ASSERT_TRUE(std::filesystem::create_directory(path("occupied")));
    try {
        write_with(path("occupied"), m, pl);
        ADD_FAILURE() << "write succeeded";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLMKV_ERR_IO) << e.what();
    }
    EXPECT_EQ(dir_entries(), std::vector<std::string>{"occupied"});
    std::filesystem::remove(path("occupied"));
}

TEST_F(SnapshotTest, InconsistentWriteArgumentsAreInvalidArgument) {
    SnapshotMeta m = make_meta(40, 64, 8);
    Payload pl = make_payload(m, 14);
    auto blocks = pl.block_ptrs();
    blocks.pop_back();
    try {
        write_snapshot(path("w.snap"), m, blocks, pl.tail.data());
        ADD_FAILURE() << "write succeeded";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLMKV_ERR_INVALID_ARGUMENT) << e.what();
    }
    try {
        write_snapshot(path("w.snap"), m, pl.block_ptrs(), nullptr);
        ADD_FAILURE() << "write succeeded";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLMKV_ERR_INVALID_ARGUMENT) << e.what();
    }
    EXPECT_TRUE(dir_entries().empty());
}

}  // namespace
}  // namespace llmkv
