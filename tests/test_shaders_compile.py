"""Every shader compiles with NVRTC for sm_90 (the H200) where NVRTC is installed (``pip install -e
'.[cuda]'`` or ``XINFER_NVRTC``), no GPU needed: a compile error shows up on a machine without one.
Skips where NVRTC is absent (CI); on the H200 the cuda tests load every kernel anyway.

The shaders are compiled as the backend compiles them (``_kernel.compile_shader``: the device's
target where a GPU is, else the H200's) through the cubin cache: a cached cubin is the output of a
compile of exactly this source, headers, options, arch and NVRTC version (its key), so reading it
proves the same as compiling again; a cold cache costs each shader's compile once (~320 s of one
core for all of them, most of the cpu suite's time otherwise), and the PTX checks below read the PTX
that compile made."""

import os
import re

import pytest
from _nvrtc_marks import needs_nvrtc

from xinfer_async.backends.cuda import CUDABackend
from xinfer_async.backends.cuda._kernel import compile_shader, shader_dir, shader_ptx
from xinfer_async.backends.cuda._precompile import ShaderTarget, device_target


SHADERS = sorted(f for f in os.listdir(shader_dir()) if f.endswith(".cu"))


@pytest.fixture(scope="module")
def target() -> ShaderTarget:
    """The GPU's target where one is, else the H200's (sm_90, 100 KB of staged tokens)."""
    return device_target() if CUDABackend.is_available()[0] else ShaderTarget("sm_90", 100 * 1024)


@needs_nvrtc
@pytest.mark.parametrize("name", SHADERS)
def test_shader_compiles_for_sm90(name, target):
    cubin = compile_shader(name[:-3], target.arch, target.stage_max, target.driver_version)
    assert cubin[:4] == b"\x7fELF"


#: PTX instructions that touch memory, synchronize or leave the kernel (predicate prefix allowed)
_MEMOP = re.compile(r"^(@!?%\w+\s+)?(ld|ldu|st|atom|red|cp|tex|suld|sust|ldmatrix|stmatrix|multimem|bar|barrier|"
                    r"ret|exit|prefetch|prefetchu|membar|fence|wmma|mma|call)\b")
_BRANCH = re.compile(r"^(@!?%\w+\s+)?bra(?:\.uni)?\s+(\$\w+);")


#: the weight streams' copies (xi_mvp_cp16: evict-first, nothing else uses that form) and their commits:
#: no kernel writes a weight, so the integer decode entries (xi_mvq.cuh: `_pq`, qmatmul_*) issue their
#: first stages before the wait; allowed there only (``weight_copies``)
_WEIGHT_COPY = re.compile(r"^(@!?%\w+\s+)?cp\.async\.(cg\.shared\.global\.L2::cache_hint\b|commit_group\b)")


def unwaited_ops(entry_ptx: str, weight_copies: bool = False) -> set[str]:
    """The instructions of one PTX entry that some path from its start reaches before any
    ``griddepcontrol.wait`` and that read or write memory, synchronize or return (parameter loads,
    ``prefetch...L2`` and, with ``weight_copies``, the weight streams' copies aside: ``_WEIGHT_COPY``):
    a forward must-analysis over the entry's branches; an indirect branch (``brx.idx``) may go to any
    label."""
    instrs, labels = [], {}
    for line in entry_ptx.split("\n"):
        line = line.split("//")[0].strip()
        if not line or line.startswith(".") or line in ("{", "}"):
            continue
        if re.match(r"^\$\w+:$", line):
            labels[line[:-1]] = len(instrs)
            continue
        instrs.append(line)
    waited: list[bool | None] = [None] * (len(instrs) + 1)  # None: not reached yet
    waited[0], work, bad = False, [0], set()
    while work:
        i = work.pop()
        if i >= len(instrs):
            continue
        ins, before = instrs[i], waited[i]
        after = before or ins.startswith("griddepcontrol.wait")
        m = _MEMOP.match(ins)
        if m and not before and not (m.group(2) == "ld" and ".param" in ins) \
                and not (m.group(2) == "prefetch" and ".L2" in ins) \
                and not (weight_copies and _WEIGHT_COPY.match(ins)):
            bad.add(ins)
        b = _BRANCH.match(ins)
        if b:
            succ = [labels[b.group(2)]] + ([i + 1] if b.group(1) else [])
        elif "brx.idx" in ins:
            succ = list(labels.values())
        elif re.match(r"^(@!?%\w+\s+)?(ret|exit)\b", ins):
            succ = [i + 1] if ins.startswith("@") else []
        else:
            succ = [i + 1]
        for j in succ:
            new = after if waited[j] is None else (waited[j] and after)
            if new != waited[j]:
                waited[j] = new
                work.append(j)
    return bad


def test_unwaited_ops_sees_every_path():
    """The checker below flags a load or a return that one branch reaches before the wait, even when
    another branch waits first (what a check of the text before the first wait would miss)."""
    ptx = """{
        ld.param.u32 %r1, [p];
        setp.eq.s32 %p1, %r1, 0;
        @%p1 bra $L__BB0_2;
        griddepcontrol.wait;
        ld.global.f32 %f1, [%rd1];
        ret;
    $L__BB0_2:
        ld.global.f32 %f2, [%rd2];
        griddepcontrol.wait;
        ret;
    }"""
    assert unwaited_ops(ptx) == {"ld.global.f32 %f2, [%rd2];"}
    assert unwaited_ops(ptx.replace("ld.global.f32 %f2, [%rd2];", "prefetch.global.L2 [%rd2];")) == set()
    early_return = "{\n @%p1 bra $L1;\n griddepcontrol.wait;\n $L1:\n ret;\n}"
    assert unwaited_ops(early_return) == {"ret;"}
    # a weight stream's copy and its commit may come first; any other copy may not
    weights = ("{\n cp.async.cg.shared.global.L2::cache_hint.L2::256B [%r1], [%rd1], 16, %rd2;\n"
               " cp.async.commit_group;\n griddepcontrol.wait;\n ret;\n}")
    assert unwaited_ops(weights, weight_copies=True) == set()
    assert unwaited_ops(weights) == {"cp.async.cg.shared.global.L2::cache_hint.L2::256B [%r1], [%rd1], 16, %rd2;",
                                     "cp.async.commit_group;"}
    assert unwaited_ops(weights.replace(".L2::cache_hint.L2::256B", "").replace(", %rd2", ""), weight_copies=True) \
        == {"cp.async.cg.shared.global [%r1], [%rd1], 16;"}


@needs_nvrtc
@pytest.mark.parametrize("name", SHADERS)
def test_every_entry_waits_for_the_previous_kernel(name, target):
    """The backend launches every kernel with programmatic dependent launch on sm_90 (it may start
    before the previous kernel of its stream ends), so on every path through each entry point its
    threads must reach ``griddepcontrol.wait`` (xi_grid_begin in shaders/xi_common.cuh) before they
    read or write memory, synchronize or return: an entry that does not would race the kernel
    before it, or let the next one run ahead of it."""
    ptx = shader_ptx(name[:-3], target.arch, target.stage_max, target.driver_version)
    entries = ptx.split(".entry ")[1:]
    assert entries, f"{name}: no entry point in the PTX"
    for body in entries:
        entry = body.split("(", 1)[0].strip()
        assert "griddepcontrol.wait" in body, f"{name}: entry {entry} never waits for the previous kernel"
        bad = unwaited_ops(body, weight_copies=entry.endswith("_pq") or entry.startswith("qmatmul"))
        assert not bad, f"{name}: entry {entry} reaches {sorted(bad)[:4]} before griddepcontrol.wait"
