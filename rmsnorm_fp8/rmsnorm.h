#pragma once
// Host entry points of rms_norm and fused_add_rms_norm (README "Op contract"): rmsnorm.cu on CUDA and ROCm,
// rmsnorm_cpu.cpp on the CPU. torch-ext/torch_binding.cpp registers them.
#include <optional>

#include <torch/all.h>

void rms_norm(torch::Tensor& out, const torch::Tensor& input, const torch::Tensor& weight, double eps,
              const std::optional<torch::Tensor>& scale);

void fused_add_rms_norm(torch::Tensor& out, const torch::Tensor& input, torch::Tensor& residual,
                        const torch::Tensor& weight, double eps, const std::optional<torch::Tensor>& scale);
