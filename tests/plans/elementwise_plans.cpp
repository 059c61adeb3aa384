// Host program for tests/test_elementwise_plans.py: the launch plans of rms_norm / fused_add_rms_norm
// (rmsnorm_plan.h), silu_and_mul (swiglu_plan.h) and quantize_fp8 (quantize_plan.h) for a model device, one
// problem per line of stdin, one JSON object per line of stdout. Torch- and GPU-free: g++ builds it.
//
//   rms <vendor> <sms> <warp> <smem> <smem_per_sm> <smem_reserved> <active_clusters> <ctas_per_sm> <cluster>
//       <persistent> <cap> <rows> <hidden> <in_off> <in_stride> <out_off> <out_stride> <out_bytes> <residual>
//   swiglu <sms> <d> <rows> <in_off> <in_stride> <out_off> <out_stride> <out_bytes>
//   quant <sms> <d> <rows> <in_off> <in_stride> <out_off> <out_stride>
//   overrides <name> <value>   sets the variable (value "-": unsets it), then reads rms_norm_overrides()
//
// vendor: 0 NVIDIA, 1 AMD. Addresses are a 4 KiB-aligned base plus the given byte offsets; the weight and the
// residual lie on it. active_clusters / ctas_per_sm answer the plan's occupancy queries (the device model);
// cluster, persistent and cap are the overrides (FP8DK_RMSNORM_CLUSTER, _PERSISTENT, _CTAS_PER_SM; -1: none).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>

#include "quant_fp8/quantize_plan.h"
#include "rmsnorm_fp8/rmsnorm_plan.h"
#include "swiglu_fp8/swiglu_plan.h"

namespace {

const void* address(long long offset) { return reinterpret_cast<const void*>((1LL << 32) + offset); }

void print_dims(const char* name, const fp8dk::Dims& d) { std::printf("\"%s\": [%u, %u, %u]", name, d.x, d.y, d.z); }

fp8dk::DeviceProps device(int vendor, int sms, int warp, int smem, int smem_per_sm = 0, int smem_reserved = 0) {
  fp8dk::DeviceProps d;
  d.vendor = vendor == 0 ? fp8dk::Vendor::kNvidia : fp8dk::Vendor::kAmd;
  d.sms = sms;
  d.warp_size = warp;
  d.max_smem_per_block = smem;
  d.smem_per_sm = smem_per_sm;
  d.smem_reserved_per_block = smem_reserved;
  return d;
}

void rms(std::istringstream& in) {
  int vendor, sms, warp, smem, smem_per_sm, smem_reserved, active_clusters, ctas_per_sm, residual, out_bytes, hidden;
  long long rows, in_off, in_stride, out_off, out_stride;
  fp8dk::RmsNormOverrides o;
  in >> vendor >> sms >> warp >> smem >> smem_per_sm >> smem_reserved >> active_clusters >> ctas_per_sm >> o.cluster >>
      o.persistent >> o.ctas_per_sm >> rows >> hidden >> in_off >> in_stride >> out_off >> out_stride >> out_bytes >>
      residual;
  const fp8dk::RmsNormProblem s{address(in_off), residual ? address(1 << 30) : nullptr,
                                address((1LL << 31) + out_off), address(3LL << 30), rows, in_stride, out_stride,
                                hidden, out_bytes};
  int cluster_queries = 0, persistent_queries = 0;
  fp8dk::RmsNormOccupancy occupancy;
  occupancy.active_clusters = [&](const fp8dk::RmsNormPlan&) { return ++cluster_queries, active_clusters; };
  occupancy.persistent_ctas_per_sm = [&](int) { return ++persistent_queries, ctas_per_sm; };
  const fp8dk::RmsNormPlan p =
      fp8dk::plan_rms_norm(s, device(vendor, sms, warp, smem, smem_per_sm, smem_reserved), o, occupancy);
  const fp8dk::RmsNormSplit& r = p.split;
  std::printf("{\"kernel\": %d, ", static_cast<int>(p.kernel));
  print_dims("grid", p.grid);
  std::printf(", ");
  print_dims("block", p.block);
  std::printf(", \"smem\": %d, \"cluster_ctas\": %d, \"chunks\": %d, \"aligned\": %d, \"threads_per_row\": %d, "
              "\"group_shift\": %d, \"lane_mask\": %d, \"rows_per_block\": %d, \"staged_slots\": %d, "
              "\"cluster_queries\": %d, \"persistent_queries\": %d}\n",
              p.smem_bytes, p.cluster_ctas, p.chunks, p.aligned ? 1 : 0, r.threads_per_row, r.group_shift,
              r.lane_mask, r.rows_per_block, r.staged_slots, cluster_queries, persistent_queries);
}

template <class Plan>
void print_elementwise(const Plan& p) {
  std::printf("{\"width\": %d, ", p.width);
  print_dims("grid", p.shape.grid);
  std::printf(", ");
  print_dims("block", p.shape.block);
  std::printf("}\n");
}

void swiglu(std::istringstream& in) {
  int sms, out_bytes;
  long long d, rows, in_off, in_stride, out_off, out_stride;
  in >> sms >> d >> rows >> in_off >> in_stride >> out_off >> out_stride >> out_bytes;
  print_elementwise(fp8dk::plan_silu_and_mul(address(in_off), address((1LL << 31) + out_off), out_bytes, d, rows,
                                             in_stride, out_stride, device(0, sms, 32, 0)));
}

void quant(std::istringstream& in) {
  int sms;
  long long d, rows, in_off, in_stride, out_off, out_stride;
  in >> sms >> d >> rows >> in_off >> in_stride >> out_off >> out_stride;
  print_elementwise(fp8dk::plan_quantize_fp8(address(in_off), address((1LL << 31) + out_off), d, rows, in_stride,
                                             out_stride, device(0, sms, 32, 0)));
}

void overrides(std::istringstream& in) {
  std::string name, value;
  in >> name >> value;
  if (value == "-") {
    unsetenv(name.c_str());
  } else {
    setenv(name.c_str(), value.c_str(), 1);
  }
  fp8dk::tuning::reload();
  const fp8dk::RmsNormOverrides o = fp8dk::rms_norm_overrides();
  std::printf("{\"cluster\": %d, \"persistent\": %d, \"ctas_per_sm\": %d}\n", o.cluster, o.persistent,
              o.ctas_per_sm);
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string op;
    in >> op;
    try {
      if (op == "rms") rms(in);
      else if (op == "swiglu") swiglu(in);
      else if (op == "quant") quant(in);
      else if (op == "overrides") overrides(in);
      else return std::fprintf(stderr, "unknown op %s\n", op.c_str()), 2;
    } catch (const std::exception& e) {
      std::string what = e.what();
      for (char& c : what) c = c == '"' ? '\'' : c;
      std::printf("{\"error\": \"%s\"}\n", what.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}
