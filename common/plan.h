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
};

}  // namespace fp8dk
