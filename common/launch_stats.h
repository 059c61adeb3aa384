#pragma once
// What the launcher (common/launch.h) did in this process, for tests: host code, no vendor headers, so that
// torch-ext/torch_binding.cpp can report it on every backend.
#include <atomic>

namespace fp8dk {

// Launches captured to start at a foreign kernel's launch completion (launch.h, start_at_foreign_launch).
inline std::atomic<long long>& foreign_launch_starts() {
  static std::atomic<long long> count{0};
  return count;
}

// Launches told, under capture, that they start while a foreign kernel runs (launch.h, starts_during_foreign_kernel):
// skinny_gemm's plan then requests its whole ring before the PDL wait.
inline std::atomic<long long>& foreign_kernel_waits() {
  static std::atomic<long long> count{0};
  return count;
}

}  // namespace fp8dk
