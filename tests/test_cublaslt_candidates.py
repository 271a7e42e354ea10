"""backends/cuda/_cublaslt.py's candidate filter, buckets and workspace rules, on a stand-in of the
cuBLASLt library (no GPU needed): the prefill bucket's algorithms are split-K free and need no
workspace; the decode bucket's may split k only with a workspace reduction (never in place), and a
GEMM that needs workspace refuses to run without it. The GPU side (bits across m and runs) is in
tests/test_gemm_regime.py."""

import pytest

from xinfer_async.backends.cuda import _cublaslt as lt
from xinfer_async.hal import DeviceError

# algorithm id -> (split-K count, workspace bytes, heuristic state, reduction scheme)
ALGOS = {1: (1, 0, 0, 0), 2: (4, 1 << 20, 0, 2), 3: (1, 64 << 10, 0, 0), 4: (1, 0, 7, 0), 5: (2, 0, 0, 4),
         6: (3, 1 << 20, 0, 1), 7: (4, 2 << 20, 0, 2)}


class FakeLt:
    """The calls LtHandle makes, answering from ``ALGOS`` (the heuristic returns them all in id
    order, ``requested`` at most, whatever the preferences: the filter is ours) and recording the
    preference attributes set and the matmuls run."""

    def __init__(self):
        self.prefs: list[dict[int, int]] = []
        self.matmuls: list[tuple] = []

    def __getattr__(self, name):  # create / destroy / set-descriptor calls: success
        return lambda *args: 0

    def cublasLtMatmulPreferenceCreate(self, p):
        self.prefs.append({})
        return 0

    def cublasLtMatmulPreferenceSetAttribute(self, pref, attr, value, size):
        ctype = "uint64_t *" if size == 8 else "uint32_t *"
        self.prefs[-1][attr] = int(lt.ffi.cast(ctype, value)[0])
        return 0

    def cublasLtMatmulAlgoGetHeuristic(self, handle, desc, b, a, c, d, pref, requested, res, count):
        ids = sorted(ALGOS)[:requested]
        for i, algo_id in enumerate(ids):
            res[i].algo.data[0] = algo_id
            res[i].state = ALGOS[algo_id][2]
            res[i].workspaceSize = ALGOS[algo_id][1]
        count[0] = len(ids)
        return 0

    def cublasLtMatmulAlgoConfigGetAttribute(self, algo, attr, v, size, written):
        splitk, _, _, reduction = ALGOS[algo.data[0]]
        v[0] = {lt.CUBLASLT_ALGO_CONFIG_SPLITK_NUM: splitk, lt.CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME: reduction,
                lt.CUBLASLT_ALGO_CONFIG_ID: algo.data[0]}.get(attr, 0)
        return 0

    def cublasLtMatmulAlgoCheck(self, handle, desc, b, a, c, d, algo, result):
        result.workspaceSize = ALGOS[algo.data[0]][1]
        return 0

    def cublasLtMatmul(self, handle, desc, alpha, b, lb, a, la, beta, c, lc, d, ld, algo, ws, ws_nbytes, stream):
        self.matmuls.append((algo.data[0], int(lt.ffi.cast("uintptr_t", ws)), ws_nbytes))
        return 0


def _handle(monkeypatch, timer=None, environ=None):
    fake = FakeLt()
    monkeypatch.setattr(lt, "_lib", fake)
    monkeypatch.setattr(lt, "load", lambda: fake)
    return lt.LtHandle(timer=timer, of_buckets=lt.buckets(environ or {})), fake


def _ids(algos):
    return [a.data[0] for a in algos]


def test_without_workspace_only_split_k_free_workspace_free_algorithms(monkeypatch):
    h, fake = _handle(monkeypatch)
    assert _ids(h.candidates(4096, 4096, (128, 512))) == [1]  # 2, 5, 6: split-K; 3: workspace; 4: bad state
    assert len(fake.prefs) == 2  # one heuristic query at each m
    for pref in fake.prefs:
        assert pref[lt.CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK] == 0
        assert pref[lt.CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES] == 0
    assert _ids(h.candidates(4096, 4096, (128, 512), count=2)) == [1]
    algo, ws = h.algorithm(4096, 4096, 512)  # prefill: one candidate, no timing needed
    assert algo.data[0] == 1 and ws == 0


def test_decode_bucket_adds_workspace_reduced_split_k_only(monkeypatch):
    h, fake = _handle(monkeypatch)
    got = h.candidates(4096, 4096, (16, 64), workspace_nbytes=2 << 20, mask=lt.REDUCTION_SCHEME_WORKSPACE)
    # 2: split-K reduced from the workspace (compute type); 5: split-K, output type, no workspace;
    # 3: split-K free yet asking for workspace (a fix-up that may follow m); 6: split-K reduced in place
    assert _ids(got) == [1, 2, 5, 7]
    assert len(fake.prefs) == 4  # at each m: the split-K-free query, then the workspace one
    assert [p[lt.CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK] for p in fake.prefs] == [0, 6, 0, 6]
    assert [p[lt.CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES] for p in fake.prefs] == [0, 2 << 20] * 2
    small = h.candidates(4096, 4096, (16, 64), workspace_nbytes=100 << 10, mask=lt.REDUCTION_SCHEME_WORKSPACE)
    assert _ids(small) == [1, 5]  # 2 needs 1 MiB


def test_decode_drops_a_split_k_free_algorithm_asking_workspace_at_any_tuning_m(monkeypatch):
    """The heuristic gave algorithm 1 without workspace, but cublasLtMatmulAlgoCheck asks 4 bytes for it
    at m = 16: a fix-up whose split may follow m, so the decode bucket leaves it out (a split-K one
    asking workspace stays)."""
    h, fake = _handle(monkeypatch)
    monkeypatch.setattr(h, "describe", lambda m, n, k: (m, (None, None, None)))
    check = fake.cublasLtMatmulAlgoCheck

    def check_by_m(handle, desc, b, a, c, d, algo, result):
        status = check(handle, desc, b, a, c, d, algo, result)
        if algo.data[0] == 1 and desc == 16:
            result.workspaceSize = 4
        return status

    fake.cublasLtMatmulAlgoCheck = check_by_m
    got = h.candidates(4096, 4096, (16, 64), workspace_nbytes=2 << 20, mask=lt.REDUCTION_SCHEME_WORKSPACE)
    assert _ids(got) == [2, 5, 7]
    assert _ids(h.candidates(4096, 4096, (64,), workspace_nbytes=2 << 20, mask=lt.REDUCTION_SCHEME_WORKSPACE)) \
        == [1, 2, 5, 7]


def test_the_research_listing_keeps_every_scheme(monkeypatch):
    h, fake = _handle(monkeypatch)
    assert _ids(h.candidates(4096, 4096, (64,), workspace_nbytes=2 << 20)) == [1, 2, 3, 5, 6, 7]
    assert fake.prefs[-1][lt.CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK] == lt.REDUCTION_SCHEME_ANY == 7


def test_each_bucket_times_its_own_ms_and_keeps_its_choice(monkeypatch):
    calls = []
    # per algorithm id, its ms at each m: 2 (split-K) wins at small m, 1 at large m
    speed = {1: {16: 3.0, 64: 3.0, 128: 4.0, 512: 10.0}, 2: {16: 1.0, 64: 1.5, 128: 9.0, 512: 30.0},
             5: {16: 2.0, 64: 2.0, 128: 5.0, 512: 12.0}, 7: {16: 5.0, 64: 5.0, 128: 9.0, 512: 40.0}}

    def timer(nbytes, launches):
        calls.append((nbytes, len(launches)))
        return [speed[f.args[1].data[0]][m] for f in launches for m in [_m_of(f)]]

    def _m_of(f):
        return f.args[0][0]  # described: (desc, layouts), the desc being m in this stand-in

    h, fake = _handle(monkeypatch, timer)
    monkeypatch.setattr(h, "describe", lambda m, n, k: (m, (None, None, None)))
    algo, ws = h.algorithm(4096, 4096, 64)
    assert algo.data[0] == 2 and ws == lt.WORKSPACE_MIB << 20
    assert h.algorithm(4096, 4096, 9)[0] is algo  # every m of the bucket: the one object
    assert calls[0] == ((2 * 64 * 4096, 2 * 4096 * 4096, 4 * 64 * 4096, lt.WORKSPACE_MIB << 20), 4 * 2)
    assert [c["id"] for c, _ in h.tuning[(4096, 4096, "decode")]] == [2, 1, 5, 7]
    assert set(h.tuning[(4096, 4096, "decode")][0][1]) == {16, 64}
    assert h.algorithm(4096, 4096, 65)[0].data[0] == 1  # prefill: only 1 qualifies, no timing
    assert len(calls) == 1


def test_buckets_and_their_environment_variable():
    dec, pre = lt.buckets({})
    assert (dec.name, dec.m_max, dec.tune_ms, dec.workspace_nbytes) == ("decode", 64, (16, 64), 32 << 20)
    assert (pre.name, pre.m_max, pre.workspace_nbytes) == ("prefill", None, 0)
    assert lt.buckets({lt.WORKSPACE_ENV: "0"})[0].workspace_nbytes == 0
    assert lt.buckets({lt.WORKSPACE_ENV: " 8 "})[0].workspace_nbytes == 8 << 20
    for bad in ("-1", "x", "1.5", "2000"):
        with pytest.raises(ValueError, match=r"^XINFER_GEMM_WORKSPACE_MIB must be an integer number of MiB"):
            lt.buckets({lt.WORKSPACE_ENV: bad})
    assert [lt.bucket_of(m, (dec, pre)).name for m in (1, 64, 65, 4096)] == ["decode", "decode", "prefill", "prefill"]
    with pytest.raises(ValueError, match=r"^no bucket holds m=65"):
        lt.bucket_of(65, (dec,))


def test_weighted_choice():
    ms, w = (64, 512), (0.75, 0.25)
    # relative costs: 0.75 * 2 + 0.25 * 1 = 1.75; 0.75 + 0.25 * 2 = 1.25; 0.75 * 1.5 + 0.25 * 1.05 = 1.39
    assert lt.weighted_choice([{64: 2.0, 512: 10.0}, {64: 1.0, 512: 20.0}, {64: 1.5, 512: 10.5}], w, ms) == 1
    assert lt.weighted_choice([{64: 1.0, 512: 35.0}, {64: 1.5, 512: 10.0}], w, ms) == 1
    assert lt.weighted_choice([{64: 1.0, 512: 10.0}, {64: 1.0, 512: 10.0}], w, ms) == 0  # a tie: the first
    with pytest.raises(ValueError, match=r"^weighted_choice: no candidates$"):
        lt.weighted_choice([], w, ms)
    with pytest.raises(ValueError, match=r"^weighted_choice: times must be > 0"):
        lt.weighted_choice([{64: 0.0, 512: 1.0}], w, ms)


def test_a_gemm_that_needs_workspace_runs_only_with_it(monkeypatch):
    h, fake = _handle(monkeypatch, environ={lt.WORKSPACE_ENV: "2"})
    monkeypatch.setitem(h._algos, (4096, 4096, "decode"), (lt.ffi.new("cublasLtMatmulAlgo_t *", {"data": [2]}), 2 << 20))
    g = h.gemm_for(64, 4096, 4096)
    assert g.workspace_nbytes == 1 << 20 and g.bucket.name == "decode"
    with pytest.raises(ValueError, match=r"needs 1048576 bytes of workspace; none was given"):
        h.gemm(0, g, 0x1000, 0x2000, 0x3000)
    with pytest.raises(ValueError, match=r"16-byte aligned"):
        h.gemm(0, g, 0x1000, 0x2000, 0x3000, 0x4008)
    h.gemm(0, g, 0x1000, 0x2000, 0x3000, 0x4000)
    assert fake.matmuls[-1] == (2, 0x4000, 1 << 20)
    free = h.gemm_for(512, 4096, 4096)  # prefill: algorithm 1, no workspace: none passed
    assert free.workspace_nbytes == 0
    h.gemm(0, free, 0x1000, 0x2000, 0x3000, 0x4000)
    assert fake.matmuls[-1] == (1, 0, 0)


def test_an_algorithm_needing_more_workspace_than_allowed_is_refused(monkeypatch):
    """A bucket gives up to its split-K workspace, and any algorithm up to WORKSPACE_ASKED_MAX (1 MiB:
    some split-K-free tiles ask a few bytes at some m)."""
    h, fake = _handle(monkeypatch, environ={lt.WORKSPACE_ENV: "0"})
    monkeypatch.setitem(h._algos, (4096, 4096, "decode"), (lt.ffi.new("cublasLtMatmulAlgo_t *", {"data": [2]}), 0))
    assert h.gemm_for(64, 4096, 4096).workspace_nbytes == 1 << 20 == lt.WORKSPACE_ASKED_MAX
    monkeypatch.setitem(h._algos, (4096, 4096, "prefill"), (lt.ffi.new("cublasLtMatmulAlgo_t *", {"data": [7]}), 0))
    with pytest.raises(DeviceError, match=r"needs 2097152 bytes of workspace at m=512; at most 1048576 are given"):
        h.gemm_for(512, 4096, 4096)
