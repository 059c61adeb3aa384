#pragma once
// Tensor maps for the copy engine (host side of common/tma.cuh; NVIDIA only, nothing on ROCm).
//
// cuTensorMapEncodeTiled is a driver function. It is reached through the runtime's driver entry point, so the
// extension links no libcuda of its own (kernel-builder links the runtime only). Encoding is pure host work
// (no device call, no synchronization): a launcher encodes per call, and the map travels by value as a
// __grid_constant__ kernel parameter, so a CUDA-graph replay reuses the captured map with no host work.
#if !defined(USE_ROCM)
#include <c10/util/Exception.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>

namespace fp8dk {

namespace tensor_map_detail {
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiled encode_tiled() {
  static EncodeTiled fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    // The CUDA 12.0 ABI of the function (the one this signature declares).
    const cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found);
    if (e == cudaSuccess && found == cudaDriverEntryPointSuccess) fn = reinterpret_cast<EncodeTiled>(p);
  });
  TORCH_CHECK(fn != nullptr, "fp8-decode-kernels: the CUDA driver has no cuTensorMapEncodeTiled");
  return fn;
}
}  // namespace tensor_map_detail

// A row-major matrix [rows, cols] of `elem_bytes`-byte elements (row stride `row_stride_bytes`, a multiple of
// 16; base 16-byte aligned) cut into boxes of [box_rows, box_cols] with the 128-byte swizzle
// (box_cols * elem_bytes == 128). Elements outside the matrix read as zero.
inline CUtensorMap tensor_map_2d(const void* base, long long rows, long long cols, long long row_stride_bytes,
                                 int elem_bytes, int box_rows, int box_cols, bool stream_once) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_stride_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = tensor_map_detail::encode_tiled()(
      &map, elem_bytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_UINT16, 2,
      const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B,
      stream_once ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B : CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(r == CUDA_SUCCESS, "fp8-decode-kernels: cuTensorMapEncodeTiled failed (error ", static_cast<int>(r),
              ") for a [", rows, ", ", cols, "] matrix, row stride ", row_stride_bytes, " bytes, box [", box_rows,
              ", ", box_cols, "]");
  return map;
}

}  // namespace fp8dk
#endif
