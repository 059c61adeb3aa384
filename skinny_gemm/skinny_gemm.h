#pragma once
// skinny_gemm's host entry point: out[M, N] = a[M, K] @ b[N, K]^T (scaled for FP8 operands, plus bias), M <= 32.
// Defined once per variant: skinny_gemm.cu (CUDA, ROCm) or skinny_gemm_cpu.cpp (CPU). The op schema is
// torch-ext's.
#include <optional>

#include <torch/all.h>

void skinny_gemm(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b,
                 const std::optional<torch::Tensor>& scale_a, const std::optional<torch::Tensor>& scale_b,
                 const std::optional<torch::Tensor>& bias);
