#pragma once
// What every op's plan function takes from the device and gives back: plain values, no torch and no vendor
// headers, so that the launchers, the host plan tests (tests/plans/) and the AMD emulator share one plan per op.
// A launcher gathers DeviceProps (common/device_info.h: device_props()), reads its overrides
// (common/tuning.h), calls its op's plan function once and launches what the plan says.
namespace fp8dk {

// A grid or block extent (CUDA's dim3 without the runtime header).
struct Dims {
  unsigned x = 1, y = 1, z = 1;
};

enum class Vendor { kNvidia, kAmd };

// CTAs of a thread-block cluster that every sm_90+ device runs (the portable cluster size): the most any
// plan asks for.
constexpr int kMaxClusterCtas = 8;

struct DeviceProps {
  Vendor vendor = Vendor::kNvidia;
  int sms = 0;                  // multiprocessors (NVIDIA SMs, AMD CUs)
  int warp_size = 32;           // the kernels' compile-time warp width: 32, or 64 on AMD
  int max_smem_per_block = 0;   // dynamic shared memory a block may use once it opts in (AMD: LDS per workgroup)
  int smem_per_sm = 0;          // shared memory one SM holds for all its CTAs (0: unknown)
  int smem_reserved_per_block = 0;  // of it, what the runtime keeps for each CTA (NVIDIA sm_80+: 1 KB)
};

// Static shared memory a kernel may declare and still be held to its cap by smem_for_ctas_per_sm.
constexpr int kCappedStaticSmem = 1024;

// Dynamic shared memory that holds a kernel to at most `ctas` CTAs per SM: one CTA more would not fit beside
// them, whatever the kernel's static shared memory (up to kCappedStaticSmem). The block scheduler otherwise
// fills an SM up to its registers and threads, so a PDL launch's CTAs pile onto the few SMs the kernel before
// it has already left (up to 6 RMSNorm CTAs on one SM at batch 32 on an H100, each the slower for it:
// benchmarks/decode_trace.py, docs/experiments/README.md item 59). 0 (no request) where `ctas` < 1 or the
// device's figures are unknown.
inline int smem_for_ctas_per_sm(const DeviceProps& d, int ctas) {
  if (ctas < 1 || d.smem_per_sm <= 0) return 0;
  constexpr int kGranule = 256;
  // More than a (ctas + 1)-th of the SM with the reserve: ctas + 1 CTAs do not fit.
  const int bytes = (d.smem_per_sm / (ctas + 1) + 1 - d.smem_reserved_per_block + kGranule - 1) / kGranule * kGranule;
  // And `ctas` of them still do, with their reserve and static shared memory.
  const int footprint = bytes + d.smem_reserved_per_block + kCappedStaticSmem;
  if (bytes <= 0 || bytes > d.max_smem_per_block || static_cast<long long>(footprint) * ctas > d.smem_per_sm) return 0;
  return bytes;
}

}  // namespace fp8dk
