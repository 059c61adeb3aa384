#pragma once
// skinny_gemm's host entry points: out[M, N] = a[M, K] @ b[N, K]^T (scaled for FP8 operands, plus bias), M <= 32.
// Defined once per variant: skinny_gemm.cu (CUDA, ROCm) or skinny_gemm_cpu.cpp (CPU). The op schema is
// torch-ext's.
#include <optional>

#include <torch/all.h>

void skinny_gemm(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b,
                 const std::optional<torch::Tensor>& scale_a, const std::optional<torch::Tensor>& scale_b,
                 const std::optional<torch::Tensor>& bias);

// skinny_gemm_add_rms_norm in one kernel: out = rms_norm(residual += skinny_gemm(a, b, ...), weight, eps, scale),
// the GEMM's [M, N] output never stored. Where the device and the launch plan allow it (Hopper's copy-engine
// kernel, one whole output tile per SM: skinny_gemm_tma_plan.cuh, tma_norm_fusable) it launches that kernel and
// returns true; elsewhere it does nothing and returns false, and the caller runs skinny_gemm then
// fused_add_rms_norm. Arguments checked by check_skinny_gemm_add_rms_norm_args (common/checks.h).
bool skinny_gemm_add_rms_norm_fused(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b,
                                    const std::optional<torch::Tensor>& scale_a,
                                    const std::optional<torch::Tensor>& scale_b,
                                    const std::optional<torch::Tensor>& bias, torch::Tensor& residual,
                                    const torch::Tensor& weight, double eps,
                                    const std::optional<torch::Tensor>& scale);
