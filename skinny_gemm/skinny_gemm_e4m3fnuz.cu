// The skinny GEMM kernels for e4m3fnuz operands (see skinny_gemm_launch.cuh for why they have a file of their own).
#include "skinny_gemm_launch.cuh"  // beside the .cu, so that hipify converts it too

namespace fp8dk::skinny {

const Kernels& kernels_e4m3fnuz(at::ScalarType out) { return fp8_kernels<fp8dk::E4m3fnuz>(out); }

}  // namespace fp8dk::skinny

FP8DK_TRACE_EXPORT(skinny_gemm_e4m3fnuz)
