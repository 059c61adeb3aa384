#pragma once
// Argument validation shared by every backend's launcher, so the CPU, CUDA and ROCm builds reject the same
// inputs with the same message (README "Op contract"). Host code only: device code never includes this.
#include <cmath>
#include <optional>

#include <torch/all.h>

namespace fp8dk {

inline bool is_fp8(at::ScalarType t) { return t == at::kFloat8_e4m3fn || t == at::kFloat8_e4m3fnuz; }
inline bool is_16bit_float(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

// Largest finite value of each FP8 flavour: the saturation bound of the quantizing ops.
inline float fp8_max(at::ScalarType t) { return t == at::kFloat8_e4m3fnuz ? 240.f : 448.f; }

// A tensor seen as `rows` x `cols` with unit column stride and a single row stride: the leading
// dimensions must collapse into one row index. This is what lets the kernels take padded rows
// (row_stride > cols) without copies.
struct RowView {
  int64_t rows;
  int64_t cols;
  int64_t row_stride;  // in elements
};

inline RowView row_view(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.dim() >= 1, op, ": ", name, " must have at least one dimension, got a 0-d tensor");
  const int64_t cols = t.size(-1);
  TORCH_CHECK(t.stride(-1) == 1 || cols <= 1, op, ": ", name,
              " must be contiguous in its last dimension (stride 1), got stride ", t.stride(-1));
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) rows *= t.size(d);
  if (rows == 0) return {0, cols, cols};  // nothing to index: strides of an empty tensor are arbitrary
  int64_t row_stride = -1;  // set by the innermost leading dimension of size > 1
  int64_t expected = -1;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (row_stride < 0) {
      row_stride = t.stride(d);
      TORCH_CHECK(row_stride >= cols, op, ": ", name, " rows must not overlap: row stride ", row_stride,
                  " is smaller than the row length ", cols);
    } else {
      TORCH_CHECK(t.stride(d) == expected, op, ": ", name,
                  " must be viewable as [rows, cols] with one row stride; dimension ", d, " has stride ",
                  t.stride(d), ", expected ", expected);
    }
    expected = t.stride(d) * t.size(d);
  }
  if (row_stride < 0) row_stride = cols;
  return {rows, cols, row_stride};
}

inline void check_same_device(const at::Tensor& t, const at::Tensor& ref, const char* op, const char* name,
                              const char* ref_name) {
  TORCH_CHECK(t.device() == ref.device(), op, ": ", name, " must be on the same device as ", ref_name,
              " (", ref.device(), "), got ", t.device());
}

// The device type this build's kernels run on. Every other tensor argument is checked against the first one
// (check_same_device), so all of them end up on this device type. (Meta tensors never reach a launcher: the
// dispatcher sends any call with a meta argument to the fake implementation in torch-ext/.../__init__.py,
// which applies the same device rule.)
#if defined(CPU_KERNEL)
constexpr c10::DeviceType kBuildDeviceType = c10::DeviceType::CPU;
constexpr const char* kBuildName = "the CPU build";
#define FP8DK_CHECK_BUILD_DEVICE 1
#elif defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
constexpr c10::DeviceType kBuildDeviceType = c10::DeviceType::CUDA;  // HIP tensors are "cuda" in torch
constexpr const char* kBuildName = "the CUDA/ROCm build";
#define FP8DK_CHECK_BUILD_DEVICE 1
#else
#define FP8DK_CHECK_BUILD_DEVICE 0
#endif

inline void check_build_device(const at::Tensor& t, const char* op, const char* name) {
#if FP8DK_CHECK_BUILD_DEVICE
  TORCH_CHECK(t.device().type() == kBuildDeviceType, op, ": this is ", kBuildName, "; ", name, " must be on a ",
              c10::DeviceTypeName(kBuildDeviceType, /*lower_case=*/true), " device, got ", t.device());
#endif
}

inline void check_activation_dtype(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(is_16bit_float(t.scalar_type()), op, ": ", name, " must be float16 or bfloat16, got ",
              t.scalar_type());
}

// A static per-tensor scale: one fp32 element, read on the device so the op needs no host sync.
inline void check_scale(const at::Tensor& scale, const at::Tensor& ref, const char* op, const char* name,
                        const char* ref_name = "input") {
  TORCH_CHECK(scale.scalar_type() == at::kFloat, op, ": ", name, " must be a float32 tensor, got ",
              scale.scalar_type());
  TORCH_CHECK(scale.numel() == 1, op, ": ", name, " must have exactly one element (per-tensor scale), got ",
              scale.numel(), " elements of shape ", scale.sizes());
  check_same_device(scale, ref, op, name, ref_name);
}

// Output dtype rule of the quantizing ops: with a scale, out is FP8 and its dtype picks the flavour;
// without one, out has the input dtype.
inline void check_quant_out(const at::Tensor& out, const at::Tensor& input,
                            const std::optional<at::Tensor>& scale, const char* op) {
  if (scale.has_value()) {
    check_scale(*scale, input, op, "scale");
    TORCH_CHECK(is_fp8(out.scalar_type()), op,
                ": out must be float8_e4m3fn or float8_e4m3fnuz when scale is given, got ", out.scalar_type());
  } else {
    TORCH_CHECK(out.scalar_type() == input.scalar_type(), op,
                ": out must have the input dtype (", input.scalar_type(), ") when no scale is given, got ",
                out.scalar_type(), "; pass a scale for FP8 output");
  }
  check_same_device(out, input, op, "out", "input");
}

struct RmsNormShape {
  RowView in;
  RowView out;
};

// rms_norm / fused_add_rms_norm. `residual` is nullptr for rms_norm.
inline RmsNormShape check_rms_norm_args(const at::Tensor& out, const at::Tensor& input,
                                        const at::Tensor* residual, const at::Tensor& weight, double eps,
                                        const std::optional<at::Tensor>& scale, const char* op) {
  check_build_device(input, op, "input");
  check_activation_dtype(input, op, "input");
  const RowView in = row_view(input, op, "input");
  TORCH_CHECK(in.cols >= 1, op, ": input must have a hidden size (last dimension) >= 1, got 0");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == in.cols, op, ": weight must have shape [", in.cols,
              "] (the hidden size), got ", weight.sizes());
  TORCH_CHECK(weight.scalar_type() == input.scalar_type(), op, ": weight must have the input dtype (",
              input.scalar_type(), "), got ", weight.scalar_type());
  TORCH_CHECK(weight.is_contiguous(), op, ": weight must be contiguous");
  check_same_device(weight, input, op, "weight", "input");
  TORCH_CHECK(std::isfinite(eps) && eps >= 0.0, op, ": eps must be finite and >= 0, got ", eps);
  if (residual != nullptr) {
    TORCH_CHECK(residual->sizes() == input.sizes(), op, ": residual must have the input shape ", input.sizes(),
                ", got ", residual->sizes());
    TORCH_CHECK(residual->scalar_type() == input.scalar_type(), op, ": residual must have the input dtype (",
                input.scalar_type(), "), got ", residual->scalar_type());
    TORCH_CHECK(residual->is_contiguous(), op, ": residual must be contiguous");
    check_same_device(*residual, input, op, "residual", "input");
  }
  TORCH_CHECK(out.sizes() == input.sizes(), op, ": out must have the input shape ", input.sizes(), ", got ",
              out.sizes());
  check_quant_out(out, input, scale, op);
  return {in, row_view(out, op, "out")};
}

struct SiluAndMulShape {
  RowView in;   // cols = 2 * d
  RowView out;  // cols = d
};

inline SiluAndMulShape check_silu_and_mul_args(const at::Tensor& out, const at::Tensor& input,
                                               const std::optional<at::Tensor>& scale, const char* op) {
  check_build_device(input, op, "input");
  check_activation_dtype(input, op, "input");
  const RowView in = row_view(input, op, "input");
  TORCH_CHECK(in.cols >= 2 && in.cols % 2 == 0, op,
              ": input's last dimension must be even and >= 2 ([..., 2*d], gate then up), got ", in.cols);
  auto expected = input.sizes().vec();
  expected.back() = in.cols / 2;
  TORCH_CHECK(out.sizes() == at::IntArrayRef(expected), op, ": out must have shape ", at::IntArrayRef(expected),
              " (input shape with the last dimension halved), got ", out.sizes());
  check_quant_out(out, input, scale, op);
  return {in, row_view(out, op, "out")};
}

// Largest M the skinny GEMM op takes; the Python wrapper routes larger M to torch.
constexpr int64_t kSkinnyMaxM = 32;

struct SkinnyGemmShape {
  int64_t m, n, k;
  int64_t a_row_stride, b_row_stride, out_row_stride;  // in elements
  bool fp8;
};

inline SkinnyGemmShape check_skinny_gemm_args(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                                              const std::optional<at::Tensor>& scale_a,
                                              const std::optional<at::Tensor>& scale_b,
                                              const std::optional<at::Tensor>& bias, const char* op) {
  check_build_device(a, op, "a");
  TORCH_CHECK(a.dim() == 2, op, ": a must be 2-D [M, K], got shape ", a.sizes());
  TORCH_CHECK(b.dim() == 2, op, ": b must be 2-D [N, K] (weight, one row per output feature), got shape ",
              b.sizes());
  TORCH_CHECK(a.size(1) == b.size(1), op, ": a [M, K] and b [N, K] must share K, got a ", a.sizes(), " and b ",
              b.sizes());
  const int64_t m = a.size(0), n = b.size(0), k = a.size(1);
  TORCH_CHECK(m <= kSkinnyMaxM, op, ": a must have at most ", kSkinnyMaxM,
              " rows (M); larger M is routed to torch by the Python wrapper, got M = ", m);
  check_same_device(b, a, op, "b", "a");
  const at::ScalarType at_ = a.scalar_type(), bt = b.scalar_type();
  const bool fp8 = is_fp8(at_);
  if (fp8) {
    TORCH_CHECK(bt == at_, op, ": a and b must be the same FP8 flavour, got a ", at_, " and b ", bt);
    TORCH_CHECK(scale_a.has_value() && scale_b.has_value(), op,
                ": FP8 operands need scale_a and scale_b (one-element float32 tensors)");
    check_scale(*scale_a, a, op, "scale_a", "a");
    check_scale(*scale_b, a, op, "scale_b", "a");
    TORCH_CHECK(is_16bit_float(out.scalar_type()), op, ": out must be float16 or bfloat16, got ",
                out.scalar_type());
  } else {
    TORCH_CHECK(is_16bit_float(at_), op,
                ": a must be float16, bfloat16, float8_e4m3fn or float8_e4m3fnuz, got ", at_);
    TORCH_CHECK(bt == at_, op, ": a and b must have the same dtype, got a ", at_, " and b ", bt);
    TORCH_CHECK(!scale_a.has_value() && !scale_b.has_value(), op,
                ": scale_a and scale_b are only for FP8 operands; 16-bit operands take none");
    TORCH_CHECK(out.scalar_type() == at_, op, ": out must have the dtype of a and b (", at_, "), got ",
                out.scalar_type());
  }
  TORCH_CHECK(out.dim() == 2 && out.size(0) == m && out.size(1) == n, op, ": out must have shape [", m, ", ", n,
              "], got ", out.sizes());
  check_same_device(out, a, op, "out", "a");
  if (bias.has_value()) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == n, op, ": bias must have shape [", n, "], got ",
                bias->sizes());
    TORCH_CHECK(bias->scalar_type() == out.scalar_type(), op, ": bias must have the out dtype (",
                out.scalar_type(), "), got ", bias->scalar_type());
    TORCH_CHECK(bias->is_contiguous(), op, ": bias must be contiguous");
    check_same_device(*bias, a, op, "bias", "a");
  }
  const RowView av = row_view(a, op, "a"), bv = row_view(b, op, "b"), ov = row_view(out, op, "out");
  return {m, n, k, av.row_stride, bv.row_stride, ov.row_stride, fp8};
}

struct QuantizeFp8Shape {
  RowView in;
  RowView out;  // same rows and cols, its own row stride
};

// quantize_fp8: out (FP8, the input's shape) <- input / scale. The scale is not optional here.
inline QuantizeFp8Shape check_quantize_fp8_args(const at::Tensor& out, const at::Tensor& input,
                                                const at::Tensor& scale, const char* op) {
  check_build_device(input, op, "input");
  check_activation_dtype(input, op, "input");
  const RowView in = row_view(input, op, "input");
  TORCH_CHECK(out.sizes() == input.sizes(), op, ": out must have the input shape ", input.sizes(), ", got ",
              out.sizes());
  TORCH_CHECK(is_fp8(out.scalar_type()), op, ": out must be float8_e4m3fn or float8_e4m3fnuz, got ",
              out.scalar_type());
  check_same_device(out, input, op, "out", "input");
  check_scale(scale, input, op, "scale");
  return {in, row_view(out, op, "out")};
}

}  // namespace fp8dk
