// The skinny GEMM kernels for fp16 operands (see skinny_gemm_launch.cuh for why they have a file of their own).
#include "skinny_gemm_launch.cuh"  // beside the .cu, so that hipify converts it too

namespace fp8dk::skinny {

void launch_fp16(const Call& c) { dispatch_kernel<fp8dk::Fp16, fp8dk::Fp16>(c); }

}  // namespace fp8dk::skinny
