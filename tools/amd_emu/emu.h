// emu.h -- a CPU SIMT emulator for the AMD (gfx942 / gfx950) device code of this repository: the launch model
// (waves of 64 lanes, workgroup barriers, LDS) and every AMD builtin the kernels use, implemented from AMD's and
// LLVM's public documentation. Test-only: built by tools/amd_emu/build.py, never part of the Hub build.
//
// Execution model
//   * A launch runs its workgroups one after another (in an order tests can change: forward, reverse,
//     shuffled). The work-items of a workgroup are fibers (ucontext) of one OS thread, grouped into waves of
//     64 consecutive flat work-item ids, as the hardware forms wavefronts.
//   * A fiber runs until it reaches a synchronisation point and then yields:
//       - a wave collective (ds_bpermute, MFMA/SMFMAC): it deposits its operands; the last live lane of the
//         wave to arrive executes the instruction for the whole wave. Lanes of one wave that wait at
//         different collectives, or at a collective while another lane waits at the workgroup barrier, are
//         divergent code around a wave-wide instruction: the emulator stops with an error. A collective that
//         reads a lane which has already exited is an error too (the kernels must not depend on it).
//       - s_barrier (__syncthreads): released when every work-item of the workgroup that has not exited is
//         waiting at it (waves that ended do not count, CDNA3 ISA "S_BARRIER").
//     No progress possible while work-items remain is a deadlock: error.
//   * Global memory is host memory allocated by the driver with exact sizes; the driver is built with
//     AddressSanitizer, so any access outside a buffer fails the run (the emulator's memcheck). Dynamic LDS
//     (extern __shared__) is a per-launch region poisoned for ASan beyond the launch's dynamic size and
//     filled with 0xff bytes before every workgroup (an uninitialised read gives NaN / garbage, not zeros).
//   * Any failure prints "amd_emu: error: ..." and exits with status 3.
//
// Sources cited below:
//   [CDNA3]  AMD Instinct MI300 ISA Reference Guide (CDNA3), instruction descriptions.
//   [CDNA4]  AMD Instinct MI350 ISA Reference Guide (CDNA4).
//   [LLVM]   LLVM AMDGPUUsage.rst ("AMDGPU LLVM IR intrinsics" table) and clang's BuiltinsAMDGPU.def
//            (builtin operand lists and types).
//   [CALC]   AMD Matrix Instruction Calculator 1.3.2 (github.com/ROCm/amd_matrix_instruction_calculator),
//            CDNA3 register layouts; the generated tables are committed in tools/amd_emu/calculator/ and
//            tests/test_amd_emulator.py checks these implementations against them.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#endif

namespace emu {

constexpr int kWaveSize = 64;

[[noreturn]] inline void fail(const char* fmt, ...) {
  std::fflush(stdout);
  std::fputs("amd_emu: error: ", stderr);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
  std::fflush(stderr);
  std::_Exit(3);
}

// The hardware behaviours the documentation leaves open, the scheduling order, and the test-only fault switch.
// Set from the command line by the driver (key=value; see driver.cpp).
struct Options {
  // v_exp_f32 / v_rcp_f32 are documented to 1 ulp [LLVM]: an inexact result is moved this many ulps (-1, 0,
  // +1, in magnitude) from the correctly rounded value.
  int sfu_ulp = 0;
  // gfx942 v_cvt_pk_fp8_f32 on a negative value that rounds to zero (-0.0 included): 1 = writes 0x80 (the
  // e4m3fnuz NaN), 0 = writes 0x00. Undocumented (issue 19, question 1).
  int fnuz_negative_zero_nan = 0;
  // v_cvt_pk_fp8_f32 on a value beyond the format's maximum: 1 = saturates, 0 = NaN. Undocumented (the
  // kernels clamp first).
  int cvt_overflow_saturates = 0;
  // gfx942 f16 MFMA flushes f16 subnormal inputs to zero: 1 = yes. Undocumented (issue 19, question 2).
  int mfma_flush_f16_denormals = 0;
  // Order of the fibers of a workgroup within a scheduling pass (0: by work-item id, 1: reversed) and of the
  // workgroups of a launch (0: forward, 1: reversed, 2: shuffled with `seed`).
  int reverse_lanes = 0;
  int block_order = 0;
  unsigned seed = 1;
  // Planted faults for the mutation tests (0: none). See driver.cpp for the list.
  int fault = 0;
};
inline Options& opts() {
  static Options o;
  return o;
}

// ------------------------------------------------------------------------------------------ machine state

enum class State : uint8_t { kReady, kWave, kBarrier, kDone };

struct Lane {
  ucontext_t ctx;
  State state = State::kReady;
  unsigned id[3] = {0, 0, 0};  // workitem id x, y, z
  int flat = 0;
  int wave = 0;
  int lane = 0;
  char* stack = nullptr;
  void* fake_stack = nullptr;
};

struct Wave;
using WaveFn = void (*)(Wave&);

struct Wave {
  uint64_t live = 0;     // lanes that have not exited
  uint64_t arrived = 0;  // lanes waiting at the pending collective
  const char* op = nullptr;
  WaveFn fn = nullptr;
  void* args[kWaveSize] = {};
  std::vector<Lane>* lanes = nullptr;
  int first = 0;  // flat id of lane 0
};

struct Machine {
  unsigned grid[3] = {1, 1, 1};   // workgroups per dimension
  unsigned block[3] = {1, 1, 1};  // work-items per workgroup per dimension
  unsigned group[3] = {0, 0, 0};  // current workgroup id
  std::vector<Lane> lanes;
  std::vector<Wave> waves;
  int live = 0;
  int at_barrier = 0;
  Lane* cur = nullptr;
  ucontext_t sched;
  const void* sched_stack_bottom = nullptr;
  size_t sched_stack_size = 0;
  void* sched_fake_stack = nullptr;
  std::vector<char*> stacks;
  size_t stack_bytes = 256 * 1024;
  const std::function<void()>* body = nullptr;
  // Dynamic LDS regions (the kernels' extern __shared__ arrays), each kDynLdsBytes long.
  std::vector<unsigned char*> dyn_lds;
  size_t dyn_lds_bytes = 0;  // of the current launch
  long long launches = 0, groups_run = 0, collectives = 0, barriers = 0;
};
inline Machine& M() {
  static Machine m;
  return m;
}

// Room reserved for each extern __shared__ array: 64 KB is the LDS of a gfx942 workgroup; the rest stays
// poisoned so that an access past the launch's dynamic size is reported.
constexpr size_t kDynLdsBytes = 160 * 1024;
constexpr size_t kDynLdsReserve = 256 * 1024;

inline Lane& cur() {
  if (M().cur == nullptr) fail("device builtin called outside a kernel launch");
  return *M().cur;
}

// ------------------------------------------------------------------------------------------ fibers

inline void switch_to_sched() {
  Machine& m = M();
  Lane& l = cur();
#if defined(EMU_ASAN)
  __sanitizer_start_switch_fiber(&l.fake_stack, m.sched_stack_bottom, m.sched_stack_size);
#endif
  swapcontext(&l.ctx, &m.sched);
#if defined(EMU_ASAN)
  __sanitizer_finish_switch_fiber(l.fake_stack, nullptr, nullptr);
#endif
}

// Runs the pending collective of `w` once every live lane has arrived.
inline void maybe_run_collective(Wave& w) {
  if (w.arrived == 0 || w.arrived != w.live) return;
  M().collectives++;
  w.fn(w);
  std::vector<Lane>& lanes = *w.lanes;
  for (int i = 0; i < kWaveSize; ++i)
    if (w.arrived >> i & 1) lanes[w.first + i].state = State::kReady;
  w.arrived = 0;
  w.op = nullptr;
  w.fn = nullptr;
}

inline void maybe_release_barrier() {
  Machine& m = M();
  if (m.at_barrier == 0 || m.at_barrier != m.live) return;
  m.barriers++;
  for (Lane& l : m.lanes)
    if (l.state == State::kBarrier) l.state = State::kReady;
  m.at_barrier = 0;
}

// A wave-wide instruction: `arg` points at this lane's operands/results (on its fiber stack, alive while it
// waits); the last live lane to arrive runs fn for all.
inline void wave_collective(const char* op, WaveFn fn, void* arg) {
  Machine& m = M();
  Lane& l = cur();
  Wave& w = m.waves[l.wave];
  if (w.arrived != 0 && w.op != op)
    fail("divergent wave: lanes of wave %d of workgroup (%u,%u,%u) wait at '%s' and '%s'", l.wave, m.group[0],
         m.group[1], m.group[2], w.op, op);
  w.op = op;
  w.fn = fn;
  w.args[l.lane] = arg;
  w.arrived |= uint64_t(1) << l.lane;
  l.state = State::kWave;
  if (w.arrived == w.live) {
    maybe_run_collective(w);
    return;
  }
  switch_to_sched();
}

inline void workgroup_barrier() {
  Machine& m = M();
  Lane& l = cur();
  if (opts().fault == 5) return;  // planted: the barrier does not wait
  l.state = State::kBarrier;
  m.at_barrier++;
  if (m.at_barrier == m.live) {
    maybe_release_barrier();
    return;
  }
  switch_to_sched();
}

inline void fiber_entry() {
  Machine& m = M();
#if defined(EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &m.sched_stack_bottom, &m.sched_stack_size);
#endif
  (*m.body)();
  Lane& l = cur();
  l.state = State::kDone;
  m.live--;
  Wave& w = m.waves[l.wave];
  w.live &= ~(uint64_t(1) << l.lane);
  maybe_run_collective(w);
  maybe_release_barrier();
#if defined(EMU_ASAN)
  __sanitizer_start_switch_fiber(nullptr, m.sched_stack_bottom, m.sched_stack_size);
#endif
  // returns through uc_link to the scheduler
}

inline const char* state_name(State s) {
  switch (s) {
    case State::kReady: return "ready";
    case State::kWave: return "wave-collective";
    case State::kBarrier: return "barrier";
    default: return "done";
  }
}

inline void run_workgroup(const unsigned g[3]) {
  Machine& m = M();
  const int n = int(m.block[0] * m.block[1] * m.block[2]);
  m.group[0] = g[0], m.group[1] = g[1], m.group[2] = g[2];
  while (int(m.stacks.size()) < n) m.stacks.push_back(static_cast<char*>(std::malloc(m.stack_bytes)));
  m.lanes.assign(n, Lane{});
  const int nw = (n + kWaveSize - 1) / kWaveSize;
  m.waves.assign(nw, Wave{});
  for (int w = 0; w < nw; ++w) {
    m.waves[w].lanes = &m.lanes;
    m.waves[w].first = w * kWaveSize;
    const int count = std::min(kWaveSize, n - w * kWaveSize);
    m.waves[w].live = count == 64 ? ~uint64_t(0) : (uint64_t(1) << count) - 1;
  }
  for (int i = 0; i < n; ++i) {
    Lane& l = m.lanes[i];
    l.flat = i;
    l.id[0] = unsigned(i) % m.block[0];
    l.id[1] = unsigned(i) / m.block[0] % m.block[1];
    l.id[2] = unsigned(i) / (m.block[0] * m.block[1]);
    l.wave = i / kWaveSize;
    l.lane = i % kWaveSize;
    l.stack = m.stacks[i];
    getcontext(&l.ctx);
    l.ctx.uc_stack.ss_sp = l.stack;
    l.ctx.uc_stack.ss_size = m.stack_bytes;
    l.ctx.uc_link = &m.sched;
    makecontext(&l.ctx, fiber_entry, 0);
  }
  for (unsigned char* p : m.dyn_lds) std::memset(p, 0xff, m.dyn_lds_bytes);
  m.live = n;
  m.at_barrier = 0;
  m.groups_run++;
  for (;;) {
    bool progress = false;
    for (int j = 0; j < n; ++j) {
      Lane& l = m.lanes[opts().reverse_lanes ? n - 1 - j : j];
      if (l.state != State::kReady) continue;
      progress = true;
      m.cur = &l;
#if defined(EMU_ASAN)
      __sanitizer_start_switch_fiber(&m.sched_fake_stack, l.stack, m.stack_bytes);
#endif
      swapcontext(&m.sched, &l.ctx);
#if defined(EMU_ASAN)
      __sanitizer_finish_switch_fiber(m.sched_fake_stack, nullptr, nullptr);
#endif
      m.cur = nullptr;
    }
    if (m.live == 0) return;
    if (!progress) {
      std::fprintf(stderr, "amd_emu: deadlock in workgroup (%u,%u,%u); work-item states:\n", g[0], g[1], g[2]);
      for (const Lane& l : m.lanes)
        if (l.state != State::kDone)
          std::fprintf(stderr, "  work-item %d (wave %d lane %d): %s%s%s\n", l.flat, l.wave, l.lane,
                       state_name(l.state), l.state == State::kWave ? " " : "",
                       l.state == State::kWave ? m.waves[l.wave].op : "");
      fail("deadlock (divergent barrier or wave collective)");
    }
  }
}

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// Runs body() as the kernel of a launch of `grid` x `block` work-items with `dyn_lds` bytes of dynamic LDS.
inline void launch(Dim3 grid, Dim3 block, size_t dyn_lds, const std::function<void()>& body) {
  Machine& m = M();
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (threads == 0 || threads > 1024) fail("illegal workgroup size %llu (gfx9: 1..1024)", threads);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) fail("empty grid");
  // HSA dispatch: the grid size in work-items is a 32-bit value per dimension.
  if (1ull * grid.x * block.x > 0xffffffffull || 1ull * grid.y * block.y > 0xffffffffull ||
      1ull * grid.z * block.z > 0xffffffffull)
    fail("grid too large for an HSA dispatch");
  if (dyn_lds > kDynLdsBytes) fail("dynamic LDS %zu bytes beyond the emulator's region", dyn_lds);
  m.grid[0] = grid.x, m.grid[1] = grid.y, m.grid[2] = grid.z;
  m.block[0] = block.x, m.block[1] = block.y, m.block[2] = block.z;
  m.body = &body;
  m.dyn_lds_bytes = dyn_lds;
  m.launches++;
#if defined(EMU_ASAN)
  for (unsigned char* p : m.dyn_lds) {
    ASAN_UNPOISON_MEMORY_REGION(p, kDynLdsReserve);
    ASAN_POISON_MEMORY_REGION(p + dyn_lds, kDynLdsReserve - dyn_lds);
  }
#endif
  std::vector<unsigned> order(size_t(grid.x) * grid.y * grid.z);
  for (size_t i = 0; i < order.size(); ++i) order[i] = unsigned(i);
  if (opts().block_order == 1) std::reverse(order.begin(), order.end());
  if (opts().block_order == 2) {
    std::mt19937 rng(opts().seed);
    std::shuffle(order.begin(), order.end(), rng);
  }
  for (unsigned flat : order) {
    const unsigned g[3] = {flat % grid.x, flat / grid.x % grid.y, unsigned(flat / (1ull * grid.x * grid.y))};
    run_workgroup(g);
  }
  m.body = nullptr;
}

// ------------------------------------------------------------------------------------------ numerics helpers

inline uint32_t bits(float x) { return __builtin_bit_cast(uint32_t, x); }
inline float from_bits(uint32_t u) { return __builtin_bit_cast(float, u); }
inline bool is_subnormal(float x) { return x != 0.f && std::fabs(x) < 0x1p-126f; }

// `r` moved by `ulps` steps in magnitude (sign-magnitude bit pattern), staying finite and non-zero.
inline float nudge(float r, int ulps) {
  if (ulps == 0 || r == 0.f || !std::isfinite(r)) return r;
  const uint32_t u = bits(r);
  const uint32_t mag = (u & 0x7fffffffu) + uint32_t(ulps);
  if (mag == 0 || mag >= 0x7f800000u) return r;
  return from_bits((u & 0x80000000u) | mag);
}

// FP8 e4m3 decode: fnuz (gfx942 "FP8", bias 8, 0x80 = NaN, no -0) or OCP e4m3fn (gfx950, bias 7, 0x7f/0xff =
// NaN). [CDNA3] "Data formats: FP8"; [CDNA4] OCP FP8; exact in float.
inline float fp8_decode(uint32_t byte, bool fnuz) {
  byte &= 0xff;
  const int bias = fnuz ? 8 : 7;
  if (fnuz ? byte == 0x80 : (byte & 0x7f) == 0x7f) return NAN;
  const float sign = byte & 0x80 ? -1.f : 1.f;
  const int e = (byte >> 3) & 0xf, man = byte & 7;
  if (e == 0) return sign * std::ldexp(float(man), 1 - bias - 3);
  return sign * std::ldexp(float(8 + man), e - bias - 3);
}

// FP8 e4m3 encode of one float with round-to-nearest-even: the conversion of V_CVT_PK_FP8_F32 [CDNA3]/[CDNA4]
// ("round to nearest even"). What the ISA guides do not state is taken from opts(): the sign of a result that
// rounds to zero in e4m3fnuz (no -0 there) and a value beyond the maximum (NaN or saturation).
inline uint32_t fp8_encode(float x, bool fnuz) {
  const uint32_t sign = (bits(x) >> 24) & 0x80u;
  const uint32_t nan = fnuz ? 0x80u : (sign | 0x7fu);
  if (std::isnan(x)) return nan;
  const int bias = fnuz ? 8 : 7;
  const double max = fnuz ? 240.0 : 448.0;
  const uint32_t max_bits = fnuz ? 0x7fu : 0x7eu;
  const double ax = std::fabs(double(x));
  double r = 0.0;
  if (!std::isinf(ax) && ax != 0.0) {
    int e;
    std::frexp(ax, &e);                          // ax = f * 2^e, f in [0.5, 1): binade exponent e - 1
    const int q = std::max(e - 1, 1 - bias) - 3;  // quantum: 3 mantissa bits, fixed spacing below the normals
    r = std::nearbyint(std::ldexp(ax, -q));       // default rounding mode: nearest even
    r = std::ldexp(r, q);
  }
  if (std::isinf(ax) || r > max) return opts().cvt_overflow_saturates ? (sign | max_bits) : nan;
  if (r == 0.0) {
    if (!fnuz) return sign;  // OCP keeps the sign: +-0
    return sign && opts().fnuz_negative_zero_nan ? 0x80u : 0x00u;
  }
  int e;
  std::frexp(r, &e);
  uint32_t code;
  if (e - 1 < 1 - bias) {
    code = uint32_t(std::ldexp(r, bias + 2));  // subnormal: r / 2^(1 - bias - 3)
  } else {
    const uint32_t man = uint32_t(std::ldexp(r, -(e - 1) + 3)) - 8u;
    code = (uint32_t(e - 1 + bias) << 3) | man;
  }
  return sign | code;
}

inline float half_to_float(uint16_t h) { return float(__builtin_bit_cast(_Float16, h)); }
inline float bf16_to_float(uint16_t h) { return from_bits(uint32_t(h) << 16); }

}  // namespace emu
