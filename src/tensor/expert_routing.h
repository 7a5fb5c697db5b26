// The expert choice of one token of a mixture-of-experts layer (ExpertRouting, weights.h),
// written once for every backend so that they all pick the same experts with the same weights
// bit for bit: softmax over the router logits (or, kSoftmaxChosen, over the chosen ones) with
// exp_float (the same bits on every C runtime and on the host side of the CUDA module), the n_used
// most probable experts (ties to the lower id), best first, their weights normalised and scaled as
// the routing says.
#pragma once

#include <cstdint>
#include <vector>

#include "common/float_math.h"
#include "tensor/weights.h"

namespace llmkv {

// out[0 .. n_used) = the experts' ids (exact as floats), out[n_used .. 2 n_used) = their
// weights; z: the token's r.n_expert router logits; p and taken: r.n_expert scratch values.
inline void route_token(const float *z, const ExpertRouting &r, float *p, uint8_t *taken,
                        float *out) {
    const uint32_t N = r.n_expert, K = r.n_used;
    const bool chosen = r.gating == ExpertRouting::Gating::kSoftmaxChosen;
    if (chosen) {  // ranked by the logits themselves
        for (uint32_t i = 0; i < N; ++i) {
            p[i] = z[i];
            taken[i] = 0;
        }
    } else {
        float zmax = z[0];
        for (uint32_t i = 1; i < N; ++i) zmax = z[i] > zmax ? z[i] : zmax;
        float sum = 0.0f;
        for (uint32_t i = 0; i < N; ++i) sum += (p[i] = exp_float(z[i] - zmax));
        for (uint32_t i = 0; i < N; ++i) {
            p[i] /= sum;
            taken[i] = 0;
        }
    }
    float wsum = 0.0f;
    for (uint32_t k = 0; k < K; ++k) {
        uint32_t best = N;
        for (uint32_t i = 0; i < N; ++i) {
            if (!taken[i] && (best == N || p[i] > p[best])) best = i;
        }
        taken[best] = 1;
        out[k] = float(best);
        out[K + k] = p[best];
        wsum += p[best];
    }
    if (chosen) {  // softmax over the chosen logits (out[K] is the largest)
        const float zmax = out[K];
        wsum = 0.0f;
        for (uint32_t k = 0; k < K; ++k) wsum += (out[K + k] = exp_float(out[K + k] - zmax));
        const float esum = wsum;
        wsum = 0.0f;
        for (uint32_t k = 0; k < K; ++k) wsum += (out[K + k] /= esum);
    }
    if (r.norm_weights) {
        wsum = wsum > 6.103515625e-5f ? wsum : 6.103515625e-5f;
        for (uint32_t k = 0; k < K; ++k) out[K + k] /= wsum;
    }
    if (r.weight_scale != 1.0f) {
        for (uint32_t k = 0; k < K; ++k) out[K + k] *= r.weight_scale;
    }
}

// The slots of a batch's routes (T tokens x n_used experts, routes as route_token writes them,
// row stride 2 n_used) ordered by expert, each expert's in slot order: slots[first[e] ..
// first[e + 1]) are expert e's slots t n_used + i; first has n_expert + 1 entries. Returns the
// first slot whose expert id is not one of the n_expert (-1 when all are), leaving the output
// incomplete. Every backend's matmul_experts groups the rows by this order.
inline int64_t order_slots_by_expert(const float *routes, uint32_t T, uint32_t n_used,
                                     uint32_t n_expert, std::vector<uint32_t> &first,
                                     std::vector<uint32_t> &slots) {
    first.assign(n_expert + 1, 0);
    for (uint32_t t = 0; t < T; ++t) {
        for (uint32_t i = 0; i < n_used; ++i) {
            const float id = routes[size_t(t) * 2 * n_used + i];
            if (!(id >= 0.0f && id < float(n_expert))) return int64_t(t) * n_used + i;
            ++first[uint32_t(id) + 1];
        }
    }
    for (uint32_t e = 0; e < n_expert; ++e) first[e + 1] += first[e];
    slots.resize(size_t(T) * n_used);
    // first[e] serves as expert e's cursor (it ends at expert e + 1's start), then moves back.
    for (uint32_t t = 0; t < T; ++t) {
        for (uint32_t i = 0; i < n_used; ++i) {
            const uint32_t e = uint32_t(routes[size_t(t) * 2 * n_used + i]);
            slots[first[e]++] = t * n_used + i;
        }
    }
    for (uint32_t e = n_expert; e > 0; --e) first[e] = first[e - 1];
    first[0] = 0;
    return -1;
}

}  // namespace llmkv
