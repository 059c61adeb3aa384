"""Machine-code and hipify checks (tools/compile_check), run as tests.

* test_machine_code: every `<kernel>/machine_code.toml` x target (gfx942, sm_90a, gfx950) compiled and checked,
  and docs/MACHINE_CODE.md's section of it compared with what the same compiler makes now.
* test_hipify_rocm_sources: torch's hipify over the .cu of build.toml's rocm kernels leaves no CUDA API.
* the rest tests the harness itself, including on small synthetic kernels that must pass and must fail.

A missing tool is a skip with the reason outside CI, and a failure with CI=true (gfx950 stays optional).
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "compile_check"))
import check  # noqa: E402
import hipify_check  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() == "true"
MACHINE_CODE_PAGE = REPO / "docs" / "MACHINE_CODE.md"
REGENERATE = "regenerate it: python tools/compile_check/check.py report --markdown > docs/MACHINE_CODE.md"


def require_tools(target: str) -> None:
    """Skip (or, in CI, fail) when the tools for `target` ("hipify" for the hipify check) are missing."""
    finders = {"gfx942": [check.find_clang], "sm_90a": [check.find_nvcc, check.find_cuobjdump],
               "gfx950": [check.find_clang, check.find_triton_python],
               "hipify": [check.find_clang, hipify_check.find_torch_python]}
    try:
        for find in finders[target]:
            find()
    except check.ToolMissing as e:
        if IN_CI and target not in check.OPTIONAL_TARGETS:
            pytest.fail(f"CI=true and a required tool is missing: {e}")
        pytest.skip(str(e))


def _kernel_cases():
    cases = [pytest.param(p.parent.name, t, id=f"{p.parent.name}-{t}")
             for p in check.find_spec_paths(REPO) for t in check.TARGETS]
    return cases or [pytest.param(None, None, id="none",
                                  marks=pytest.mark.skip(reason=f"no kernel has a {check.SPEC_NAME} yet"))]


# ----------------------------------------------------------------------------------------------- the kernels


@pytest.mark.parametrize("kernel,target", _kernel_cases())
def test_machine_code(kernel, target):
    spec = check.load_spec(REPO / kernel / check.SPEC_NAME, REPO)
    require_tools(target)
    result = check.run_target(spec, target)
    if result.skipped:
        pytest.skip(result.skipped)
    check.demangle_all([f.name for f in result.functions])
    problems = check.evaluate(spec, result)
    if problems:
        pytest.fail(f"{kernel} on {target} ({spec.spec_path.relative_to(REPO)}):\n- " + "\n- ".join(problems),
                    pytrace=False)
    # The committed page must show this machine code, wherever it was made by the same compiler (another
    # compiler's counts may differ; then the page is not judged here).
    result.compiler = check.compiler_name(target)
    committed = check.page_section(MACHINE_CODE_PAGE.read_text(), kernel, target)
    assert committed is not None, f"docs/MACHINE_CODE.md has no {kernel} / {target} section; {REGENERATE}"
    if f"_{result.compiler}_" in committed:
        fresh = check.report_table(spec, result, problems)
        assert [line for line in committed if line] == [line for line in fresh if line], \
            f"docs/MACHINE_CODE.md's {kernel} / {target} section is stale; {REGENERATE}"


def test_hipify_rocm_sources():
    sources, _ = hipify_check.rocm_sources(REPO)
    if not any((REPO / s).is_file() for s in sources):
        pytest.skip("no .cu of a rocm kernel in build.toml exists yet")
    require_tools("hipify")
    report = hipify_check.check_tree(REPO)
    if report.problems:
        pytest.fail("CUDA API left in the ROCm build after hipify (tools/compile_check/README.md):\n- "
                    + "\n- ".join(report.problems) + "\nhint: " + hipify_check.HINT, pytrace=False)


# ----------------------------------------------------------------------------------------------- harness units


def test_page_section():
    page = "# t\n\n## k\n\n### k — gfx942\n\n_clang_\n\nrow\n\n### k — sm_90a\n\nx\n## m\n### m — sm_90a\ny\n"
    assert check.page_section(page, "k", "gfx942") == ["### k — gfx942", "", "_clang_", "", "row", ""]
    assert check.page_section(page, "k", "sm_90a") == ["### k — sm_90a", "", "x"]
    assert check.page_section(page, "m", "sm_90a") == ["### m — sm_90a", "y"]
    assert check.page_section(page, "m", "gfx942") is None


@pytest.mark.parametrize("pattern,mnemonic,expected", [
    ("LDG.E.128", "LDG.E.128", True),
    ("LDG.E.128", "LDG.E.128.CONSTANT", True),
    ("LDG.E.128", "LDG.E.64", False),
    ("LDG.E", "LDG.E.128", True),
    ("F2FP.SATFINITE.E4M3.F32.PACK_AB", "F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C", True),
    ("global_load_dword", "global_load_dwordx4", False),
    ("global_load_dwordx4", "global_load_dwordx4", True),
    ("v_exp_f32", "v_exp_f32_e32", True),
    ("v_exp_f32", "v_exp_f16_e32", False),
    ("scratch_", "scratch_load_dword", True),
    ("LDL", "LDLK", False),
    ("re:v_mfma_.*_fp8_fp8", "v_mfma_f32_16x16x32_fp8_fp8", True),
    ("re:v_mfma_.*_fp8_fp8", "v_mfma_f32_16x16x16f16", False),
])
def test_pattern_matching(pattern, mnemonic, expected):
    assert check.compile_pattern(pattern)(mnemonic) is expected


def test_parse_amdgpu_asm():
    asm = textwrap.dedent("""\
        \t.type\tk,@function
        k:                                      ; @k
        ; %bb.0:
        \tglobal_load_dwordx4 v[0:3], v[0:1], off   ; a comment
        \tv_cvt_pk_fp8_f32 v4, v0, v1
        \tv_cvt_pk_fp8_f32 v4, v2, v3 op_sel:[0,0,1]
        \ts_endpgm
        \t.amdhsa_kernel k
        \t\t.amdhsa_group_segment_fixed_size 256
        \t.end_amdhsa_kernel
        .Lfunc_end0:
        ; Kernel info:
        ; NumSgprs: 14
        ; NumVgprs: 6
        ; NumAgprs: 0
        ; ScratchSize: 0
        ; Occupancy: 8
        """)
    (fn,) = check.parse_amdgpu_asm(asm)
    assert fn.is_kernel and fn.name == "k"
    assert fn.counts == {"global_load_dwordx4": 1, "v_cvt_pk_fp8_f32": 2, "s_endpgm": 1}
    assert fn.resources == {"lds": 256, "sgpr": 14, "vgpr": 6, "agpr": 0, "scratch": 0, "occupancy": 8}


def test_parse_ptxas_and_sass():
    log = textwrap.dedent("""\
        ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90a'
        ptxas info    : Function properties for _Z1kPf
            8 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
        ptxas info    : Used 168 registers, used 1 barriers, 512 bytes smem, 360 bytes cmem[0]
        """)
    sass = textwrap.dedent("""\
        \t\tFunction : _Z1kPf
        \t.headerflags\t@"EF_CUDA_SM90"
                /*0070*/                   LDG.E.128.CONSTANT R4, desc[UR6][R4.64] ;   /* 0x0000000604047981 */
                /*00b0*/              @!P0 STL [R1], R4 ;                             /* 0x000fc8000001160d */
                /*00c0*/                   F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C R5, R5, R4, RZ ;
                /*00d0*/                   QGMMA.64x8x32.F32.E4M3.E4M3 R24, R28, gdesc[UR8], R24 ;
        """)
    (fn,) = check.sm90a_functions(log, sass)
    assert fn.is_kernel
    assert fn.resources["regs"] == 168 and fn.resources["spill"] == 12 and fn.resources["smem"] == 512
    assert fn.resources["occupancy"] == 12  # 168 regs x 32 lanes = 5376 per warp; 65536 / 5376 -> 12 warps
    assert check.count_matches(fn.counts, "LDG.E.128") == 1 and check.count_matches(fn.counts, "STL") == 1
    # Shapes inside a mnemonic ("64x8x32") belong to it: the 64x8 and 64x32 tensor-core forms are told apart.
    assert check.count_matches(fn.counts, "QGMMA.64x8x32.F32.E4M3.E4M3") == 1
    assert check.count_matches(fn.counts, "QGMMA.64x32x32") == 0


def test_regs_occupancy():
    assert check.regs_occupancy(32) == 64
    assert check.regs_occupancy(64) == 32
    assert check.regs_occupancy(255) == 8


def test_spec_rejects_unknown_keys(tmp_path):
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "k.cuh").write_text("")
    (tmp_path / "k" / check.SPEC_NAME).write_text('header = "k/k.cuh"\n[gfx942]\nrequires = {}\n')
    with pytest.raises(check.SpecError, match="unknown key"):
        check.load_spec(tmp_path / "k" / check.SPEC_NAME, tmp_path)
    (tmp_path / "k" / check.SPEC_NAME).write_text('header = "k/k.cuh"\n[sm_90a]\nmax = { vgpr = 1 }\n')
    with pytest.raises(check.SpecError, match="unknown resource"):
        check.load_spec(tmp_path / "k" / check.SPEC_NAME, tmp_path)


def test_repo_specs_are_valid():
    """Every machine_code.toml of the repo parses, names an existing header and only known keys."""
    paths = check.find_spec_paths(REPO)
    if not paths:
        pytest.skip(f"no kernel has a {check.SPEC_NAME} yet")
    for path in paths:
        check.load_spec(path, REPO)


# ----------------------------------------------------------------------------------------------- can it fail?

SYNTHETIC_HEADER = """\
#pragma once
// A 128-bit load and a packed fp32 -> fp8 conversion (kPacked), or a software conversion without either
// conversion instruction (!kPacked): what the real checks must tell apart.
#if defined(FP8DK_HIP_SHIM)
#include "hip_min.h"
typedef float f4_t __attribute__((ext_vector_type(4)));
#else
#include <cuda_fp8.h>
#include <stdint.h>
typedef float4 f4_t;
#endif

template <bool kPacked>
__global__ void __launch_bounds__(256) synth_kernel(const f4_t* __restrict__ in, uint32_t* __restrict__ out) {
  const unsigned i = blockIdx.x * 256 + threadIdx.x;
  const f4_t v = in[i];
  uint32_t lo, hi;
  if constexpr (kPacked) {
#if defined(FP8DK_HIP_SHIM)
    lo = __builtin_amdgcn_cvt_pk_fp8_f32(v.x, v.y, 0, false) & 0xffff;
    hi = __builtin_amdgcn_cvt_pk_fp8_f32(v.z, v.w, 0, false) & 0xffff;
#else
    lo = __nv_cvt_float2_to_fp8x2(make_float2(v.x, v.y), __NV_SATFINITE, __NV_E4M3);
    hi = __nv_cvt_float2_to_fp8x2(make_float2(v.z, v.w), __NV_SATFINITE, __NV_E4M3);
#endif
  } else {
    lo = (__builtin_bit_cast(uint32_t, v.x) >> 20) & 0xff;
    hi = (__builtin_bit_cast(uint32_t, v.z) >> 20) & 0xff;
  }
  out[i] = lo | (hi << 16);
}
"""

SYNTHETIC_SPEC = """\
header = "synth/synth.cuh"
instantiate = {instantiate}
[gfx942]
require = {{ global_load_dwordx4 = 1, v_cvt_pk_fp8_f32 = {n_cvt} }}
require_each = {{ v_cvt_pk_fp8_f32 = 1 }}
forbid = ["scratch_"]
[sm_90a]
require = {{ "LDG.E.128" = 1, "F2FP.SATFINITE.E4M3.F32.PACK_AB" = {n_cvt} }}
require_each = {{ "F2FP.SATFINITE.E4M3.F32.PACK_AB" = 1 }}
forbid = ["LDL", "STL"]
"""

PACKED = "template __global__ void synth_kernel<true>(const f4_t*, uint32_t*);"
SCALAR = "template __global__ void synth_kernel<false>(const f4_t*, uint32_t*);"


def synthetic_tree(root: Path, instantiate: list[str], n_cvt: int) -> check.KernelSpec:
    (root / "synth").mkdir(parents=True, exist_ok=True)
    (root / "synth" / "synth.cuh").write_text(SYNTHETIC_HEADER)
    spec_text = SYNTHETIC_SPEC.format(instantiate=repr(instantiate).replace("'", '"'), n_cvt=n_cvt)
    (root / "synth" / check.SPEC_NAME).write_text(spec_text)
    return check.load_spec(root / "synth" / check.SPEC_NAME, root)


@pytest.mark.parametrize("target", check.MANDATORY_TARGETS)
def test_synthetic_packed_kernel_passes(tmp_path, target):
    require_tools(target)
    spec = synthetic_tree(tmp_path, [PACKED], n_cvt=2)
    result = check.run_target(spec, target)
    assert check.evaluate(spec, result) == []
    kernel = result.kernels[0]
    assert check.count_matches(kernel.counts, spec.target(target).patterns()[0]) >= 1


@pytest.mark.parametrize("target", check.MANDATORY_TARGETS)
def test_synthetic_unmet_requirement_fails(tmp_path, target):
    require_tools(target)
    spec = synthetic_tree(tmp_path, [PACKED], n_cvt=5)  # the kernel has 2 packed conversions, not 5
    problems = check.evaluate(spec, check.run_target(spec, target))
    assert len(problems) == 1 and ">= 5" in problems[0] and "found 2" in problems[0], problems


@pytest.mark.parametrize("target", check.MANDATORY_TARGETS)
def test_synthetic_scalar_conversion_fails(tmp_path, target):
    """A kernel that lost its packed conversion fails require_each, naming that kernel."""
    require_tools(target)
    spec = synthetic_tree(tmp_path, [PACKED, SCALAR], n_cvt=2)
    result = check.run_target(spec, target)
    check.demangle_all([f.name for f in result.functions])
    problems = check.evaluate(spec, result)
    assert len(problems) == 1 and "synth_kernel<false>" in problems[0] and "require_each" in problems[0], problems


def test_cli_check_exit_status_and_report(tmp_path, capsys):
    require_tools("gfx942")
    synthetic_tree(tmp_path, [PACKED, SCALAR], n_cvt=2)
    assert check.main(["check", "--root", str(tmp_path), "--target", "gfx942", "--keep", str(tmp_path / "k")]) == 1
    out = capsys.readouterr().out
    assert "FAIL synth gfx942" in out and "synth_kernel<false>" in out
    assert (tmp_path / "k" / "synth.gfx942.s").is_file() and (tmp_path / "k" / "synth.cu").is_file()
    assert check.main(["report", "--root", str(tmp_path), "--target", "gfx942"]) == 0
    report = capsys.readouterr().out
    assert "| `synth_kernel<true>` |" in report and "**FAILS:**" in report


def test_compile_error_is_a_violation(tmp_path):
    require_tools("gfx942")
    spec = synthetic_tree(tmp_path, ["template __global__ void no_such_kernel<1>();"], n_cvt=2)
    problems = check.evaluate(spec, check.run_target(spec, "gfx942"))
    assert len(problems) == 1 and "clang-19 (gfx942) failed" in problems[0]


# ----------------------------------------------------------------------------------------------- hipify check

HIPIFY_BUILD_TOML = """\
[kernel.k_rocm]
backend = "rocm"
include = ["."]
src = ["common/dev.h", "k/k.cu"]
"""

HIPIFY_LAUNCHER = """\
#include <torch/all.h>
#include <c10/cuda/CUDAGuard.h>
#include "common/dev.h"
__global__ void kern(float* x) { x[threadIdx.x] = 0.f; }
void launch(torch::Tensor& x) {
  const at::cuda::OptionalCUDAGuard guard(device_of(x));   // torch name: fine on ROCm (hipify v2)
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();  // hipify converts cudaStream_t
  kern<<<1, 64, 0, stream>>>(x.data_ptr<float>());
  TORCH_CHECK(dev_count() > 0, "cudaGetDeviceCount failed");  // in a string: not code
}
"""

HIPIFY_HEADER = """\
#pragma once
#if defined(USE_ROCM)
#include <hip/hip_runtime.h>
#else
#include <cuda_runtime.h>      // NVIDIA branch: not compiled on ROCm, not flagged
inline void nv_only() { cudaDeviceSynchronize(); }
#endif
inline int dev_count() { int n = 0; cudaGetDeviceCount(&n); return n; }  // reaches hipcc unconverted
"""


def test_hipify_check_finds_unconverted_header(tmp_path):
    """common/dev.h is included as "common/dev.h" from k/, so hipify never rewrites it: its CUDA call is
    flagged; the .cu itself (converted) and the NVIDIA-only branch are clean."""
    require_tools("hipify")
    (tmp_path / "k").mkdir()
    (tmp_path / "common").mkdir()
    (tmp_path / "build.toml").write_text(HIPIFY_BUILD_TOML)
    (tmp_path / "k" / "k.cu").write_text(HIPIFY_LAUNCHER)
    (tmp_path / "common" / "dev.h").write_text(HIPIFY_HEADER)
    report = hipify_check.check_tree(tmp_path)
    assert report.checked == ["k/k.cu"]
    assert len(report.problems) == 1, report.problems
    assert "common/dev.h:8: `cudaGetDeviceCount`" in report.problems[0]


def test_hipify_check_skips_without_sources(tmp_path):
    (tmp_path / "build.toml").write_text(HIPIFY_BUILD_TOML)
    report = hipify_check.check_tree(tmp_path)
    assert report.checked == [] and report.missing == ["k/k.cu"] and report.problems == []
