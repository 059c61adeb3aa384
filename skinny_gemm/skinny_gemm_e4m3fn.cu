// The skinny GEMM kernels for e4m3fn operands (see skinny_gemm_launch.cuh for why they have a file of their own).
#include "skinny_gemm_launch.cuh"  // beside the .cu, so that hipify converts it too

namespace fp8dk::skinny {

void launch_e4m3fn(at::ScalarType out, const Call& c) { dispatch_out<fp8dk::E4m3fn>(out, c); }

}  // namespace fp8dk::skinny
