"""Lower clang-19's AMDGPU LLVM IR for a newer AMDGPU processor with Triton's bundled LLVM.

Debian's clang-19 cannot target gfx950, but the `triton` wheel ships a newer LLVM that can. check.py emits
the kernel TU as LLVM IR with clang-19 (preprocessed as for gfx950: ``-U__gfx942__ -D__gfx950__``), runs the
two AMDGPU IR passes that clang's own codegen would run first (opt-19 ``amdgpu-promote-kernel-arguments,
infer-address-spaces``) and then this script, with a Python that has triton installed:

    python retarget_amdgpu.py IN.ll gfx950 OUT.s

The processor and feature attributes, triple and data layout that clang-19 wrote are dropped so that
Triton's LLVM fills in its own for the new processor. Reading clang-19's textual IR with a newer LLVM is not a
stable interface; a parse error here is reported as such by check.py, not as a kernel failure.
"""

import re
import sys


def strip_target_info(ir: str, proc: str) -> str:
    """Point every function at `proc` and drop what ties the module to clang-19's target description."""
    ir = re.sub(r'"target-cpu"="[^"]*"', f'"target-cpu"="{proc}"', ir)
    ir = re.sub(r'"target-features"="[^"]*"', "", ir)
    ir = re.sub(r"^target (triple|datalayout) = .*$", "", ir, flags=re.M)
    return ir


def lower_to_asm(ir: str, proc: str) -> str:
    from triton._C.libtriton import amd, llvm  # imported late: only this helper needs triton

    llvm.init_targets()
    triple = amd.get_target_triple(proc)
    # (ir, triple, proc, features, flags, enable_fp_fusion, is_object, canonicalize_gep)
    return llvm.translate_to_asm(strip_target_info(ir, proc), triple, proc, "", [], True, False, False)


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    src, proc, out = argv[1:]
    with open(src, encoding="utf-8") as f:
        ir = f.read()
    asm = lower_to_asm(ir, proc)
    with open(out, "w", encoding="utf-8") as f:
        f.write(asm)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
