// RMSNorm of activation rows (rms_norm of src/backend/cpu/cpu_backend.h), optionally gathering
// rows.
#pragma once

#include <cuda_runtime_api.h>
#include <stdint.h>

namespace llmkv::cuda {

// out row i = x[src] * (1 / sqrt(mean(x[src]^2) + eps)) * weight, src = rows ? rows[i] : i.
// x: f32 [*][ld_x] (device); rows: int32 [n_rows] (device) or nullptr; weight: f32 [n];
// exactly one of out_f16 (fp16 [n_rows][n]) / out_f32 (f32 [n_rows][n]) is non-null;
// out_f32 may be x (in place, without a row gather and with ld_x == n).
cudaError_t launch_rms_norm(const float *x, uint32_t ld_x, const int32_t *rows, uint32_t n_rows,
                            const float *weight, uint32_t n, float eps, uint16_t *out_f16,
                            float *out_f32, cudaStream_t stream);

}  // namespace llmkv::cuda
