// hip_min.h (emulator) -- what common/platform.cuh includes under FP8DK_HIP_SHIM when the kernels are compiled
// as host C++ for the CPU wave emulator. tools/amd_emu comes first on the include path, so this file is found
// instead of tools/compile_check/hip_min.h; it defines the CUDA/HIP keywords for host C++ and the AMDGPU
// builtins the kernels use, then includes the compile-check shim itself, so the index variables, __lane_id,
// __syncthreads and __shfl_xor are the very definitions the gfx942 compile check compiles (HIP's own, built
// from mbcnt + ds_bpermute + s_barrier).
//
// Every builtin below cites its source (see emu.h for the list).
#pragma once

#include "emu.h"

// ---------------------------------------------------------------- keywords
#define __CLANG_HIP_RUNTIME_WRAPPER_INCLUDED__ 1  // the compile-check shim then leaves these to us
#define __host__
#define __device__
#define __global__
// LDS: one object per workgroup. Workgroups run one after another on one OS thread, so a variable of static
// (thread) storage is exactly that. `thread_local` also makes `extern __shared__ T x[];` a valid declaration
// (of an array the driver defines: the dynamic LDS).
#define __shared__ thread_local
#define __constant__
#ifndef __HIP__
#define __HIP__ 1  // the compile-check shim insists on a HIP compile
#endif

// Memory scopes of __hip_atomic_* (clang's predefined values in HIP mode).
#define __HIP_MEMORY_SCOPE_SINGLETHREAD 1
#define __HIP_MEMORY_SCOPE_WAVEFRONT 2
#define __HIP_MEMORY_SCOPE_WORKGROUP 3
#define __HIP_MEMORY_SCOPE_AGENT 4
#define __HIP_MEMORY_SCOPE_SYSTEM 5

typedef float emu_f32x4 __attribute__((ext_vector_type(4)));
typedef _Float16 emu_f16x4 __attribute__((ext_vector_type(4)));
typedef short emu_i16x4 __attribute__((ext_vector_type(4)));
typedef int emu_i32x2 __attribute__((ext_vector_type(2)));
typedef int emu_i32x4 __attribute__((ext_vector_type(4)));

// ---------------------------------------------------------------- dispatch ids and sizes
// [LLVM] llvm.amdgcn.workitem.id.*, workgroup.id.*; clang's __builtin_amdgcn_workgroup_size_* and
// grid_size_* read the HSA dispatch packet: workgroup size in work-items, grid size in work-items.
inline unsigned __builtin_amdgcn_workitem_id_x() { return emu::cur().id[0]; }
inline unsigned __builtin_amdgcn_workitem_id_y() { return emu::cur().id[1]; }
inline unsigned __builtin_amdgcn_workitem_id_z() { return emu::cur().id[2]; }
inline unsigned __builtin_amdgcn_workgroup_id_x() { return (void)emu::cur(), emu::M().group[0]; }
inline unsigned __builtin_amdgcn_workgroup_id_y() { return (void)emu::cur(), emu::M().group[1]; }
inline unsigned __builtin_amdgcn_workgroup_id_z() { return (void)emu::cur(), emu::M().group[2]; }
inline unsigned short __builtin_amdgcn_workgroup_size_x() { return (unsigned short)emu::M().block[0]; }
inline unsigned short __builtin_amdgcn_workgroup_size_y() { return (unsigned short)emu::M().block[1]; }
inline unsigned short __builtin_amdgcn_workgroup_size_z() { return (unsigned short)emu::M().block[2]; }
inline unsigned __builtin_amdgcn_grid_size_x() { return emu::M().grid[0] * emu::M().block[0]; }
inline unsigned __builtin_amdgcn_grid_size_y() { return emu::M().grid[1] * emu::M().block[1]; }
inline unsigned __builtin_amdgcn_grid_size_z() { return emu::M().grid[2] * emu::M().block[2]; }

// [CDNA3] V_MBCNT_LO_U32_B32: D = S1 + popcount(S0 & ThreadMask[31:0]); V_MBCNT_HI_U32_B32: the same with
// ThreadMask[63:32], where ThreadMask has the bits of the lanes below this one set.
inline unsigned __builtin_amdgcn_mbcnt_lo(unsigned mask, unsigned add) {
  const uint64_t below = (uint64_t(1) << emu::cur().lane) - 1;
  return add + unsigned(__builtin_popcountll(uint64_t(mask) & below & 0xffffffffull));
}
inline unsigned __builtin_amdgcn_mbcnt_hi(unsigned mask, unsigned add) {
  const uint64_t below = (uint64_t(1) << emu::cur().lane) - 1;
  return add + unsigned(__builtin_popcountll((uint64_t(mask) << 32) & below));
}

// ---------------------------------------------------------------- synchronisation and memory model
// [CDNA3] S_BARRIER: the wave waits until every wave of the workgroup has reached the barrier (waves that
// ended are not waited for). Emulated per work-item, which is the same for convergent waves.
inline void __builtin_amdgcn_s_barrier() { emu::workgroup_barrier(); }

// [LLVM] llvm.amdgcn.fence / clang __builtin_amdgcn_fence(order, "scope"): a fence at a synchronisation scope.
// Workgroups and their work-items run on one OS thread here, so every store is visible to every later load:
// the fence orders nothing further. Arguments are checked.
inline void __builtin_amdgcn_fence(int order, const char* scope) {
  if (order != __ATOMIC_ACQUIRE && order != __ATOMIC_RELEASE && order != __ATOMIC_ACQ_REL &&
      order != __ATOMIC_SEQ_CST)
    emu::fail("__builtin_amdgcn_fence: bad ordering %d", order);
  if (std::strcmp(scope, "workgroup") != 0 && std::strcmp(scope, "agent") != 0 && std::strcmp(scope, "") != 0 &&
      std::strcmp(scope, "wavefront") != 0 && std::strcmp(scope, "singlethread") != 0)
    emu::fail("__builtin_amdgcn_fence: unknown scope '%s'", scope);
}

namespace emu {
// clang __hip_atomic_fetch_add(ptr, val, order, scope): an atomic read-modify-write at `scope`
// (global_atomic_add_u32 / flat at agent scope [CDNA3]). One OS thread: a plain read-modify-write is atomic.
template <class T>
inline T hip_atomic_fetch_add(T* p, T v, int order, int scope) {
  if (scope < __HIP_MEMORY_SCOPE_SINGLETHREAD || scope > __HIP_MEMORY_SCOPE_SYSTEM)
    fail("__hip_atomic_fetch_add: bad scope %d", scope);
  (void)order;
  const T old = *p;
  *p = T(old + v);
  return old;
}
}  // namespace emu
#define __hip_atomic_fetch_add(p, v, order, scope) ::emu::hip_atomic_fetch_add(p, v, order, scope)

// ---------------------------------------------------------------- cross-lane
// [CDNA3] DS_BPERMUTE_B32 ("backward permute"): each lane reads the DATA0 value of lane (ADDR / 4) mod 64 of its
// wave; no LDS memory is written. A read of a lane that has exited is reported as an error (see emu.h).
namespace emu {
struct BpermuteArg {
  int addr, data, result;
};
inline void bpermute_wave(Wave& w) {
  for (int l = 0; l < kWaveSize; ++l) {
    if (!(w.arrived >> l & 1)) continue;
    auto* a = static_cast<BpermuteArg*>(w.args[l]);
    int src = (a->addr >> 2) & (kWaveSize - 1);
    if (opts().fault == 4 && l == 5) src = (src + 1) & (kWaveSize - 1);  // planted: one lane reads a neighbour
    if (!(w.arrived >> src & 1)) fail("ds_bpermute: lane %d reads lane %d, which is not active", l, src);
    a->result = static_cast<BpermuteArg*>(w.args[src])->data;
  }
}
}  // namespace emu
inline int __builtin_amdgcn_ds_bpermute(int addr, int data) {
  emu::BpermuteArg a{addr, data, 0};
  emu::wave_collective("ds_bpermute_b32", emu::bpermute_wave, &a);
  return a.result;
}

// [CDNA3] V_PERM_B32: D.u = { byte_permute({S0, S1}, S2.u[31:24]), ..., byte_permute({S0, S1}, S2.u[7:0]) }
// where {S0, S1} is the 64-bit value with S1 in bytes 0-3 and S0 in bytes 4-7, and a selector byte
// 0-7 picks that byte, 8-11 replicate the sign bit of bytes 1, 3, 5, 7, 12 gives 0x00, 13-255 give 0xff.
// [LLVM] llvm.amdgcn.perm(src0, src1, selector) maps to v_perm_b32 with those operands in that order.
inline unsigned __builtin_amdgcn_perm(unsigned s0, unsigned s1, unsigned sel) {
  const uint64_t data = (uint64_t(s0) << 32) | s1;
  unsigned d = 0;
  for (int i = 0; i < 4; ++i) {
    const unsigned s = (sel >> (8 * i)) & 0xff;
    unsigned byte;
    if (s < 8) byte = unsigned(data >> (8 * s)) & 0xff;
    else if (s < 12) byte = (unsigned(data >> (8 * (2 * (s - 8) + 1) + 7)) & 1) ? 0xff : 0x00;
    else if (s == 12) byte = 0x00;
    else byte = 0xff;
    d |= byte << (8 * i);
  }
  return d;
}

// ---------------------------------------------------------------- transcendental (special-function unit)
// [LLVM] llvm.amdgcn.exp2 "provides direct access to v_exp_f32"; AMDGPUUsage: the hardware gives 1 ULP for
// float and "does not natively support denormal inputs" (flushed to 0 here, so 2^0 = 1). A result below the
// smallest normal is flushed to 0 as well (no denormal output either). An inexact result is the correctly
// rounded one moved by opts().sfu_ulp ulps.
inline float __builtin_amdgcn_exp2f(float x) {
  if (std::isnan(x)) return x;
  if (emu::is_subnormal(x)) x = 0.f;
  const double exact = std::exp2(double(x));
  float r = float(exact);
  if (emu::is_subnormal(r)) r = 0.f;
  if (r != 0.f && std::isfinite(r) && double(r) != exact) r = emu::nudge(r, emu::opts().sfu_ulp);
  return r;
}

// [LLVM] llvm.amdgcn.rcp: v_rcp_f32, 1 ULP ("rcp_f32 is accurate for !fpmath >= 1.0ulp and denormals are
// flushed", AMDGPUCodeGenPrepare): denormal inputs act as +-0 (result +-inf), denormal results are flushed to
// +-0. An inexact result is the correctly rounded one moved by opts().sfu_ulp ulps.
inline float __builtin_amdgcn_rcpf(float x) {
  if (std::isnan(x)) return x;
  if (emu::is_subnormal(x)) x = std::copysign(0.f, x);
  float r = float(1.0 / double(x));
  if (emu::is_subnormal(r)) r = std::copysign(0.f, r);
  if (r != 0.f && std::isfinite(r) && double(r) * double(x) != 1.0) r = emu::nudge(r, emu::opts().sfu_ulp);
  return r;
}

// ---------------------------------------------------------------- FP8 conversion
// [CDNA3] V_CVT_PK_FP8_F32: converts S0 and S1 (f32) to FP8 (gfx942: e4m3fnuz; [CDNA4] gfx950: OCP e4m3fn),
// round to nearest even, writing bytes 0-1 of the destination (OPSEL/word_sel = 0) or bytes 2-3 (word_sel = 1)
// and keeping the other half of `old` (the tied vdst_in). [LLVM] clang builtin signature: (float, float, int
// old, bool word_sel) -> int. The conversion itself: emu::fp8_encode (undocumented corners from opts()).
inline int __builtin_amdgcn_cvt_pk_fp8_f32(float a, float b, int old, bool word_sel) {
#if defined(__gfx942__)
  constexpr bool fnuz = true;
#elif defined(__gfx950__)
  constexpr bool fnuz = false;
#else
#error "the emulator builds for __gfx942__ or __gfx950__"
#endif
  if (emu::opts().fault == 2) {  // planted: saturation at the wrong bound (one FP8 step below the maximum)
    const float wrong = fnuz ? 224.f : 416.f;
    a = std::fmin(std::fmax(a, -wrong), wrong);
    b = std::fmin(std::fmax(b, -wrong), wrong);
  }
  const uint32_t lo = emu::fp8_encode(a, fnuz), hi = emu::fp8_encode(b, fnuz);
  const uint32_t pair = lo | (hi << 8);
  uint32_t d = uint32_t(old);
  d = word_sel ? (d & 0x0000ffffu) | (pair << 16) : (d & 0xffff0000u) | pair;
  return int(d);
}

// ---------------------------------------------------------------- matrix instructions
// Operand layouts from [CALC] (CDNA3, no modifiers; "Matrix element to register mapping"):
//   v_mfma_f32_16x16x16_f16 / _bf16 (clang: ..._16x16x16f16, ..._16x16x16bf16_1k):
//     A[i][k]: lane 16 * floor(k / 4) + i, element k % 4 of the 4 x 16-bit operand
//     B[k][j]: lane 16 * floor(k / 4) + j, element k % 4
//   v_mfma_f32_16x16x32_fp8_fp8: A[i][k]: lane 16 * floor(k / 8) + i, byte k % 8 of the 64-bit operand;
//     B[k][j]: lane 16 * floor(k / 8) + j, byte k % 8
//   v_smfmac_f32_16x16x64_fp8_fp8 (A 4:2 sparse, 16 x 64 logical):
//     A[i][k]: lane 16 * floor(k / 16) + i, 16-bit slot floor(k / 4) % 4 of the 2 x 32-bit operand (two
//       stored bytes per group of 4 along K, low byte first)
//     compression[i][k]: same lane, bits 4 * (floor(k / 4) % 4) .. +3 of the index operand (ABID = 0): the
//       low 2 bits give the position in the group of the first stored byte, the high 2 bits that of the
//       second ([CALC] README, "Example of Printing Compression Index Information")
//     B[k][j]: lane 16 * floor(k / 16) + j, byte k % 16 of the 4 x 32-bit operand
//   C/D[i][j] (all four): lane 16 * floor(i / 4) + j, element i % 4.
// gfx950 ([CDNA4]) keeps these instructions and layouts, with OCP e4m3fn as "FP8"; the calculator has no CDNA4
// tables (1.3.2), so the gfx950 runs rely on that statement.
// Arithmetic: D = C + sum_k A[i][k] * B[k][j]. Products of these formats are exact; the instruction's internal
// summation order and precision are not documented: the emulator sums in double and rounds once to f32.
namespace emu {

enum class MatFmt { kF16, kBf16, kFp8 };

struct MfmaArg {
  uint64_t a[2];  // up to 128 bits of A (sparse: 64)
  uint64_t b[2];
  float c[4];
  int idx;        // SMFMAC compression indices
  float d[4];
};

inline float mat_elem(MatFmt f, uint64_t word, int e) {
  switch (f) {
    case MatFmt::kF16: {
      const uint16_t h = uint16_t(word >> (16 * e));
      if (opts().mfma_flush_f16_denormals && (h & 0x7c00) == 0) return (h & 0x8000) ? -0.f : 0.f;
      return half_to_float(h);
    }
    case MatFmt::kBf16:
      return bf16_to_float(uint16_t(word >> (16 * e)));
    default:
#if defined(__gfx942__)
      return fp8_decode(uint32_t(word >> (8 * e)), true);
#else
      return fp8_decode(uint32_t(word >> (8 * e)), false);
#endif
  }
}

// Dense 16 x 16 x K: `per_lane` K elements per lane in consecutive element slots of a/b (K = 4 * per_lane).
template <MatFmt F, int kPerLane>
inline void mfma_dense_wave(Wave& w) {
  if (w.arrived != ~uint64_t(0)) fail("MFMA executed by a partial wave (EXEC != all lanes)");
  MfmaArg* arg[kWaveSize];
  for (int l = 0; l < kWaveSize; ++l) arg[l] = static_cast<MfmaArg*>(w.args[l]);
  constexpr int kBitsPerElem = F == MatFmt::kFp8 ? 8 : 16;
  constexpr int kK = 4 * kPerLane;
  auto elem = [&](const uint64_t* v, int e) {
    return mat_elem(F, v[(e * kBitsPerElem) / 64], e % (64 / kBitsPerElem));
  };
  float A[16][kK], B[kK][16];
  for (int l = 0; l < kWaveSize; ++l) {
    for (int e = 0; e < kPerLane; ++e) {
      const int k = kPerLane * (l / 16) + e;
      int src = l;
      if (opts().fault == 3 && F == MatFmt::kFp8 && l == 1) src = 2;  // planted: B fragment of the wrong lane
      A[l % 16][k] = elem(arg[l]->a, e);
      B[k][l % 16] = elem(arg[src]->b, e);
    }
  }
  for (int l = 0; l < kWaveSize; ++l) {
    for (int g = 0; g < 4; ++g) {
      const int i = 4 * (l / 16) + g, j = l % 16;
      double s = arg[l]->c[g];
      for (int k = 0; k < kK; ++k) s += double(A[i][k]) * double(B[k][j]);
      arg[l]->d[g] = float(s);
    }
  }
}

inline void smfmac_fp8_wave(Wave& w) {
  if (w.arrived != ~uint64_t(0)) fail("SMFMAC executed by a partial wave (EXEC != all lanes)");
  MfmaArg* arg[kWaveSize];
  for (int l = 0; l < kWaveSize; ++l) arg[l] = static_cast<MfmaArg*>(w.args[l]);
  float A[16][64] = {}, B[64][16];
  for (int l = 0; l < kWaveSize; ++l) {
    const int i = l % 16, k0 = 16 * (l / 16);
    int idx = arg[l]->idx & 0xffff;  // ABID = 0: the low 16 bits
    if (opts().fault == 1 && l == 17) idx ^= 0xaaaa;  // planted: one lane's index pattern picks the other pair
    for (int g = 0; g < 4; ++g) {
      const uint32_t slot = uint32_t(arg[l]->a[0] >> (16 * g)) & 0xffff;
      const int nib = (idx >> (4 * g)) & 0xf;
      const int p0 = nib & 3, p1 = nib >> 2;
      if (p0 == p1) fail("SMFMAC: lane %d group %d stores two values at position %d", l, g, p0);
      A[i][k0 + 4 * g + p0] = mat_elem(MatFmt::kFp8, slot, 0);
      A[i][k0 + 4 * g + p1] = mat_elem(MatFmt::kFp8, slot, 1);
    }
    for (int e = 0; e < 16; ++e) B[k0 + e][l % 16] = mat_elem(MatFmt::kFp8, arg[l]->b[e / 8], e % 8);
  }
  for (int l = 0; l < kWaveSize; ++l) {
    for (int g = 0; g < 4; ++g) {
      const int i = 4 * (l / 16) + g, j = l % 16;
      double s = arg[l]->c[g];
      for (int k = 0; k < 64; ++k) s += double(A[i][k]) * double(B[k][j]);
      arg[l]->d[g] = float(s);
    }
  }
}

inline void check_modifiers(const char* what, int cbsz, int abid, int blgp) {
  if (cbsz != 0 || abid != 0 || blgp != 0) fail("%s: CBSZ/ABID/BLGP modifiers are not emulated", what);
}

inline emu_f32x4 run_mfma(const char* op, WaveFn fn, MfmaArg& a, emu_f32x4 c) {
  for (int g = 0; g < 4; ++g) a.c[g] = c[g];
  wave_collective(op, fn, &a);
  return emu_f32x4{a.d[0], a.d[1], a.d[2], a.d[3]};
}

}  // namespace emu

inline emu_f32x4 __builtin_amdgcn_mfma_f32_16x16x16f16(emu_f16x4 a, emu_f16x4 b, emu_f32x4 c, int cbsz, int abid,
                                                        int blgp) {
  emu::check_modifiers("v_mfma_f32_16x16x16_f16", cbsz, abid, blgp);
  emu::MfmaArg arg{};
  arg.a[0] = __builtin_bit_cast(uint64_t, a);
  arg.b[0] = __builtin_bit_cast(uint64_t, b);
  return emu::run_mfma("v_mfma_f32_16x16x16_f16", emu::mfma_dense_wave<emu::MatFmt::kF16, 4>, arg, c);
}

inline emu_f32x4 __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(emu_i16x4 a, emu_i16x4 b, emu_f32x4 c, int cbsz,
                                                           int abid, int blgp) {
  emu::check_modifiers("v_mfma_f32_16x16x16_bf16", cbsz, abid, blgp);
  emu::MfmaArg arg{};
  arg.a[0] = __builtin_bit_cast(uint64_t, a);
  arg.b[0] = __builtin_bit_cast(uint64_t, b);
  return emu::run_mfma("v_mfma_f32_16x16x16_bf16", emu::mfma_dense_wave<emu::MatFmt::kBf16, 4>, arg, c);
}

inline emu_f32x4 __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(long a, long b, emu_f32x4 c, int cbsz, int abid,
                                                            int blgp) {
  emu::check_modifiers("v_mfma_f32_16x16x32_fp8_fp8", cbsz, abid, blgp);
  emu::MfmaArg arg{};
  arg.a[0] = uint64_t(a);
  arg.b[0] = uint64_t(b);
  return emu::run_mfma("v_mfma_f32_16x16x32_fp8_fp8", emu::mfma_dense_wave<emu::MatFmt::kFp8, 8>, arg, c);
}

inline emu_f32x4 __builtin_amdgcn_smfmac_f32_16x16x64_fp8_fp8(emu_i32x2 a, emu_i32x4 b, emu_f32x4 c, int idx,
                                                              int cbsz, int abid) {
  emu::check_modifiers("v_smfmac_f32_16x16x64_fp8_fp8", cbsz, abid, 0);
  emu::MfmaArg arg{};
  arg.a[0] = __builtin_bit_cast(uint64_t, a);
  arg.b[0] = uint64_t(uint32_t(b[0])) | (uint64_t(uint32_t(b[1])) << 32);
  arg.b[1] = uint64_t(uint32_t(b[2])) | (uint64_t(uint32_t(b[3])) << 32);
  arg.idx = idx;
  return emu::run_mfma("v_smfmac_f32_16x16x64_fp8_fp8", emu::smfmac_fp8_wave, arg, c);
}

// The compile-check shim: index variables, __lane_id, __syncthreads, __shfl_xor (HIP's definitions).
#include "../compile_check/hip_min.h"

// The shim's __launch_bounds__ is AMDGPU attributes, which host C++ rejects; the bounds themselves are checked
// against the planned launches by the tests (tests/test_amd_emulator.py).
#undef __launch_bounds__
#define __launch_bounds__(...)
