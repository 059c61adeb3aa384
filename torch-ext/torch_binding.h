#pragma once
// The five ops of the contract (README "Op contract"). One definition of each is compiled per variant:
// the CPU variant links */..._cpu.cpp, the CUDA and ROCm variants link the .cu launchers.
#include <optional>

#include <torch/all.h>

void rms_norm(torch::Tensor& out, const torch::Tensor& input, const torch::Tensor& weight, double eps,
              const std::optional<torch::Tensor>& scale);

void fused_add_rms_norm(torch::Tensor& out, const torch::Tensor& input, torch::Tensor& residual,
                        const torch::Tensor& weight, double eps, const std::optional<torch::Tensor>& scale);

void silu_and_mul(torch::Tensor& out, const torch::Tensor& input, const std::optional<torch::Tensor>& scale);

void skinny_gemm(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b,
                 const std::optional<torch::Tensor>& scale_a, const std::optional<torch::Tensor>& scale_b,
                 const std::optional<torch::Tensor>& bias);

void quantize_fp8(torch::Tensor& out, const torch::Tensor& input, const torch::Tensor& scale);
