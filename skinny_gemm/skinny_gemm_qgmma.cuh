#pragma once
// Skinny GEMM on Hopper, part 3: Hopper's native FP8 tensor-core instruction (wgmma, QGMMA in the SASS) on
// the copy-engine kernel's ring (skinny_gemm_tma.cuh). OCP e4m3 operands only (wgmma has no e4m3fnuz).
//
// A warpgroup (4 consumer warps) multiplies 64 weight rows of a box (the MMA's M) against the MP tokens of
// the activation box (its N) straight from shared memory: no ldmatrix and no FP8 unpack in the SM's ALUs,
// which is what bounds the mma.sync path at M >= 16 (per 8 KB of weights at M = 32 a warp pair issues 256
// FP8 -> f16 conversions and 128 HMMA).
//
// Accuracy. QGMMA multiplies exactly but sums each instruction's 32 products, and adds them to the
// accumulator, with a fraction of fp32's precision. cuBLASLt (torch._scaled_mm, use_fast_accum=False) lets
// it accumulate 4 instructions (K = 128) before adding into fp32 registers ("promotion"). Here every
// instruction starts from zero (scale-d = 0) into registers of its own, which are added into the fp32 sums
// in K order: the hardware's reduced precision covers 32 products, never a running sum.
//
// Descriptors (PTX ISA, "matrix descriptor" of wgmma): both operands K-major with the 128-byte swizzle the
// copy engine wrote: 8-row groups 1024 bytes apart (stride byte offset), the leading byte offset unused,
// each K step of 32 bytes a 32-byte advance of the start address inside the swizzle atom (the boxes start
// 1024-byte aligned, so the base offset is 0).
#include "common/platform.cuh"

// wgmma exists on sm_90a only (not sm_90, not later architectures).
#if defined(FP8DK_SM90) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FP8DK_QGMMA 1
#endif

namespace fp8dk {
namespace skinny {

constexpr int kQgmmaRows = 64;   // weight rows of one warpgroup's instruction
constexpr int kQgmmaKBytes = 32;  // K bytes (FP8 elements) of one instruction

#if defined(FP8DK_QGMMA)
// Shared-memory matrix descriptor of a K-major operand with the 128-byte swizzle at shared address `addr`.
FP8DK_DEVICE uint64_t qgmma_descriptor(uint32_t addr) {
  constexpr uint64_t kStrideBytes = 1024, kLeadingBytes = 16, kSwizzle128 = 1;
  return static_cast<uint64_t>((addr & 0x3ffff) >> 4) | ((kLeadingBytes >> 4) << 16) | ((kStrideBytes >> 4) << 32) |
         (kSwizzle128 << 62);
}

FP8DK_DEVICE void qgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
FP8DK_DEVICE void qgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
FP8DK_DEVICE void qgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
FP8DK_DEVICE void qgmma_wait_all_but_one() { asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory"); }

// Keeps the compiler from moving reads of an asynchronous instruction's result registers above the wait.
FP8DK_DEVICE void qgmma_fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// d = a[64 x 32] . b[8 * NT x 32]^T (e4m3 x e4m3 -> f32), d not read (scale-d false). d is the warpgroup's
// m64nN fragment: d[4 * j + i] is the mma.sync m16n8 C fragment element i of n-tile j of this warp's 16 rows.
template <int NT>
FP8DK_DEVICE void qgmma_e4m3(float (&d)[NT * 4], uint64_t a, uint64_t b);

template <>
FP8DK_DEVICE void qgmma_e4m3<1>(float (&d)[4], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "l"(a), "l"(b), "r"(0));
}

template <>
FP8DK_DEVICE void qgmma_e4m3<2>(float (&d)[8], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n}"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7])
      : "l"(a), "l"(b), "r"(0));
}

template <>
FP8DK_DEVICE void qgmma_e4m3<3>(float (&d)[12], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %14, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n24k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}, %12, %13, p, 1, 1;\n}"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11])
      : "l"(a), "l"(b), "r"(0));
}

template <>
FP8DK_DEVICE void qgmma_e4m3<4>(float (&d)[16], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1;\n}"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15])
      : "l"(a), "l"(b), "r"(0));
}

// Half a box: its K steps 2h and 2h + 1 (at `wrows`, `abox`) into registers of their own, as one group.
template <int NT>
FP8DK_DEVICE void qgmma_half(float (&part)[2][NT * 4], uint32_t wrows, uint32_t abox) {
  qgmma_fence();
#pragma unroll
  for (int s = 0; s < 2; ++s)
    qgmma_e4m3<NT>(part[s], qgmma_descriptor(wrows + s * kQgmmaKBytes), qgmma_descriptor(abox + s * kQgmmaKBytes));
  qgmma_commit();
}

// A landed half's two results added into acc in K order.
template <int NT>
FP8DK_DEVICE void qgmma_add_half(float (&acc)[NT][4], float (&part)[2][NT * 4]) {
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int r = 0; r < NT * 4; ++r) qgmma_fence_operand(part[s][r]);
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[j][i] += part[s][4 * j + i];
}

// One warpgroup's share of one box: its 64 weight rows starting at shared address `wrows` (a box row = 128
// bytes) against the NT * 8 token rows at `abox`, all 4 K steps of the box as one group, added into acc in K
// order once all 4 have landed.
template <int NT>
FP8DK_DEVICE void qgmma_box(float (&acc)[NT][4], uint32_t wrows, uint32_t abox) {
  constexpr uint32_t kHalfBytes = 2 * kQgmmaKBytes;
  float lo[2][NT * 4], hi[2][NT * 4];  // the box's K steps 0-1 and 2-3
  qgmma_fence();
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    qgmma_e4m3<NT>(lo[s], qgmma_descriptor(wrows + s * kQgmmaKBytes), qgmma_descriptor(abox + s * kQgmmaKBytes));
    qgmma_e4m3<NT>(hi[s], qgmma_descriptor(wrows + kHalfBytes + s * kQgmmaKBytes),
                   qgmma_descriptor(abox + kHalfBytes + s * kQgmmaKBytes));
  }
  qgmma_commit();
  qgmma_wait_all();
  qgmma_add_half<NT>(acc, lo);
  qgmma_add_half<NT>(acc, hi);
}

// Overlapped boxes. qgmma_box waits for all 4 of a box's instructions before its adds, and the next box's
// instructions wait for those adds: per box the tensor cores idle through a wait and 16 * NT adds, and after a
// run's last byte that idling is on the critical path (docs/experiments/README.md, items 107-108). Here a
// box's instructions go as two halves of 2, and a half's adds wait only for that half, while the tensor cores
// run the next. The sums are qgmma_box's to the bit: the same instructions into registers of their own, added
// into acc in the same K order.
//
// Two boxes `box_stride` bytes apart (a warpgroup's share of a full stage in every tiling the plan picks for
// wgmma), straight-line: a wgmma in flight across a branch makes ptxas serialize them all (C7518).
template <int NT>
FP8DK_DEVICE void qgmma_two_boxes(float (&acc)[NT][4], uint32_t wrows, uint32_t abox, uint32_t box_stride) {
  constexpr uint32_t kHalfBytes = 2 * kQgmmaKBytes;
  float lo[2][NT * 4], hi[2][NT * 4];  // a box's K steps 0-1 and 2-3
  qgmma_half<NT>(lo, wrows, abox);
  qgmma_half<NT>(hi, wrows + kHalfBytes, abox + kHalfBytes);
  qgmma_wait_all_but_one();
  qgmma_add_half<NT>(acc, lo);
  qgmma_half<NT>(lo, wrows + box_stride, abox + box_stride);
  qgmma_wait_all_but_one();
  qgmma_add_half<NT>(acc, hi);
  qgmma_half<NT>(hi, wrows + box_stride + kHalfBytes, abox + box_stride + kHalfBytes);
  qgmma_wait_all_but_one();
  qgmma_add_half<NT>(acc, lo);
  qgmma_wait_all();
  qgmma_add_half<NT>(acc, hi);
}
#endif

}  // namespace skinny
}  // namespace fp8dk
