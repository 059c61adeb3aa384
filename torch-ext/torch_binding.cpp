#include <torch/all.h>
#include <torch/library.h>

#include "common/launch_stats.h"
#include "common/tuning.h"
#include "registration.h"
#include "torch_binding.h"

// Forget the FP8DK_* tuning overrides read so far (common/tuning.h): the next launch reads the environment
// again. For tests and tuning tools that change the environment inside one process.
static void reload_tuning() { fp8dk::tuning::reload(); }

// Launches captured so far in this process to start at a foreign kernel's launch completion (common/launch.h):
// tests check that the path they exercise was taken.
static int64_t pdl_foreign_starts() { return fp8dk::foreign_launch_starts().load(); }
static int64_t pdl_foreign_waits() { return fp8dk::foreign_kernel_waits().load(); }

#if defined(CPU_KERNEL)
#include "common/cpu_simd.h"

// Which code path the CPU kernels take in this process: "avx2" or "default" (common/cpu_simd.h). It follows
// ATen's CPU capability, which ATEN_CPU_CAPABILITY overrides; the tests use it to show the switch works.
static std::string cpu_isa() { return fp8dk::cpu::path_name(); }
#endif

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("rms_norm(Tensor! out, Tensor input, Tensor weight, float eps, Tensor? scale) -> ()");
  ops.def(
      "fused_add_rms_norm(Tensor! out, Tensor input, Tensor! residual, Tensor weight, float eps, "
      "Tensor? scale) -> ()");
  ops.def("silu_and_mul(Tensor! out, Tensor input, Tensor? scale) -> ()");
  ops.def(
      "skinny_gemm(Tensor! out, Tensor a, Tensor b, Tensor? scale_a, Tensor? scale_b, Tensor? bias) -> ()");
  ops.def("quantize_fp8(Tensor! out, Tensor input, Tensor scale) -> ()");
  ops.def("_reload_tuning() -> ()");
  ops.impl("_reload_tuning", torch::dispatch(c10::DispatchKey::CompositeExplicitAutograd, &reload_tuning));
  ops.def("_pdl_foreign_starts() -> int");
  ops.impl("_pdl_foreign_starts",
           torch::dispatch(c10::DispatchKey::CompositeExplicitAutograd, &pdl_foreign_starts));
  ops.def("_pdl_foreign_waits() -> int");
  ops.impl("_pdl_foreign_waits", torch::dispatch(c10::DispatchKey::CompositeExplicitAutograd, &pdl_foreign_waits));

#if defined(CPU_KERNEL)
  ops.def("cpu_isa() -> str");
  ops.impl("cpu_isa", torch::dispatch(c10::DispatchKey::CompositeExplicitAutograd, &cpu_isa));
  ops.impl("rms_norm", torch::kCPU, &rms_norm);
  ops.impl("fused_add_rms_norm", torch::kCPU, &fused_add_rms_norm);
  ops.impl("silu_and_mul", torch::kCPU, &silu_and_mul);
  ops.impl("skinny_gemm", torch::kCPU, &skinny_gemm);
  ops.impl("quantize_fp8", torch::kCPU, &quantize_fp8);
#elif defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
  // ROCm registers on kCUDA too: HIP tensors live on the "cuda" device in torch.
  ops.impl("rms_norm", torch::kCUDA, &rms_norm);
  ops.impl("fused_add_rms_norm", torch::kCUDA, &fused_add_rms_norm);
  ops.impl("silu_and_mul", torch::kCUDA, &silu_and_mul);
  ops.impl("skinny_gemm", torch::kCUDA, &skinny_gemm);
  ops.impl("quantize_fp8", torch::kCUDA, &quantize_fp8);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
