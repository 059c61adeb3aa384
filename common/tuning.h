#pragma once
// Tuning overrides: the FP8DK_* environment variables that force a plan's choices (benchmarks and tests; the
// README lists them). Each is read once per process, on first use, and kept; reload() forgets what was read,
// so that a test that changes the environment sees the change (the op fp8_decode_kernels._reload_tuning).
// An unset or empty variable is "no override". A malformed value throws std::invalid_argument naming the
// variable and what it takes (Python sees a ValueError), on every call that reads it.
// Host code only and torch-free: launchers, host plan tests and the AMD emulator include it as written.
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

namespace fp8dk::tuning {

namespace detail {
struct Cache {
  std::mutex mutex;
  std::map<std::string, std::optional<std::string>> values;
};
inline Cache& cache() {
  static Cache c;
  return c;
}
[[noreturn]] inline void reject(const char* name, const std::string& value, const char* expected) {
  throw std::invalid_argument(std::string(name) + " must be " + expected + ", got '" + value + "'");
}
// `value` as a whole decimal integer; false where it is anything else.
inline bool parse_integer(const std::string& value, long& x) {
  char* end = nullptr;
  x = std::strtol(value.c_str(), &end, 10);
  return *end == '\0';
}
}  // namespace detail

// The variable's value as first read in this process; nullopt when unset or empty.
inline std::optional<std::string> raw(const char* name) {
  detail::Cache& c = detail::cache();
  const std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.values.find(name);
  if (it == c.values.end()) {
    const char* v = std::getenv(name);
    std::optional<std::string> value;
    if (v != nullptr && *v != '\0') value = std::string(v);
    it = c.values.emplace(name, std::move(value)).first;
  }
  return it->second;
}

inline bool is_set(const char* name) { return raw(name).has_value(); }

// A decimal integer in [lo, hi]; `unset` when the variable is unset or empty.
inline int integer(const char* name, int lo, int hi, int unset, const char* expected) {
  const std::optional<std::string> v = raw(name);
  if (!v) return unset;
  long x = 0;
  if (!detail::parse_integer(*v, x) || x < lo || x > hi) detail::reject(name, *v, expected);
  return static_cast<int>(x);
}

// A decimal integer out of `allowed`; `unset` when the variable is unset or empty.
inline int choice(const char* name, std::initializer_list<int> allowed, int unset, const char* expected) {
  const std::optional<std::string> v = raw(name);
  if (!v) return unset;
  long x = 0;
  bool ok = false;
  if (detail::parse_integer(*v, x))
    for (const int a : allowed) ok = ok || x == a;
  if (!ok) detail::reject(name, *v, expected);
  return static_cast<int>(x);
}

// 0 or 1 as a bool; `unset` when the variable is unset or empty.
inline bool flag(const char* name, bool unset) {
  const std::optional<std::string> v = raw(name);
  if (!v) return unset;
  if (*v != "0" && *v != "1") detail::reject(name, *v, "0 or 1");
  return *v == "1";
}

// Forget every value read so far: the next read looks at the environment again.
inline void reload() {
  detail::Cache& c = detail::cache();
  const std::lock_guard<std::mutex> lock(c.mutex);
  c.values.clear();
}

}  // namespace fp8dk::tuning
