// The skinny GEMM kernels for fp16 operands (see skinny_gemm_launch.cuh for why they have a file of their own).
#include "skinny_gemm_launch.cuh"  // beside the .cu, so that hipify converts it too

namespace fp8dk::skinny {

const Kernels& kernels_fp16() {
  static const KernelsOf<fp8dk::Fp16, fp8dk::Fp16> kernels;
  return kernels;
}

}  // namespace fp8dk::skinny

FP8DK_TRACE_EXPORT(skinny_gemm_fp16)
