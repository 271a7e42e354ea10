"""tools/sass_loops.py: the loops of cuobjdump's SASS listing and their opcode mix (no GPU, no
cuobjdump: a listing written here in its format), and where NVRTC and cuobjdump are both installed, a
real entry's decode loop."""

import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import sass_loops  # noqa: E402

LISTING = """
	code for sm_90
		Function : k
	.headerflags	@"EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   MOV R1, c[0x0][0x28] ;                 /* 0x00000a0000017a02 */
                                                                          /* 0x000fe40000000f00 */
        /*0010*/                   LDS.128 R4, [R2] ;                     /* 0x0000000002047984 */
                                                                          /* 0x000e240000000c00 */
        /*0020*/                   IDP.4A.U8.S8 R8, R4, R5, RZ ;           /* 0x0000000504087226 */
                                                                          /* 0x001fe200000006ff */
        /*0030*/                   IDP.4A.U8.S8 R8, R6, R7, R8 ;           /* 0x0000000706087226 */
                                                                          /* 0x000fe20000000608 */
        /*0040*/              @!P2 LOP3.LUT R9, R4, 0xf, RZ, 0xc0, !PT ;   /* 0x0000000f04097812 */
                                                                          /* 0x000fe200078ec0ff */
        /*0050*/              @!P2 BRA 0x10 ;                             /* 0xfffffffc00e8a947 */
                                                                          /* 0x000fea000383ffff */
        /*0060*/                   SHFL.BFLY PT, R3, R8, 0x1, 0x1f ;       /* 0x0c201f0008037f89 */
                                                                          /* 0x000e2200000e0000 */
        /*0070*/                   BRA 0x80 ;                             /* 0xfffffffc00fc7947 */
                                                                          /* 0x000fc0000383ffff */
        /*0080*/                   EXIT ;                                 /* 0x000000000000794d */
"""


def test_the_listing_gives_its_instructions_loops_and_mix():
    instrs = sass_loops.parse_sass(LISTING)
    assert [a for a, _ in instrs] == [0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80]
    assert instrs[4] == (0x40, "@!P2 LOP3.LUT R9, R4, 0xf, RZ, 0xc0, !PT")
    assert [sass_loops.opcode(t) for _, t in instrs] == ["MOV", "LDS", "IDP", "IDP", "LOP3", "BRA", "SHFL", "BRA", "EXIT"]
    # the branch back to 0x10 is a loop; the forward one to 0x80 is not
    assert sass_loops.loops(instrs) == [(1, 5)]
    mix = sass_loops.loop_mix(instrs, (1, 5))
    assert mix == {"LDS": 1, "IDP": 2, "LOP3": 1, "BRA": 1}
    assert sass_loops.opcode("") == "" and sass_loops.loops([]) == []
    assert sass_loops.innermost([(1, 5), (0, 9), (2, 3), (6, 8)]) == [(2, 3), (6, 8)]


def test_a_real_decode_loop(capsys):
    """Where NVRTC and cuobjdump are here: qmatmul_q4_1's entry has its decode loops, each 8 IDP a
    block term."""
    nvrtc = pytest.importorskip("xinfer_async.backends.cuda._nvrtc")
    try:
        nvrtc.load()
    except Exception as e:  # noqa: BLE001 - any reason the library cannot be loaded
        pytest.skip(f"NVRTC not loadable: {e}")
    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not tool:
        pytest.skip("no cuobjdump here (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm; $CUOBJDUMP)")
    assert sass_loops.main(["qmatmul_q4_1", "qmatmul_q4_1", "--cuobjdump", tool]) == 0
    out = capsys.readouterr().out
    assert "qmatmul_q4_1 (qmatmul_q4_1.cu, sm_90)" in out and "a block term" in out
    rows = [line for line in out.splitlines() if line.startswith("loop ")]
    assert rows and all("IDP" in r for r in rows)  # the innermost loops with dp4a: the decode's
