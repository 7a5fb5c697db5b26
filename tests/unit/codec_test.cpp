// KV codecs: fp8 / int8 / int4 round trips within their analytic error bounds (outliers,
// zero rows, tiny / huge / non-finite inputs), Hadamard rotation, fp8 conversion, support
// checks, layout sizes, and the rotate-or-not error measurements on K-like data.
#include "kv/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "common/half.h"
#include "kv/hadamard.h"

namespace llmkv {
namespace {

// ---- data ---------------------------------------------------------------------------------

enum class Data { Normal, OutlierChannels, OutlierToken, ZeroRows, Tiny, Huge, NonFinite };

const char *data_name(Data d) {
    switch (d) {
        case Data::Normal:
            return "normal";
        case Data::OutlierChannels:
            return "outlier-channels";
        case Data::OutlierToken:
            return "outlier-token";
        case Data::ZeroRows:
            return "zero-rows";
        case Data::Tiny:
            return "tiny";
        case Data::Huge:
            return "huge";
        case Data::NonFinite:
            return "non-finite";
    }
    return "?";
}

// fp16 rows [B][D] of the given kind.
std::vector<uint16_t> make_rows(Data kind, uint32_t B, uint32_t D, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<uint16_t> rows(size_t(B) * D);
    for (uint32_t t = 0; t < B; ++t) {
        for (uint32_t d = 0; d < D; ++d) {
            float x = dist(rng);
            switch (kind) {
                case Data::OutlierChannels:  // like real K: a few channels large, with an offset
                    if (d % 16 == 3) x = 20.0f * x + 40.0f;
                    if (d == 7) x = -15.0f + 0.1f * x;
                    break;
                case Data::OutlierToken:
                    if (t == B / 2) x *= 300.0f;
                    break;
                case Data::ZeroRows:
                    if (t % 3 == 0) x = 0.0f;
                    break;
                case Data::Tiny:
                    x *= 1e-6f;
                    break;  // fp16 subnormals
                case Data::Huge:
                    x = std::clamp(x * 30000.0f, -65504.0f, 65504.0f);
                    break;
                default:
                    break;
            }
            rows[size_t(t) * D + d] = fp32_to_fp16(x);
        }
    }
    if (kind == Data::NonFinite) {
        rows[1] = 0x7C00;                  // +inf
        rows[D + 2] = 0xFC00;              // -inf
        rows[2 * size_t(D) + 3] = 0x7E00;  // nan
    }
    return rows;
}

// Source values as the codec sees them: f32, rotated when asked, sanitized.
std::vector<float> prepared(const std::vector<uint16_t> &rows, uint32_t B, uint32_t D,
                            bool rotate) {
    auto sanitize = [](float v) {
        return std::isnan(v) ? 0.0f : std::clamp(v, -65504.0f, 65504.0f);
    };
    std::vector<float> x(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) x[i] = sanitize(fp16_to_fp32(rows[i]));
    if (rotate) {
        for (uint32_t t = 0; t < B; ++t) hadamard_transform(x.data() + size_t(t) * D, D);
        for (auto &v : x) v = sanitize(v);
    }
    return x;
}

float fp16_at(const std::vector<uint8_t> &enc, size_t offset) {
    return load_fp16(enc.data() + offset);
}

// Per-element error bounds of an encoded head in its stored domain, and checks on the
// stored scales against their analytic values.
std::vector<float> error_bounds(llmkv_kv_dtype dtype, KvRole role, const std::vector<uint8_t> &enc,
                                const std::vector<float> &x, uint32_t B, uint32_t D) {
    std::vector<float> bound(x.size());
    const float f32_eps = 1.0f / (1 << 22);  // float rounding of the decode arithmetic
    if (dtype == LLMKV_KV_INT8 || dtype == LLMKV_KV_FP8_E4M3) {
        const float qmax = dtype == LLMKV_KV_INT8 ? 127.0f : 448.0f;
        for (uint32_t t = 0; t < B; ++t) {
            float amax = 0.0f;
            for (uint32_t d = 0; d < D; ++d) amax = std::max(amax, std::fabs(x[size_t(t) * D + d]));
            const float s = fp16_at(enc, size_t(B) * D + size_t(t) * 2);
            // scale = amax / qmax rounded up to fp16 (2^-24 is the smallest fp16 step)
            EXPECT_GE(s * qmax, amax * (1.0f - 1e-6f)) << "token " << t;
            EXPECT_LE(s, std::max(amax / qmax * (1.0f + 1.0f / 1024.0f), 5.97e-8f))
                << "token " << t;
            if (amax == 0.0f) {
                EXPECT_EQ(s, 0.0f);
            }
            for (uint32_t d = 0; d < D; ++d) {
                const float v = std::fabs(x[size_t(t) * D + d]);
                float b;
                if (dtype == LLMKV_KV_INT8) {
                    b = s / 2;  // half a step
                } else if (v >= s * 0.015625f) {
                    b = v * 0.0625f;  // normal e4m3: half an ulp of a 3-bit mantissa, 2^-4 relative
                } else {
                    b = s * 0.0009765625f;  // subnormal e4m3: half of 2^-9, times the scale
                }
                bound[size_t(t) * D + d] = b * (1.0f + 1e-5f) + v * f32_eps;
            }
        }
        return bound;
    }
    // int4: per-group (scale, min); the group is a channel over the block (K) or G channels
    // of a token (V).
    const size_t scales = size_t(B) * D / 2;
    const uint32_t G = int4_v_group(D), ng = D / G;
    const size_t mins = role == KvRole::K ? scales + size_t(2) * D : scales + size_t(2) * B * ng;
    auto check_group = [&](size_t param, const std::vector<size_t> &idx) {
        float lo = x[idx[0]], hi = x[idx[0]];
        for (size_t i : idx) {
            lo = std::min(lo, x[i]);
            hi = std::max(hi, x[i]);
        }
        const float s = fp16_at(enc, scales + param * 2), z = fp16_at(enc, mins + param * 2);
        EXPECT_LE(z, lo);
        EXPECT_GE(z + 15 * s, hi - std::fabs(hi) * 1e-6f);
        // step = (max - min) / 15, up to fp16 rounding of the min (down) and scale (up)
        const float ulp_min = std::max(std::fabs(lo) / 1024.0f, 5.97e-8f);
        EXPECT_LE(s * 15, (hi - lo + ulp_min) * (1.0f + 1.0f / 1024.0f) + 15 * 5.97e-8f);
        if (hi == lo && z == lo) {
            EXPECT_EQ(s, 0.0f);
        }
        for (size_t i : idx) bound[i] = s / 2 * (1.0f + 1e-5f) + (std::fabs(z) + 15 * s) * f32_eps;
    };
    std::vector<size_t> idx;
    if (role == KvRole::K) {
        for (uint32_t d = 0; d < D; ++d) {
            idx.clear();
            for (uint32_t t = 0; t < B; ++t) idx.push_back(size_t(t) * D + d);
            check_group(d, idx);
        }
    } else {
        for (uint32_t t = 0; t < B; ++t) {
            for (uint32_t g = 0; g < ng; ++g) {
                idx.clear();
                for (uint32_t i = 0; i < G; ++i) idx.push_back(size_t(t) * D + g * G + i);
                check_group(size_t(t) * ng + g, idx);
            }
        }
    }
    return bound;
}

// ---- round trips --------------------------------------------------------------------------

struct RoundTripCase {
    llmkv_kv_dtype dtype;
    KvRole role;
    uint32_t B, D;
};

class CodecRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(CodecRoundTrip, ErrorIsWithinTheAnalyticBound) {
    const RoundTripCase c = GetParam();
    const bool can_rotate = hadamard_supported(c.D);
    for (bool rotate : {false, true}) {
        if (rotate && !can_rotate) continue;
        const CodecSpec spec{c.dtype, rotate};
        ASSERT_TRUE(codec_supported(spec, c.role, c.B, c.D));
        for (Data kind : {Data::Normal, Data::OutlierChannels, Data::OutlierToken, Data::ZeroRows,
                          Data::Tiny, Data::Huge, Data::NonFinite}) {
            SCOPED_TRACE(testing::Message()
                         << codec_name(c.dtype) << (c.role == KvRole::K ? " K" : " V") << " D "
                         << c.D << " rotate " << rotate << " " << data_name(kind));
            const auto rows = make_rows(kind, c.B, c.D, 100 + uint32_t(kind));
            std::vector<uint8_t> enc(codec_head_bytes(c.dtype, c.role, c.B, c.D), 0xAB);
            codec_encode_head(spec, c.role, rows.data(), c.B, c.D, enc.data());

            // Stored domain: decoding without the rotation gives the quantized H x.
            const auto x = prepared(rows, c.B, c.D, rotate);
            const auto bound = error_bounds(c.dtype, c.role, enc, x, c.B, c.D);
            std::vector<float> stored(x.size()), dec(x.size());
            codec_decode_head(CodecSpec{c.dtype, false}, c.role, enc.data(), c.B, c.D,
                              stored.data());
            for (size_t i = 0; i < x.size(); ++i) {
                ASSERT_TRUE(std::isfinite(stored[i])) << i;
                ASSERT_LE(std::fabs(stored[i] - x[i]), bound[i])
                    << "element " << i << " x " << x[i];
            }
            // Decoding with the spec undoes the rotation; H is orthogonal, so each row's error
            // has the same L2 norm as in the stored domain.
            codec_decode_head(spec, c.role, enc.data(), c.B, c.D, dec.data());
            const auto x0 = prepared(rows, c.B, c.D, false);
            for (uint32_t t = 0; t < c.B; ++t) {
                double err2 = 0, bound2 = 0, norm2 = 0;
                for (uint32_t d = 0; d < c.D; ++d) {
                    const size_t i = size_t(t) * c.D + d;
                    ASSERT_TRUE(std::isfinite(dec[i]));
                    err2 += double(dec[i] - x0[i]) * (dec[i] - x0[i]);
                    bound2 += double(bound[i]) * bound[i];
                    norm2 += double(x0[i]) * x0[i];
                }
                if (!rotate || kind != Data::Huge) {  // huge rotated rows are clamped to fp16 range
                    ASSERT_LE(std::sqrt(err2), std::sqrt(bound2) * 1.0001 + 1e-6 * std::sqrt(norm2))
                        << "token " << t;
                }
            }
            if (kind == Data::ZeroRows && c.dtype != LLMKV_KV_INT4) {
                for (uint32_t t = 0; t < c.B; t += 3) {
                    for (uint32_t d = 0; d < c.D; ++d) ASSERT_EQ(dec[size_t(t) * c.D + d], 0.0f);
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Codecs, CodecRoundTrip,
                         ::testing::Values(RoundTripCase{LLMKV_KV_INT8, KvRole::K, 16, 64},
                                           RoundTripCase{LLMKV_KV_INT8, KvRole::V, 16, 128},
                                           RoundTripCase{LLMKV_KV_INT8, KvRole::K, 5, 20},
                                           RoundTripCase{LLMKV_KV_FP8_E4M3, KvRole::K, 16, 64},
                                           RoundTripCase{LLMKV_KV_FP8_E4M3, KvRole::V, 16, 32},
                                           RoundTripCase{LLMKV_KV_FP8_E4M3, KvRole::V, 3, 12},
                                           RoundTripCase{LLMKV_KV_INT4, KvRole::K, 16, 64},
                                           RoundTripCase{LLMKV_KV_INT4, KvRole::V, 16, 64},
                                           RoundTripCase{LLMKV_KV_INT4, KvRole::K, 7, 48},
                                           RoundTripCase{LLMKV_KV_INT4, KvRole::V, 8, 48},
                                           RoundTripCase{LLMKV_KV_INT4, KvRole::K, 32, 128},
                                           RoundTripCase{LLMKV_KV_INT4, KvRole::V, 16, 16}));

TEST(KvCodec, AllZeroBlocksDecodeToExactZeroInEveryCodec) {
    const uint32_t B = 16, D = 64;
    std::vector<uint16_t> zeros(size_t(B) * D, 0), neg_zeros(size_t(B) * D, 0x8000);
    for (auto dtype : {LLMKV_KV_F16, LLMKV_KV_BF16, LLMKV_KV_FP8_E4M3, LLMKV_KV_INT8, LLMKV_KV_INT4,
                       LLMKV_KV_INT4_COMPACT}) {
        for (KvRole role : {KvRole::K, KvRole::V}) {
            for (bool rotate : {false, true}) {
                const CodecSpec spec{dtype, rotate};
                if (!codec_supported(spec, role, B, D)) continue;
                for (const auto *src : {&zeros, &neg_zeros}) {
                    std::vector<uint8_t> enc(codec_head_bytes(dtype, role, B, D), 0xCD);
                    std::vector<float> dec(size_t(B) * D, 1.0f);
                    codec_encode_head(spec, role, src->data(), B, D, enc.data());
                    codec_decode_head(spec, role, enc.data(), B, D, dec.data());
                    for (float v : dec)
                        ASSERT_EQ(v, 0.0f) << codec_name(dtype) << " rotate " << rotate;
                }
            }
        }
    }
}

TEST(KvCodec, ConstantInt4GroupsAreExact) {
    const uint32_t B = 16, D = 64;
    std::vector<uint16_t> rows(size_t(B) * D, fp32_to_fp16(-2.5f));
    for (auto dtype : {LLMKV_KV_INT4, LLMKV_KV_INT4_COMPACT}) {
        for (KvRole role : {KvRole::K, KvRole::V}) {
            std::vector<uint8_t> enc(codec_head_bytes(dtype, role, B, D));
            std::vector<float> dec(rows.size());
            codec_encode_head(CodecSpec{dtype, false}, role, rows.data(), B, D, enc.data());
            codec_decode_head(CodecSpec{dtype, false}, role, enc.data(), B, D, dec.data());
            for (float v : dec) ASSERT_EQ(v, -2.5f) << codec_name(dtype);
        }
    }
}

// ---- compact int4 -----------------------------------------------------------------------------

// Groups of a compact int4 head in the stored domain: element indices per group (K: a
// channel over the tokens; V: G channels of a token).
std::vector<std::vector<size_t>> int4c_groups(KvRole role, uint32_t B, uint32_t D) {
    std::vector<std::vector<size_t>> groups;
    if (role == KvRole::K) {
        for (uint32_t d = 0; d < D; ++d) {
            groups.emplace_back();
            for (uint32_t t = 0; t < B; ++t) groups.back().push_back(size_t(t) * D + d);
        }
    } else {
        const uint32_t G = int4c_v_group(D);
        for (uint32_t t = 0; t < B; ++t) {
            for (uint32_t g = 0; g < D / G; ++g) {
                groups.emplace_back();
                for (uint32_t i = 0; i < G; ++i) groups.back().push_back(size_t(t) * D + g * G + i);
            }
        }
    }
    return groups;
}

// Every group's squared error is at most that of the covering choice (min one zstep below
// the group's smallest value at worst, scale one sstep above the covering one), whose
// elements are each within half a step; the stored steps are the analytic ones.
TEST(KvCodecInt4c, GroupErrorIsWithinTheCoveringBound) {
    struct Shape {
        KvRole role;
        uint32_t B, D;
    };
    for (Shape c : {Shape{KvRole::K, 16, 64}, Shape{KvRole::V, 16, 64}, Shape{KvRole::K, 7, 48},
                    Shape{KvRole::V, 8, 48}, Shape{KvRole::K, 32, 128}, Shape{KvRole::V, 16, 96},
                    Shape{KvRole::V, 16, 16}}) {
        for (bool rotate : {false, true}) {
            if (rotate && !hadamard_supported(c.D)) continue;
            const CodecSpec spec{LLMKV_KV_INT4_COMPACT, rotate};
            ASSERT_TRUE(codec_supported(spec, c.role, c.B, c.D));
            for (Data kind : {Data::Normal, Data::OutlierChannels, Data::OutlierToken,
                              Data::ZeroRows, Data::Tiny, Data::Huge, Data::NonFinite}) {
                SCOPED_TRACE(testing::Message()
                             << (c.role == KvRole::K ? "K" : "V") << " B " << c.B << " D " << c.D
                             << " rotate " << rotate << " " << data_name(kind));
                const auto rows = make_rows(kind, c.B, c.D, 300 + uint32_t(kind));
                std::vector<uint8_t> enc(codec_head_bytes(LLMKV_KV_INT4_COMPACT, c.role, c.B, c.D),
                                         0xAB);
                codec_encode_head(spec, c.role, rows.data(), c.B, c.D, enc.data());
                const auto x = prepared(rows, c.B, c.D, rotate);
                std::vector<float> stored(x.size());
                codec_decode_head(CodecSpec{LLMKV_KV_INT4_COMPACT, false}, c.role, enc.data(), c.B,
                                  c.D, stored.data());
                const size_t h = size_t(c.B) * c.D / 2;
                const float zstep = fp16_at(enc, h + 2), sstep = fp16_at(enc, h + 4);
                const float kmax = c.role == KvRole::K ? 63.0f : 15.0f;
                const auto groups = int4c_groups(c.role, c.B, c.D);
                std::vector<float> lo(groups.size()), hi(groups.size());
                float min_lo = INFINITY, max_lo = -INFINITY, max_range = 0.0f;
                for (size_t g = 0; g < groups.size(); ++g) {
                    lo[g] = hi[g] = x[groups[g][0]];
                    for (size_t i : groups[g]) {
                        lo[g] = std::min(lo[g], x[i]);
                        hi[g] = std::max(hi[g], x[i]);
                    }
                    min_lo = std::min(min_lo, lo[g]);
                    max_lo = std::max(max_lo, lo[g]);
                    max_range = std::max(max_range, hi[g] - lo[g]);
                }
                const float tiny = 6e-8f, rel = 1.0f + 1.0f / 512.0f;
                EXPECT_LE(fp16_at(enc, h), min_lo);
                EXPECT_LE(zstep,
                          ((max_lo - min_lo) / kmax + std::fabs(min_lo) / 1024.0f) * rel + tiny);
                EXPECT_LE(sstep, ((max_range + zstep) / 15.0f / kmax) * rel + tiny);
                for (size_t g = 0; g < groups.size(); ++g) {
                    double err2 = 0.0;
                    for (size_t i : groups[g]) {
                        ASSERT_TRUE(std::isfinite(stored[i])) << i;
                        err2 += double(stored[i] - x[i]) * (stored[i] - x[i]);
                    }
                    const double step = (hi[g] - lo[g] + zstep) / 15.0 + sstep;
                    const double mag = std::fabs(lo[g]) + std::fabs(hi[g]) + zstep * kmax;
                    const double bound = double(groups[g].size()) *
                                         std::pow(step / 2 * (1 + 1e-5) + mag * 2.4e-7, 2);
                    ASSERT_LE(err2, bound)
                        << "group " << g << " [" << lo[g] << ", " << hi[g] << "]";
                }
            }
        }
    }
}

// The bit layout: indices read back from hand-set bytes.
TEST(KvCodecInt4c, ParamsFollowTheDocumentedBitLayout) {
    const uint32_t B = 4, D = 16;
    std::vector<uint8_t> k(codec_head_bytes(LLMKV_KV_INT4_COMPACT, KvRole::K, B, D), 0);
    ASSERT_EQ(k.size(), size_t(B) * D / 2 + 6 + D + D / 2);
    const size_t h = size_t(B) * D / 2;
    const uint16_t z0 = fp32_to_fp16(-2.0f), zs = fp32_to_fp16(0.25f), ss = fp32_to_fp16(0.5f);
    std::memcpy(&k[h], &z0, 2);
    std::memcpy(&k[h + 2], &zs, 2);
    std::memcpy(&k[h + 4], &ss, 2);
    // channel 0: k = 0b100101 (37), j = 0b011010 (26); channel 1: k = 63, j = 1.
    k[h + 6 + 0] = uint8_t((37 & 15) | ((26 & 15) << 4));
    k[h + 6 + 1] = uint8_t(15 | (1 << 4));
    k[h + 6 + D] = uint8_t(((37 >> 4) | ((26 >> 4) << 2)) | (((63 >> 4) | ((1 >> 4) << 2)) << 4));
    std::vector<float> s(D), z(D);
    int4_k_params(LLMKV_KV_INT4_COMPACT, k.data(), B, D, s.data(), z.data());
    EXPECT_EQ(z[0], -2.0f + 37 * 0.25f);
    EXPECT_EQ(s[0], 26 * 0.5f);
    EXPECT_EQ(z[1], -2.0f + 63 * 0.25f);
    EXPECT_EQ(s[1], 0.5f);
    EXPECT_EQ(z[2], -2.0f);
    EXPECT_EQ(s[2], 0.0f);

    std::vector<uint8_t> v(codec_head_bytes(LLMKV_KV_INT4_COMPACT, KvRole::V, B, D), 0);
    ASSERT_EQ(v.size(), size_t(B) * D / 2 + 6 + B);  // D = 16: one group per token
    std::memcpy(&v[h], &z0, 2);
    std::memcpy(&v[h + 2], &zs, 2);
    std::memcpy(&v[h + 4], &ss, 2);
    v[h + 6 + 2] = uint8_t(9 | (14 << 4));  // token 2: k = 9, j = 14
    std::vector<float> vs(B), vz(B);
    int4_v_params(LLMKV_KV_INT4_COMPACT, v.data(), B, D, vs.data(), vz.data());
    EXPECT_EQ(vz[2], -2.0f + 9 * 0.25f);
    EXPECT_EQ(vs[2], 14 * 0.5f);
    EXPECT_EQ(vz[0], -2.0f);
    EXPECT_EQ(vs[0], 0.0f);
    // A decoded value is min + scale * nibble.
    v[size_t(2) * D / 2] = 0x30;  // token 2: channel 0 nibble 0, channel 1 nibble 3
    std::vector<float> dec(size_t(B) * D);
    codec_decode_head(CodecSpec{LLMKV_KV_INT4_COMPACT, false}, KvRole::V, v.data(), B, D,
                      dec.data());
    EXPECT_EQ(dec[size_t(2) * D + 0], vz[2]);
    EXPECT_EQ(dec[size_t(2) * D + 1], vz[2] + 3 * vs[2]);
}

// Sizes: SmolLM2's geometry (30 layers, 3 KV heads, head_dim 64, 16-token blocks) costs
// 6,457.5 bytes per token (int4: 7,920), at most the 6,480 (4.5 bits per value) aimed for.
TEST(KvCodecInt4c, BytesPerTokenOfTheSmolLM2Geometry) {
    EXPECT_EQ(codec_head_bytes(LLMKV_KV_INT4_COMPACT, KvRole::K, 16, 64), 512u + 6 + 96);
    EXPECT_EQ(codec_head_bytes(LLMKV_KV_INT4_COMPACT, KvRole::V, 16, 64), 512u + 6 + 16);
    EXPECT_EQ(codec_head_bytes(LLMKV_KV_INT4_COMPACT, KvRole::V, 16, 96),
              768u + 6 + 16 * 3);  // G = 32
    EXPECT_EQ(codec_head_bytes(LLMKV_KV_INT4_COMPACT, KvRole::V, 16, 48),
              384u + 6 + 16 * 3);  // G = 16
    KvGeometry g;
    g.n_layers = 30;
    g.n_kv_heads = 3;
    g.head_dim = 64;
    g.dtype_k = g.dtype_v = LLMKV_KV_INT4_COMPACT;
    EXPECT_EQ(g.sealed_bytes_per_token(), 6457.5);
    g.dtype_k = g.dtype_v = LLMKV_KV_INT4;
    EXPECT_EQ(g.sealed_bytes_per_token(), 7920.0);
}

// ---- fp8 e4m3 -------------------------------------------------------------------------------

// The nearest e4m3fn value by exhaustive search (ties to the even code), saturating.
uint8_t fp8_nearest(float x) {
    if (std::isnan(x)) return 0;
    const float a = std::min(std::fabs(x), 448.0f);
    int best = 0;
    for (int c = 1; c <= 0x7E; ++c) {
        const float dc = std::fabs(fp8_e4m3_to_fp32(uint8_t(c)) - a),
                    db = std::fabs(fp8_e4m3_to_fp32(uint8_t(best)) - a);
        if (dc < db || (dc == db && (c & 1) == 0)) best = c;
    }
    return uint8_t(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(Fp8E4m3, ConversionRoundsToNearestEvenAndSaturates) {
    EXPECT_EQ(fp32_to_fp8_e4m3(1.0f), 0x38);
    EXPECT_EQ(fp32_to_fp8_e4m3(448.0f), 0x7E);
    EXPECT_EQ(fp32_to_fp8_e4m3(-448.0f), 0xFE);
    EXPECT_EQ(fp32_to_fp8_e4m3(470.0f), 0x7E);  // would round to 480: saturates
    EXPECT_EQ(fp32_to_fp8_e4m3(1e30f), 0x7E);
    EXPECT_EQ(fp32_to_fp8_e4m3(-INFINITY), 0xFE);
    EXPECT_EQ(fp32_to_fp8_e4m3(NAN), 0x00);
    EXPECT_EQ(fp32_to_fp8_e4m3(0x1p-9f), 0x01);    // smallest subnormal
    EXPECT_EQ(fp32_to_fp8_e4m3(0x1p-10f), 0x00);   // half of it: ties to even (0)
    EXPECT_EQ(fp32_to_fp8_e4m3(0x1.8p-9f), 0x02);  // 1.5 units: ties to even (2)
    EXPECT_EQ(fp32_to_fp8_e4m3(1.0625f), 0x38);    // tie between 1 and 1.125: even
    EXPECT_EQ(fp32_to_fp8_e4m3(1.1875f), 0x3A);    // tie between 1.125 and 1.25: even
    EXPECT_EQ(fp32_to_fp8_e4m3(0x1.fp-7f), 0x08);  // rounds up into the smallest normal
    EXPECT_EQ(fp8_e4m3_to_fp32(0x7E), 448.0f);
    EXPECT_EQ(fp8_e4m3_to_fp32(0x01), 0x1p-9f);
    EXPECT_EQ(fp8_e4m3_to_fp32(0x80), 0.0f);
    EXPECT_TRUE(std::signbit(fp8_e4m3_to_fp32(0x80)));
    for (int c = 0; c < 256; ++c) {  // every non-NaN code round-trips; the table agrees
        if ((c & 0x7F) == 0x7F) continue;
        const float v = fp8_e4m3_to_fp32(uint8_t(c));
        ASSERT_EQ(fp32_to_fp8_e4m3(v), uint8_t(c)) << c;
        ASSERT_EQ(fp8_e4m3_table()[c], v);
    }
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
    std::uniform_int_distribution<int> ex(-12, 9);
    for (int i = 0; i < 20000; ++i) {
        const float x = std::ldexp(mant(rng), ex(rng));
        ASSERT_EQ(fp32_to_fp8_e4m3(x), fp8_nearest(x)) << x;
    }
}

// ---- Hadamard ---------------------------------------------------------------------------------

TEST(Hadamard, IsOrthonormalSymmetricAndItsOwnInverse) {
    EXPECT_FALSE(hadamard_supported(0));
    EXPECT_FALSE(hadamard_supported(48));
    EXPECT_TRUE(hadamard_supported(1));
    for (uint32_t n : {1u, 2u, 4u, 8u, 16u, 32u, 64u, 128u, 256u}) {
        ASSERT_TRUE(hadamard_supported(n));
        std::vector<float> H(size_t(n) * n, 0.0f);  // column j = H e_j
        for (uint32_t j = 0; j < n; ++j) {
            std::vector<float> e(n, 0.0f);
            e[j] = 1.0f;
            hadamard_transform(e.data(), n);
            for (uint32_t i = 0; i < n; ++i) H[size_t(i) * n + j] = e[i];
        }
        for (uint32_t i = 0; i < n; ++i) {
            for (uint32_t j = 0; j < n; ++j) {
                double dot = 0;
                for (uint32_t k = 0; k < n; ++k)
                    dot += double(H[size_t(i) * n + k]) * H[size_t(j) * n + k];
                ASSERT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-6)
                    << "n " << n << " (" << i << ", " << j << ")";
                ASSERT_EQ(H[size_t(i) * n + j], H[size_t(j) * n + i]);
                ASSERT_NEAR(std::fabs(H[size_t(i) * n + j]), 1.0 / std::sqrt(double(n)), 1e-7);
            }
        }
        std::mt19937 rng(n);
        std::normal_distribution<float> dist(0.0f, 4.0f);
        std::vector<float> x(n), y(n);
        for (auto &v : x) v = dist(rng);
        y = x;
        hadamard_transform(y.data(), n);
        hadamard_transform(y.data(), n);
        for (uint32_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], x[i], 1e-5f * (1.0f + std::fabs(x[i])));
    }
}

// ---- support and sizes --------------------------------------------------------------------------

TEST(KvCodec, SupportChecks) {
    const auto all = {LLMKV_KV_F16,  LLMKV_KV_BF16, LLMKV_KV_FP8_E4M3,
                      LLMKV_KV_INT8, LLMKV_KV_INT4, LLMKV_KV_INT4_COMPACT};
    for (auto dtype : all) {
        for (KvRole role : {KvRole::K, KvRole::V}) {
            EXPECT_TRUE(codec_supported(CodecSpec{dtype, false}, role, 16, 64))
                << codec_name(dtype);
            EXPECT_FALSE(codec_supported(CodecSpec{dtype, false}, role, 16, 0));
            EXPECT_FALSE(codec_supported(CodecSpec{dtype, false}, role, 0, 64));
            const bool quant = dtype != LLMKV_KV_F16 && dtype != LLMKV_KV_BF16;
            EXPECT_EQ(codec_supported(CodecSpec{dtype, true}, role, 16, 64), quant)
                << codec_name(dtype);
            EXPECT_FALSE(
                codec_supported(CodecSpec{dtype, true}, role, 16, 48));  // not a power of two
        }
    }
    for (auto bad : {llmkv_kv_dtype(6), llmkv_kv_dtype(7)}) {
        EXPECT_FALSE(codec_supported(CodecSpec{bad, false}, KvRole::K, 16, 64));
        EXPECT_FALSE(codec_supported(bad, 64));
        EXPECT_STREQ(codec_name(bad), "unknown");
    }
    // int4 groups need D % 16 == 0; fp8 / int8 take any D (portable kernels past D % 8).
    EXPECT_FALSE(codec_supported(CodecSpec{LLMKV_KV_INT4, false}, KvRole::V, 16, 24));
    EXPECT_FALSE(codec_supported(CodecSpec{LLMKV_KV_INT4, false}, KvRole::K, 16, 40));
    EXPECT_TRUE(codec_supported(CodecSpec{LLMKV_KV_INT4, false}, KvRole::V, 16, 48));
    EXPECT_TRUE(codec_supported(CodecSpec{LLMKV_KV_INT4, false}, KvRole::K, 15, 48));
    EXPECT_TRUE(codec_supported(CodecSpec{LLMKV_KV_INT8, false}, KvRole::K, 16, 20));
    EXPECT_TRUE(codec_supported(CodecSpec{LLMKV_KV_FP8_E4M3, false}, KvRole::V, 3, 7));
    // The role-less form cannot encode int4 (the layout depends on the role).
    EXPECT_FALSE(codec_supported(LLMKV_KV_INT4, 64));
    EXPECT_TRUE(codec_supported(LLMKV_KV_INT8, 64));
    std::vector<uint16_t> rows(16 * 64, 0);
    std::vector<uint8_t> enc(codec_head_bytes(LLMKV_KV_INT4, 16, 64));
    EXPECT_ANY_THROW(codec_encode_head(LLMKV_KV_INT4, rows.data(), 16, 64, enc.data()));
    EXPECT_ANY_THROW(codec_encode_head(CodecSpec{LLMKV_KV_INT4, true}, KvRole::K, rows.data(), 16,
                                       48, enc.data()));
}

TEST(KvCodec, HeadBytesIncludeScalesAndMatchTheLayouts) {
    // B = 16, D = 64: f16 2048; fp8 / int8 1024 + 16 fp16 scales; int4 K 512 + 64 (scale, min);
    // int4 V 512 + 16 tokens x 2 groups x (scale, min).
    EXPECT_EQ(codec_head_bytes(LLMKV_KV_F16, KvRole::K, 16, 64), 2048u);
    EXPECT_EQ(codec_head_bytes(LLMKV_KV_BF16, KvRole::V, 16, 64), 2048u);
    EXPECT_EQ(codec_head_bytes(LLMKV_KV_FP8_E4M3, KvRole::K, 16, 64), 1056u);
    EXPECT_EQ(codec_head_bytes(LLMKV_KV_INT8, KvRole::V, 16, 64), 1056u);
    EXPECT_EQ(codec_head_bytes(LLMKV_KV_INT4, KvRole::K, 16, 64), 768u);
    EXPECT_EQ(codec_head_bytes(LLMKV_KV_INT4, KvRole::V, 16, 64), 640u);
    EXPECT_EQ(codec_head_bytes(LLMKV_KV_INT4, KvRole::V, 16, 48),
              16u * 24 + 16u * 3 * 4);                         // G = 16
    EXPECT_EQ(codec_head_bytes(LLMKV_KV_INT4, 16, 64), 768u);  // role-less: fits either
    EXPECT_EQ(int4_v_group(64), 32u);
    EXPECT_EQ(int4_v_group(48), 16u);
}

TEST(KvCodec, EncodeDependsOnlyOnTheInputAndWritesEveryByte) {
    const uint32_t B = 16, D = 64;
    const auto rows = make_rows(Data::OutlierChannels, B, D, 9);
    for (auto dtype : {LLMKV_KV_FP8_E4M3, LLMKV_KV_INT8, LLMKV_KV_INT4, LLMKV_KV_INT4_COMPACT}) {
        for (KvRole role : {KvRole::K, KvRole::V}) {
            for (bool rotate : {false, true}) {
                const size_t n = codec_head_bytes(dtype, role, B, D);
                std::vector<uint8_t> a(n + 8, 0x00), b(n + 8, 0xFF);
                codec_encode_head(CodecSpec{dtype, rotate}, role, rows.data(), B, D, a.data());
                codec_encode_head(CodecSpec{dtype, rotate}, role, rows.data(), B, D, b.data());
                for (size_t i = 0; i < n; ++i)
                    ASSERT_EQ(a[i], b[i]) << codec_name(dtype) << " byte " << i;
                for (size_t i = n; i < n + 8; ++i) ASSERT_EQ(b[i], 0xFF) << "wrote past the head";
            }
        }
    }
}

// ---- int4: rotate or not, on K-like data
// ----------------------------------------------------------

// Relative L2 error of the decoded K and of attention scores q.k over K with outlier
// channels; prints the numbers that choose the int4 rotation default.
TEST(KvCodec, Int4RotationMeasurementOnOutlierChannelData) {
    const uint32_t B = 16, D = 64, n_blocks = 64;
    std::mt19937 rng(21);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    struct Result {
        double k_err = 0, k_norm = 0, s_err = 0, s_norm = 0, v_err = 0, v_norm = 0;
    } res[2][2];  // [kind: 0 K-like, 1 plain normal][rotate]
    for (int kind = 0; kind < 2; ++kind) {
        for (uint32_t blk = 0; blk < n_blocks; ++blk) {
            std::vector<uint16_t> rows(size_t(B) * D);
            for (uint32_t t = 0; t < B; ++t) {
                for (uint32_t d = 0; d < D; ++d) {
                    float x = dist(rng);
                    if (kind == 0 && (d == 5 || d == 37))
                        x = 12.0f * x + 25.0f;  // outlier channels
                    if (kind == 0 && d == 50) x = -8.0f + 0.5f * x;
                    rows[size_t(t) * D + d] = fp32_to_fp16(x);
                }
            }
            std::vector<float> q(D);
            for (auto &v : q) v = dist(rng);
            for (int rot = 0; rot < 2; ++rot) {
                for (KvRole role : {KvRole::K, KvRole::V}) {
                    const CodecSpec spec{LLMKV_KV_INT4, rot == 1};
                    std::vector<uint8_t> enc(codec_head_bytes(LLMKV_KV_INT4, role, B, D));
                    std::vector<float> dec(rows.size());
                    codec_encode_head(spec, role, rows.data(), B, D, enc.data());
                    codec_decode_head(spec, role, enc.data(), B, D, dec.data());
                    Result &r = res[kind][rot];
                    for (uint32_t t = 0; t < B; ++t) {
                        double s_ref = 0, s_dec = 0;
                        for (uint32_t d = 0; d < D; ++d) {
                            const double x = fp16_to_fp32(rows[size_t(t) * D + d]),
                                         y = dec[size_t(t) * D + d];
                            (role == KvRole::K ? r.k_err : r.v_err) += (y - x) * (y - x);
                            (role == KvRole::K ? r.k_norm : r.v_norm) += x * x;
                            s_ref += q[d] * x;
                            s_dec += q[d] * y;
                        }
                        if (role == KvRole::K) {
                            r.s_err += (s_dec - s_ref) * (s_dec - s_ref);
                            r.s_norm += s_ref * s_ref;
                        }
                    }
                }
            }
        }
    }
    for (int kind = 0; kind < 2; ++kind) {
        for (int rot = 0; rot < 2; ++rot) {
            const Result &r = res[kind][rot];
            std::printf(
                "[ int4 %-16s rotate %d ] K rel err %.4f  q.k rel err %.4f  V rel err %.4f\n",
                kind == 0 ? "outlier-channels" : "normal", rot, std::sqrt(r.k_err / r.k_norm),
                std::sqrt(r.s_err / r.s_norm), std::sqrt(r.v_err / r.v_norm));
            EXPECT_LT(std::sqrt(r.k_err / r.k_norm), 0.2);
            EXPECT_LT(std::sqrt(r.v_err / r.v_norm), 0.2);
        }
    }
}

// Attention output error (relative L2 over 32 queries x 1024 positions) of each codec pair
// on K with outlier channels and offsets and V with a few outlier tokens, with and without
// rotation: the measurement behind the rotation defaults. Bounds are loose sanity limits.
TEST(KvCodec, AttentionErrorPerCodecOnKLikeData) {
    const uint32_t B = 16, D = 64, n_blocks = 64, N = B * n_blocks, n_q = 32;
    std::mt19937 rng(77);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<uint16_t> K(size_t(N) * D), V(size_t(N) * D);
    std::vector<float> chan_scale(D, 1.0f), chan_mean(D, 0.0f);
    for (uint32_t d = 0; d < D; ++d) {  // a few large channels with offsets, as in real K
        if (d % 13 == 5) {
            chan_scale[d] = 8.0f + float(d % 5);
            chan_mean[d] = (d % 2 ? -1.0f : 1.0f) * 6.0f;
        }
    }
    for (uint32_t t = 0; t < N; ++t) {
        for (uint32_t d = 0; d < D; ++d) {
            K[size_t(t) * D + d] = fp32_to_fp16(chan_mean[d] + chan_scale[d] * dist(rng));
            V[size_t(t) * D + d] = fp32_to_fp16((t % 97 == 0 ? 10.0f : 1.0f) * dist(rng));
        }
    }
    std::vector<float> Q(size_t(n_q) * D);
    for (auto &x : Q) x = 0.5f * dist(rng);
    auto attend = [&](const std::vector<float> &k, const std::vector<float> &v,
                      std::vector<double> &out) {
        out.assign(size_t(n_q) * D, 0.0);
        std::vector<double> sc(N);
        for (uint32_t i = 0; i < n_q; ++i) {
            double mx = -INFINITY, sum = 0;
            for (uint32_t t = 0; t < N; ++t) {
                double a = 0;
                for (uint32_t d = 0; d < D; ++d)
                    a += double(Q[size_t(i) * D + d]) * k[size_t(t) * D + d];
                sc[t] = a / 8.0;
                mx = std::max(mx, sc[t]);
            }
            for (uint32_t t = 0; t < N; ++t) sum += (sc[t] = std::exp(sc[t] - mx));
            for (uint32_t t = 0; t < N; ++t) {
                for (uint32_t d = 0; d < D; ++d)
                    out[size_t(i) * D + d] += sc[t] / sum * v[size_t(t) * D + d];
            }
        }
    };
    auto round_trip = [&](const std::vector<uint16_t> &src, CodecSpec spec, KvRole role) {
        std::vector<float> dec(src.size());
        std::vector<uint8_t> enc(codec_head_bytes(spec.dtype, role, B, D));
        for (uint32_t b = 0; b < n_blocks; ++b) {
            codec_encode_head(spec, role, src.data() + size_t(b) * B * D, B, D, enc.data());
            codec_decode_head(spec, role, enc.data(), B, D, dec.data() + size_t(b) * B * D);
        }
        return dec;
    };
    std::vector<float> k0(K.size()), v0(V.size());
    for (size_t i = 0; i < K.size(); ++i) {
        k0[i] = fp16_to_fp32(K[i]);
        v0[i] = fp16_to_fp32(V[i]);
    }
    std::vector<double> ref, got;
    attend(k0, v0, ref);
    double ref_norm = 0;
    for (double x : ref) ref_norm += x * x;
    struct Pair {
        CodecSpec k, v;
        double limit;
    } pairs[] = {{{LLMKV_KV_FP8_E4M3, false}, {LLMKV_KV_FP8_E4M3, false}, 0.08},
                 {{LLMKV_KV_FP8_E4M3, true}, {LLMKV_KV_FP8_E4M3, true}, 0.08},
                 {{LLMKV_KV_INT8, false}, {LLMKV_KV_INT8, false}, 0.04},
                 {{LLMKV_KV_INT8, true}, {LLMKV_KV_INT8, true}, 0.04},
                 {{LLMKV_KV_INT8, false}, {LLMKV_KV_INT4, false}, 0.15},
                 {{LLMKV_KV_INT8, false}, {LLMKV_KV_INT4, true}, 0.15},
                 {{LLMKV_KV_INT4, false}, {LLMKV_KV_INT4, false}, 0.2},
                 {{LLMKV_KV_INT4, false}, {LLMKV_KV_INT4, true}, 0.2},
                 {{LLMKV_KV_INT4, true}, {LLMKV_KV_INT4, false}, 0.2},
                 {{LLMKV_KV_INT4, true}, {LLMKV_KV_INT4, true}, 0.2}};
    for (const Pair &p : pairs) {
        const auto k = round_trip(K, p.k, KvRole::K), v = round_trip(V, p.v, KvRole::V);
        double k_err = 0, k_norm = 0;
        for (size_t i = 0; i < k.size(); ++i) {
            k_err += double(k[i] - k0[i]) * (k[i] - k0[i]);
            k_norm += double(k0[i]) * k0[i];
        }
        attend(k, v, got);
        double err = 0;
        for (size_t i = 0; i < got.size(); ++i) err += (got[i] - ref[i]) * (got[i] - ref[i]);
        const double rel = std::sqrt(err / ref_norm);
        std::printf("[ attention error %-8s%s / %-8s%s ] K rel err %.4f  output rel err %.4f\n",
                    codec_name(p.k.dtype), p.k.rotate ? "+rot" : "    ", codec_name(p.v.dtype),
                    p.v.rotate ? "+rot" : "    ", std::sqrt(k_err / k_norm), rel);
        EXPECT_LT(rel, p.limit);
    }
}

}  // namespace
}  // namespace llmkv
