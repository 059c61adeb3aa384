// driver.cpp -- runs the AMD paths of the four kernels under the CPU wave emulator (emu.h), one launch per
// process, for tests/test_amd_emulator.py. Built once per target (gfx942 / gfx950) by tools/amd_emu/build.py:
// the kernels' headers compile as host C++ under the ROCm build's macros (USE_ROCM, __HIP_PLATFORM_AMD__,
// __HIP_DEVICE_COMPILE__, __gfx942__ or __gfx950__), with tools/amd_emu/hip_min.h as the HIP layer.
//
//   driver <op> dir=<dir> key=value ...
//
// Buffers are files <dir>/<name>.bin (the bytes of a tensor's storage span). Each is copied into a heap block
// of exactly that size (plus `<name>_off` leading bytes that stay ASan-poisoned, to give the pointer any
// alignment), the launch runs, and every buffer is written back to <dir>/<name>.bin.out. Every launch is
// printed as "launch <kernel> grid=x,y,z block=x,y,z lds=<dynamic bytes> ..." before it runs.
//
// Host side: what the ROCm launchers (quant_fp8/quantize.cu, swiglu_fp8/swiglu.cu, rmsnorm_fp8/rmsnorm.cu,
// skinny_gemm/skinny_gemm.cu + skinny_gemm_launch.cuh) do on ROCm, for an emulated device (MI300X: 304 CUs,
// 64 KB LDS per workgroup; MI355X: 256 CUs, 160 KB). Every op's plan is the launcher's own, compiled here as
// it is (quantize_plan.h, swiglu_plan.h, rmsnorm_plan.h, skinny_gemm/skinny_gemm_launch_plan.h) and called with
// the emulated device's properties; the rest of the launch (dtype dispatch, the workspace) is restated in the
// op_* functions, each naming what it follows.
//
// Ops: quant, swiglu, rmsnorm, gemm (the kernels); mfma, cvt (single instructions, for the layout and
// conversion tests); selftest (kernels that break the emulator's rules: each must stop with an error); options (see emu::Options): sfu_ulp, fnuz_negative_zero_nan, cvt_overflow_saturates,
// mfma_flush_f16_denormals, reverse_lanes, block_order, seed, fault, device (mi300x / mi355x), dry=1 (plan and
// print the launches, run nothing).
//
// Planted faults (fault=N, the mutation tests): 1 SMFMAC: lane 17's sparse index pattern selects the other
// pair; 2 v_cvt_pk_fp8_f32 saturates one FP8 step below the maximum; 3 v_mfma_f32_16x16x32_fp8_fp8: lane 1
// takes lane 2's B fragment; 4 ds_bpermute: lane 5 reads its source's neighbour; 5 the workgroup barrier
// does not wait (every s_barrier returns at once).
#include "common/launch.h"  // tools/amd_emu/shim/launch.h (see build.py)
#include "quant_fp8/quantize_kernels.cuh"
#include "quant_fp8/quantize_plan.h"
#include "rmsnorm_fp8/rmsnorm_kernels.cuh"
#include "rmsnorm_fp8/rmsnorm_plan.h"
#include "skinny_gemm/skinny_gemm_kernels.cuh"
#include "skinny_gemm/skinny_gemm_launch_plan.h"
#include "swiglu_fp8/swiglu_kernels.cuh"
#include "swiglu_fp8/swiglu_plan.h"

#include <climits>
#include <map>
#include <string>

// The kernels' dynamic LDS (extern __shared__ arrays), see hip_min.h.
namespace fp8dk {
thread_local Pack<16> staged[emu::kDynLdsReserve / sizeof(Pack<16>)];
namespace skinny {
alignas(16) thread_local unsigned char smem[emu::kDynLdsReserve];
}
}  // namespace fp8dk

namespace {

using emu::fail;

std::map<std::string, std::string> g_args;
std::string g_dir;
bool g_dry = false;

struct Device {
  const char* name;
  int sms;        // compute units
  int lds_bytes;  // LDS one workgroup may use
};
Device g_dev;

// The emulated device as the plan functions see it (common/plan.h).
fp8dk::DeviceProps props() {
  fp8dk::DeviceProps d;
  d.vendor = fp8dk::Vendor::kAmd;
  d.sms = g_dev.sms;
  d.warp_size = fp8dk::kWarpSize;
  d.max_smem_per_block = g_dev.lds_bytes;
  return d;
}

std::string arg(const std::string& key, const char* dflt = nullptr) {
  auto it = g_args.find(key);
  if (it != g_args.end()) return it->second;
  if (dflt == nullptr) fail("missing argument %s", key.c_str());
  return dflt;
}
long long iarg(const std::string& key, long long dflt = LLONG_MIN) {
  auto it = g_args.find(key);
  if (it != g_args.end()) return std::stoll(it->second);
  if (dflt == LLONG_MIN) fail("missing argument %s", key.c_str());
  return dflt;
}

// ------------------------------------------------------------------------------------------ buffers

struct Buffer {
  unsigned char* block = nullptr;  // what malloc returned
  unsigned char* data = nullptr;   // block + offset
  size_t bytes = 0, offset = 0;
};
std::map<std::string, Buffer> g_bufs;

std::string path_of(const std::string& name) { return g_dir + "/" + name + ".bin"; }

// The buffer `name`, or nullptr when the test passed none.
unsigned char* buf(const std::string& name) {
  auto it = g_bufs.find(name);
  if (it != g_bufs.end()) return it->second.data;
  FILE* f = std::fopen(path_of(name).c_str(), "rb");
  if (f == nullptr) return nullptr;
  std::fseek(f, 0, SEEK_END);
  const long size = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  Buffer b;
  b.bytes = size_t(size);
  b.offset = size_t(iarg(name + "_off", 0));
  b.block = static_cast<unsigned char*>(std::aligned_alloc(64, (b.offset + b.bytes + 64) / 64 * 64));
  b.data = b.block + b.offset;
  if (b.bytes && std::fread(b.data, 1, b.bytes, f) != b.bytes) fail("short read of %s", name.c_str());
  std::fclose(f);
#if defined(EMU_ASAN)
  // The allocation is 64-byte aligned and rounded up: poison the lead-in and the tail ourselves.
  ASAN_POISON_MEMORY_REGION(b.block, b.offset);
  ASAN_POISON_MEMORY_REGION(b.data + b.bytes, (b.offset + b.bytes + 64) / 64 * 64 - b.offset - b.bytes);
#endif
  g_bufs[name] = b;
  return b.data;
}

unsigned char* need(const std::string& name) {
  unsigned char* p = buf(name);
  if (p == nullptr && g_dry) {
    // A plan only: a made-up 64-byte aligned address (plus `<name>_off`), never dereferenced.
    return reinterpret_cast<unsigned char*>(uintptr_t(1) << 40) + iarg(name + "_off", 0);
  }
  if (p == nullptr) fail("missing buffer %s", name.c_str());
  return p;
}

// A zero-filled scratch allocation of exactly `bytes` (workspace, counters, a realigned copy of `a`).
template <class T>
T* scratch(const std::string& name, size_t count) {
  Buffer b;
  b.bytes = count * sizeof(T);
  b.block = static_cast<unsigned char*>(std::calloc(b.bytes + 1, 1));
  b.data = b.block;
#if defined(EMU_ASAN)
  ASAN_POISON_MEMORY_REGION(b.data + b.bytes, 1);
#endif
  g_bufs[name] = b;
  return reinterpret_cast<T*>(b.data);
}

void write_back() {
  for (auto& [name, b] : g_bufs) {
    FILE* f = std::fopen((path_of(name) + ".out").c_str(), "wb");
    if (f == nullptr) fail("cannot write %s", name.c_str());
    if (b.bytes) std::fwrite(b.data, 1, b.bytes, f);
    std::fclose(f);
  }
}

// ------------------------------------------------------------------------------------------ launches

// Launches `body` (one work-item's kernel call) with shape `s`, after checking that the shape is legal on the
// emulated device; `static_lds`: the kernel's __shared__ variables (bytes, from the source).
void run(const char* kernel, const fp8dk::LaunchShape& s, int static_lds, const std::function<void()>& body) {
  const long long threads = 1LL * s.block.x * s.block.y * s.block.z;
  std::printf("launch %s grid=%u,%u,%u block=%u,%u,%u lds=%d static_lds=%d\n", kernel, s.grid.x, s.grid.y, s.grid.z,
              s.block.x, s.block.y, s.block.z, s.smem_bytes, static_lds);
  if (threads < 1 || threads > 1024) fail("%s: %lld work-items per workgroup (1..1024)", kernel, threads);
  if (s.cluster.x * s.cluster.y * s.cluster.z != 1) fail("%s: thread-block clusters on ROCm", kernel);
  if (s.smem_bytes < 0 || s.smem_bytes + static_lds > g_dev.lds_bytes)
    fail("%s: %d + %d bytes of LDS, more than %s's %d", kernel, s.smem_bytes, static_lds, g_dev.name,
         g_dev.lds_bytes);
  if (s.grid.y > 65535 || s.grid.z > 65535) fail("%s: grid y/z beyond 65535", kernel);
  if (g_dry) return;
  emu::launch(emu::Dim3{s.grid.x, s.grid.y, s.grid.z}, emu::Dim3{s.block.x, s.block.y, s.block.z},
              size_t(s.smem_bytes), body);
}

template <class F>
void with_16bit(const std::string& s, F&& f) {
  if (s == "fp16") f(fp8dk::Fp16{});
  else if (s == "bf16") f(fp8dk::Bf16{});
  else fail("not a 16-bit format: %s", s.c_str());
}

template <class F>
void with_fp8(const std::string& s, F&& f) {
  if (s == "fn") f(fp8dk::E4m3fn{});
  else if (s == "fnuz") f(fp8dk::E4m3fnuz{});
  else fail("not an FP8 flavour: %s", s.c_str());
}

// An output format: "same" (the input's 16-bit format) or an FP8 flavour.
template <class In, class F>
void with_out(const std::string& s, F&& f) {
  if (s == "same") f(In{});
  else with_fp8(s, f);
}

template <int... Ws, class F>
void with_width(int w, F&& f) {
  bool done = false;
  ((w == Ws ? (f(std::integral_constant<int, Ws>{}), done = true) : false), ...);
  if (!done) fail("no kernel for width %d", w);
}

}  // namespace

// ------------------------------------------------------------------------------------------ the launchers' planning
// skinny_gemm's planning functions, copied verbatim from skinny_gemm.cu (tests/test_amd_emulator.py checks
// that each body still equals the launcher's), with stand-ins for what they call: the device attributes of
// the emulated device (common/device_info.h) and TORCH_CHECK.

#define TORCH_CHECK(cond, ...)                                                      \
  do {                                                                              \
    if (!(cond)) ::emu::fail("TORCH_CHECK(%s) failed in the launcher's plan", #cond); \
  } while (0)

namespace fp8dk {
inline int multiprocessor_count() { return g_dev.sms; }
inline int max_shared_memory_per_block() { return g_dev.lds_bytes; }
}  // namespace fp8dk


namespace {

// ------------------------------------------------------------------------------------------ quantize_fp8

// quant_fp8/quantize.cu: quantize_fp8(), launch().
void op_quant() {
  const int64_t d = iarg("d"), rows = iarg("rows"), in_stride = iarg("in_stride"), out_stride = iarg("out_stride");
  if (rows == 0 || d == 0) return;
  const auto* in = reinterpret_cast<const uint16_t*>(need("x"));
  auto* out = need("out");
  const auto* scale = reinterpret_cast<const float*>(need("scale"));
  const fp8dk::QuantizeFp8Plan plan = fp8dk::plan_quantize_fp8(in, out, d, rows, in_stride, out_stride, props());
  fp8dk::LaunchShape s;
  s.grid = fp8dk::to_dim3(plan.shape.grid);
  s.block = fp8dk::to_dim3(plan.shape.block);
  std::printf("plan store_width=%d\n", plan.width);
  with_16bit(arg("in"), [&](auto in_fmt) {
    with_fp8(arg("out"), [&](auto out_fmt) {
      with_width<16, 8, 4, 2, 1>(plan.width, [&](auto W) {
        run("quantize_fp8_kernel", s, 0, [&] {
          fp8dk::quantize_fp8_kernel<decltype(in_fmt), decltype(out_fmt), decltype(W)::value>(in, out, scale, int(d), rows, in_stride,
                                                                               out_stride);
        });
      });
    });
  });
}

// ------------------------------------------------------------------------------------------ silu_and_mul

// swiglu_fp8/swiglu.cu: launch().
void op_swiglu() {
  using namespace fp8dk::swiglu;
  const int64_t d = iarg("d"), rows = iarg("rows"), in_stride = iarg("in_stride"), out_stride = iarg("out_stride");
  if (rows == 0 || d == 0) return;
  const auto* in = reinterpret_cast<const uint16_t*>(need("x"));
  auto* out = need("out");
  const auto* scale = reinterpret_cast<const float*>(buf("scale"));
  with_16bit(arg("in"), [&](auto in_fmt) {
    using In = decltype(in_fmt);
    with_out<In>(arg("out"), [&](auto out_fmt) {
      using Out = decltype(out_fmt);
      const fp8dk::SiluAndMulPlan plan =
          fp8dk::plan_silu_and_mul(in, out, Out::kBytes, d, rows, in_stride, out_stride, props());
      fp8dk::LaunchShape s;
      s.grid = fp8dk::to_dim3(plan.shape.grid);
      s.block = fp8dk::to_dim3(plan.shape.block);
      std::printf("plan vector_width=%d\n", plan.width);
      with_width<8, 4, 2, 1>(plan.width, [&](auto W) {
        run("silu_and_mul_kernel", s, 0, [&] {
          fp8dk::silu_and_mul_kernel<In, Out, decltype(W)::value>(in, out, scale, int(d), rows, in_stride, out_stride);
        });
      });
    });
  });
}

// ------------------------------------------------------------------------------------------ rms_norm

// rmsnorm.cu: rms_norm_gpu(), launch().
void op_rmsnorm() {
  fp8dk::RmsNormParams p{};
  p.rows = iarg("rows");
  p.hidden = int(iarg("hidden"));
  p.input_stride = iarg("in_stride");
  p.out_stride = iarg("out_stride");
  p.eps = std::stof(arg("eps"));
  if (p.rows == 0) return;
  const bool residual = iarg("residual") != 0;
  p.input = reinterpret_cast<const uint16_t*>(need("x"));
  p.residual = residual ? reinterpret_cast<uint16_t*>(need("residual")) : nullptr;
  p.out = need("out");
  p.weight = reinterpret_cast<const uint16_t*>(need("weight"));
  p.scale = reinterpret_cast<const float*>(buf("scale"));
  const std::string out_fmt = arg("out");
  const int out_elem_bytes = out_fmt == "same" ? 2 : 1;
  const fp8dk::RmsNormProblem problem{p.input,  p.residual,     p.out,        p.weight,
                                      p.rows,   p.input_stride, p.out_stride, p.hidden,
                                      out_elem_bytes};
  const fp8dk::RmsNormPlan l = fp8dk::plan_rms_norm(problem, props(), {}, {});
  p.split = l.split;
  using Kernel = fp8dk::RmsNormKernel;
  const char* names[] = {"rms_norm_kernel<aligned>", "rms_norm_kernel<general>", "rms_norm_long_row_kernel"};
  std::printf("plan kernel=%d threads_per_row=%d rows_per_block=%d staged_slots=%d\n", int(l.kernel),
              p.split.threads_per_row, p.split.rows_per_block, p.split.staged_slots);
  fp8dk::LaunchShape shape;
  shape.grid = fp8dk::to_dim3(l.grid);
  shape.block = fp8dk::to_dim3(l.block);
  shape.smem_bytes = l.smem_bytes;
  const int static_lds = int(sizeof(float)) * fp8dk::kMaxWarps;  // scratch[kMaxWarps]
  with_16bit(arg("in"), [&](auto in_fmt) {
    using In = decltype(in_fmt);
    with_out<In>(out_fmt, [&](auto of) {
      using Out = decltype(of);
      auto go = [&](auto res) {
        constexpr bool kRes = decltype(res)::value;
        switch (l.kernel) {
          case Kernel::kAligned:
            run(names[0], shape, static_lds, [&] { fp8dk::rms_norm_kernel<In, Out, kRes, true>(p); });
            break;
          case Kernel::kGeneral:
            run(names[1], shape, static_lds, [&] { fp8dk::rms_norm_kernel<In, Out, kRes, false>(p); });
            break;
          case Kernel::kLongRow:
            run(names[2], shape, static_lds, [&] { fp8dk::rms_norm_long_row_kernel<In, Out, kRes>(p); });
            break;
          default:
            fail("rms_norm: the plan names an NVIDIA-only kernel on ROCm");
        }
      };
      if (residual) go(std::true_type{});
      else go(std::false_type{});
    });
  });
}

// ------------------------------------------------------------------------------------------ skinny_gemm

// skinny_gemm_launch.cuh's Kernels on ROCm, for the emulated device. The stream-K grid is sized from the CTAs a CU
// holds (hipOccupancyMaxActiveBlocksPerMultiprocessor): modelled as min(VGPR-bound workgroups per CU, the
// `occupancy` argument: 4, the gfx942 compile report's typical waves per SIMD for these kernels, one wave of a
// 4-wave workgroup per SIMD; LDS-bound; 8 = 32 waves per CU / 4). No clusters on ROCm.
class EmulatedOccupancy final : public fp8dk::skinny::Occupancy {
 public:
  int ctas_per_sm(int, int, int smem) const override {
    return std::min({int(iarg("occupancy", 4)), g_dev.lds_bytes / std::max(smem + 16, 1), 8});
  }
  int clusters_at_once(int, int, int, int) const override { return 0; }
  int copy_engine_clusters_at_once(const fp8dk::skinny::TmaPlan&) const override { return 0; }
};

// The driver arguments split_k, block_n (0: unset) and stream_k as the launcher's environment overrides, read by
// the launcher's own read_overrides().
fp8dk::skinny::Overrides overrides_from_args() {
  for (const auto& [arg_name, variable] : {std::pair{"split_k", "FP8DK_SKINNY_SPLIT_K"},
                                           std::pair{"block_n", "FP8DK_SKINNY_BLOCK_N"},
                                           std::pair{"stream_k", "FP8DK_SKINNY_STREAM_K"}}) {
    const std::string v = arg(arg_name, "");
    if (!v.empty() && !(v == "0" && std::string(arg_name) != "stream_k")) setenv(variable, v.c_str(), 1);
  }
  fp8dk::tuning::reload();
  return fp8dk::skinny::read_overrides();
}

// skinny_gemm_launch.cuh: launch_planned() for the portable kernel.
template <class Ab, class Out, int MP, int LB>
void launch_planned(const fp8dk::skinny::LaunchPlan& l, const unsigned char* a, const unsigned char* b,
                    uint16_t* out, const uint16_t* bias, const float* scale_a, const float* scale_b) {
  const fp8dk::skinny::Plan& p = l.portable;
  std::printf("plan wn=%d wk=%d block_n=%d tiles=%d split_k=%d stream_k=%d sub_iters=%d block_elems=%d "
              "b_access=%d mp=%d contributions=%d\n",
              p.wn, p.wk, p.block_n, p.tiles, p.split_k, p.stream_k, p.sub_iters, p.block_elems, LB, MP,
              l.workspace_slices);
  float* ws = nullptr;
  unsigned* counters = nullptr;
  if (l.workspace_slices > 0) {
    ws = scratch<float>("ws", size_t(l.workspace_slices) * p.m * p.n);
    for (size_t i = 0; i < size_t(l.workspace_slices) * p.m * p.n; ++i) ws[i] = NAN;
    counters = scratch<unsigned>("counters", size_t(p.tiles));
  }
  fp8dk::LaunchShape shape;
  shape.grid = dim3(l.grid_x, l.grid_y);
  shape.block = dim3(l.threads);
  shape.smem_bytes = l.smem;
  run("skinny_gemm_kernel", shape, 16 /* __shared__ unsigned arrived, padded */, [&] {
    fp8dk::skinny::skinny_gemm_kernel<Ab, Out, MP, LB>(a, b, out, bias, scale_a, scale_b, ws, counters, p);
  });
  if (counters != nullptr && !g_dry)
    for (int t = 0; t < p.tiles; ++t)
      if (counters[t] != 0) fail("skinny_gemm: arrival counter %d is %u after the launch (must be left zero)", t, counters[t]);
}

// skinny_gemm.cu: skinny_gemm(); skinny_gemm_launch.cuh: the portable kernel's template arguments.
void op_gemm() {
  const int m = int(iarg("m")), n = int(iarg("n")), k = int(iarg("k"));
  if (m == 0 || n == 0) return;
  const std::string ab = arg("ab");
  const bool fp8 = ab == "fn" || ab == "fnuz";
  const int eb = fp8 ? 1 : 2;
  const unsigned char* a = need("a");
  const unsigned char* b = need("b");
  auto* out = reinterpret_cast<uint16_t*>(need("out"));
  const auto* bias = reinterpret_cast<const uint16_t*>(buf("bias"));
  const auto* scale_a = reinterpret_cast<const float*>(buf("scale_a"));
  const auto* scale_b = reinterpret_cast<const float*>(buf("scale_b"));
  long long a_stride = iarg("a_stride");
  if (!fp8dk::is_aligned(a, 16) || (a_stride * eb) % 16 != 0) {
    // skinny_gemm(): rows of `a` copied to a buffer with 16-byte aligned rows (the K padding stays unread).
    const long long per_chunk = 16 / eb, padded = (k + per_chunk - 1) / per_chunk * per_chunk;
    auto* copy = scratch<unsigned char>("a_copy", size_t(m) * padded * eb);
    if (!g_dry)
      for (int r = 0; r < m; ++r) std::memcpy(copy + r * padded * eb, a + r * a_stride * eb, size_t(k) * eb);
    a = copy;
    a_stride = padded;
    std::printf("plan a_copied=1\n");
  }
  fp8dk::skinny::Problem q;
  q.m = m, q.n = n, q.k = k, q.elem_bytes = eb;
  q.a_stride = a_stride, q.b_stride = iarg("b_stride"), q.out_stride = iarg("out_stride");
  q.a_align = fp8dk::skinny::row_alignment(a, q.a_stride * eb, m);
  q.b_align = fp8dk::skinny::row_alignment(b, q.b_stride * eb, std::max(n, 2));
  fp8dk::skinny::DeviceProps d;
  d.vendor = fp8dk::skinny::Vendor::kAmd;
  d.cc_major = 0;
  d.sms = g_dev.sms;
  d.smem_per_block = g_dev.lds_bytes;
  d.copy_engine_code = false;
  fp8dk::skinny::LaunchPlan l;
  try {
    l = fp8dk::skinny::plan_skinny_gemm(q, d, overrides_from_args(), EmulatedOccupancy{});
  } catch (const std::exception& e) {
    fail("%s", e.what());
  }
  auto with_ab = [&](auto&& f) {
    if (ab == "fn") f(fp8dk::E4m3fn{});
    else if (ab == "fnuz") f(fp8dk::E4m3fnuz{});
    else with_16bit(ab, f);
  };
  with_ab([&](auto ab_fmt) {
    using Ab = decltype(ab_fmt);
    with_16bit(arg("out"), [&](auto out_fmt) {
      using Out = decltype(out_fmt);
      auto by_mp = [&](auto MP) {
        constexpr int kEb = Ab::kBytes;
        auto by_lb = [&](auto LB) {
          launch_planned<Ab, Out, decltype(MP)::value, decltype(LB)::value>(l, a, b, out, bias, scale_a, scale_b);
        };
        if (l.b_access == 16) by_lb(std::integral_constant<int, 16>{});
        else if (l.b_access == 8) by_lb(std::integral_constant<int, 8>{});
        else by_lb(std::integral_constant<int, kEb>{});
      };
      switch (l.mp) {
        case 8: by_mp(std::integral_constant<int, 8>{}); break;
        case 16: by_mp(std::integral_constant<int, 16>{}); break;
        case 24: by_mp(std::integral_constant<int, 24>{}); break;
        default: by_mp(std::integral_constant<int, 32>{}); break;
      }
    });
  });
}

// ------------------------------------------------------------------------------------------ single instructions

// One wave executes one matrix instruction with operands from regs.bin: per lane 16 bytes of A, 16 of B,
// 4 floats of C, the index word (SMFMAC), i.e. 52 bytes; D (4 floats per lane) goes to d.bin.
void op_mfma() {
  const std::string ins = arg("instr");
  auto* regs = need("regs");
  auto* d = reinterpret_cast<float*>(need("d"));
  fp8dk::LaunchShape s;
  s.grid = dim3(1);
  s.block = dim3(64);
  run(ins.c_str(), s, 0, [&] {
    const int lane = int(threadIdx.x);
    const unsigned char* r = regs + 52 * lane;
    uint64_t a[2], b[2];
    float c[4];
    int idx;
    std::memcpy(a, r, 16);
    std::memcpy(b, r + 16, 16);
    std::memcpy(c, r + 32, 16);
    std::memcpy(&idx, r + 48, 4);
    const emu_f32x4 cv = {c[0], c[1], c[2], c[3]};
    emu_f32x4 dv;
    if (ins == "v_mfma_f32_16x16x16_f16") {
      dv = __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(emu_f16x4, a[0]), __builtin_bit_cast(emu_f16x4, b[0]),
                                                 cv, 0, 0, 0);
    } else if (ins == "v_mfma_f32_16x16x16_bf16") {
      dv = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(__builtin_bit_cast(emu_i16x4, a[0]),
                                                     __builtin_bit_cast(emu_i16x4, b[0]), cv, 0, 0, 0);
    } else if (ins == "v_mfma_f32_16x16x32_fp8_fp8") {
      dv = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(long(a[0]), long(b[0]), cv, 0, 0, 0);
    } else if (ins == "v_smfmac_f32_16x16x64_fp8_fp8") {
      const emu_i32x4 bv = {int(uint32_t(b[0])), int(uint32_t(b[0] >> 32)), int(uint32_t(b[1])), int(uint32_t(b[1] >> 32))};
      dv = __builtin_amdgcn_smfmac_f32_16x16x64_fp8_fp8(__builtin_bit_cast(emu_i32x2, a[0]), bv, cv, idx, 0, 0);
    } else {
      fail("unknown instruction %s", ins.c_str());
    }
    for (int g = 0; g < 4; ++g) d[4 * lane + g] = dv[g];
  });
}

// x.bin: floats, a multiple of 4; y.bin: one FP8 byte each, through the quantize4 pattern of numerics.cuh
// (v_cvt_pk_fp8_f32 into bytes 0-1, then with word_sel into bytes 2-3 of the same word).
void op_cvt() {
  const auto* x = reinterpret_cast<const float*>(need("x"));
  auto* y = reinterpret_cast<uint32_t*>(need("y"));
  const long long words = iarg("count") / 4;
  fp8dk::LaunchShape s;
  s.grid = dim3(1);
  s.block = dim3(64);
  run("v_cvt_pk_fp8_f32", s, 0, [&] {
    for (long long w = threadIdx.x; w < words; w += 64) {
      int r = __builtin_amdgcn_cvt_pk_fp8_f32(x[4 * w], x[4 * w + 1], int(0xdeadbeef), false);
      r = __builtin_amdgcn_cvt_pk_fp8_f32(x[4 * w + 2], x[4 * w + 3], r, true);
      y[w] = uint32_t(r);
    }
  });
}

// Kernels that break the rules the emulator enforces, one per `case`; each must end in an emulator error.
void op_selftest() {
  const std::string c = arg("case");
  fp8dk::LaunchShape s;
  s.grid = dim3(1);
  s.block = dim3(128);
  s.smem_bytes = 256;
  run("selftest", s, 0, [&] {
    const int t = int(threadIdx.x);
    if (c == "shuffle_reads_exited_lane") {  // half a wave exits, the other half reads it
      if (t % 64 >= 32) return;
      (void)__shfl_xor(float(t), 32);
    } else if (c == "divergent_collectives") {  // lanes of one wave at two different wave-wide instructions
      if (t % 2) (void)__shfl_xor(1.f, 1);
      else (void)__builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(0, 0, emu_f32x4{0.f, 0.f, 0.f, 0.f}, 0, 0, 0);
    } else if (c == "barrier_in_divergent_code") {  // half of each wave at a barrier, the other half at a shuffle
      if (t % 64 < 32) __syncthreads();
      else (void)__shfl_xor(1.f, 1);
    } else if (c == "mfma_partial_wave") {  // an MFMA with EXEC != all lanes
      if (t % 64 == 63) return;
      (void)__builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(0, 0, emu_f32x4{0.f, 0.f, 0.f, 0.f}, 0, 0, 0);
    } else if (c == "lds_out_of_bounds") {  // one byte past the launch's dynamic LDS
      fp8dk::skinny::smem[t == 0 ? 256 : 0] = 1;
    } else if (c == "ok") {  // the rules kept: a shuffle, a barrier, an MFMA, dynamic LDS within bounds
      const float v = __shfl_xor(float(t), 1);
      if (v != float(t ^ 1)) fail("shuffle gave %f to work-item %d", double(v), t);
      __syncthreads();
      (void)__builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(0, 0, emu_f32x4{0.f, 0.f, 0.f, 0.f}, 0, 0, 0);
      fp8dk::skinny::smem[t] = 1;
    } else {
      fail("unknown selftest case %s", c.c_str());
    }
  });
}

}  // namespace

// ASan: report memory errors (exit status 4), not leaks (the driver frees nothing before it exits).
extern "C" const char* __asan_default_options() { return "detect_leaks=0:exitcode=4"; }

int main(int argc, char** argv) {
  if (argc < 2) fail("usage: driver <op> dir=<dir> key=value ...");
  for (int i = 2; i < argc; ++i) {
    const std::string s = argv[i];
    const size_t eq = s.find('=');
    if (eq == std::string::npos) fail("bad argument %s", s.c_str());
    g_args[s.substr(0, eq)] = s.substr(eq + 1);
  }
  g_dir = arg("dir", ".");
  g_dry = iarg("dry", 0) != 0;
  emu::Options& o = emu::opts();
  o.sfu_ulp = int(iarg("sfu_ulp", 0));
  o.fnuz_negative_zero_nan = int(iarg("fnuz_negative_zero_nan", 0));
  o.cvt_overflow_saturates = int(iarg("cvt_overflow_saturates", 0));
  o.mfma_flush_f16_denormals = int(iarg("mfma_flush_f16_denormals", 0));
  o.reverse_lanes = int(iarg("reverse_lanes", 0));
  o.block_order = int(iarg("block_order", 0));
  o.seed = unsigned(iarg("seed", 1));
  o.fault = int(iarg("fault", 0));
#if defined(__gfx942__)
  const char* dflt_dev = "mi300x";
#else
  const char* dflt_dev = "mi355x";
#endif
  const std::string dev = arg("device", dflt_dev);
  if (dev == "mi300x") g_dev = Device{"MI300X", 304, 64 * 1024};
  else if (dev == "mi355x") g_dev = Device{"MI355X", 256, 160 * 1024};
  else fail("unknown device %s", dev.c_str());
  emu::M().dyn_lds = {reinterpret_cast<unsigned char*>(fp8dk::staged), fp8dk::skinny::smem};

  const std::string op = argv[1];
  if (op == "quant") op_quant();
  else if (op == "swiglu") op_swiglu();
  else if (op == "rmsnorm") op_rmsnorm();
  else if (op == "gemm") op_gemm();
  else if (op == "mfma") op_mfma();
  else if (op == "cvt") op_cvt();
  else if (op == "selftest") op_selftest();
  else fail("unknown op %s", op.c_str());
  write_back();
  std::printf("stats launches=%lld workgroups=%lld collectives=%lld barriers=%lld\n", emu::M().launches,
              emu::M().groups_run, emu::M().collectives, emu::M().barriers);
  return 0;
}
