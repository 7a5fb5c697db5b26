// llmkv's CUDA emulator: CUDA's vector types and dim3, with CUDA's alignments (a misaligned
// vector load is then a misaligned access the emulated kernels' -fsanitize=alignment reports,
// as a GPU faults on it).
#pragma once

#include <stddef.h>

struct alignas(4) char4 {
    signed char x, y, z, w;
};
struct alignas(4) uchar4 {
    unsigned char x, y, z, w;
};
struct alignas(8) int2 {
    int x, y;
};
struct alignas(8) uint2 {
    unsigned int x, y;
};
struct alignas(16) int4 {
    int x, y, z, w;
};
struct alignas(16) uint4 {
    unsigned int x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
struct float3 {
    float x, y, z;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
        : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

inline constexpr int2 make_int2(int x, int y) {
    return int2{x, y};
}
inline constexpr uint2 make_uint2(unsigned x, unsigned y) {
    return uint2{x, y};
}
inline constexpr int4 make_int4(int x, int y, int z, int w) {
    return int4{x, y, z, w};
}
inline constexpr uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
    return uint4{x, y, z, w};
}
inline constexpr float2 make_float2(float x, float y) {
    return float2{x, y};
}
inline constexpr float4 make_float4(float x, float y, float z, float w) {
    return float4{x, y, z, w};
}
inline constexpr uint3 make_uint3(unsigned x, unsigned y, unsigned z) {
    return uint3{x, y, z};
}
