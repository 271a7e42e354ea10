"""backends/cuda/_cublaslt.py's candidate filter, on a stand-in of the cuBLASLt library (no GPU needed):
what load may choose is split-K free and needs no workspace (the row-independence contract), and the
research listing (``workspace_nbytes``) widens only that."""

import pytest

from xinfer_async.backends.cuda import _cublaslt as lt

# algorithm id -> (split-K count, workspace bytes, heuristic state)
ALGOS = {1: (1, 0, 0), 2: (4, 1 << 20, 0), 3: (1, 64 << 10, 0), 4: (1, 0, 7), 5: (2, 0, 0)}


class FakeLt:
    """The calls LtHandle.candidates makes, answering from ``ALGOS`` (the heuristic returns them in id
    order, ``requested`` at most) and recording the preference attributes set."""

    def __init__(self):
        self.prefs: list[dict[int, int]] = []

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
        v[0] = ALGOS[algo.data[0]][0] if attr == lt.CUBLASLT_ALGO_CONFIG_SPLITK_NUM else 0
        return 0

    def cublasLtMatmulAlgoCheck(self, handle, desc, b, a, c, d, algo, result):
        result.workspaceSize = ALGOS[algo.data[0]][1]
        return 0


@pytest.fixture
def handle(monkeypatch):
    fake = FakeLt()
    monkeypatch.setattr(lt, "_lib", fake)
    monkeypatch.setattr(lt, "load", lambda: fake)
    h = lt.LtHandle(timer=None)
    return h, fake


def _ids(algos):
    return [a.data[0] for a in algos]


def test_load_sees_only_split_k_free_algorithms_without_workspace(handle):
    h, fake = handle
    assert _ids(h.candidates(4096, 4096)) == [1]  # 2: split-K, 3: workspace, 4: bad state, 5: split-K
    assert len(fake.prefs) == len(lt.TUNE_MS)  # one heuristic query at each m
    for pref in fake.prefs:
        assert pref[lt.CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK] == 0
        assert pref[lt.CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES] == 0
    assert _ids(h.candidates(4096, 4096, count=2)) == [1]
    assert h.algorithm(4096, 4096)[0].data[0] == 1  # one candidate: no timing needed


def test_the_research_listing_widens_only_reduction_and_workspace(handle):
    h, fake = handle
    assert _ids(h.candidates(4096, 4096, workspace_nbytes=2 << 20)) == [1, 2, 3, 5]
    assert _ids(h.candidates(4096, 4096, workspace_nbytes=100 << 10)) == [1, 3, 5]  # 2 needs 1 MiB
    pref = fake.prefs[-1]
    assert pref[lt.CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK] == lt.REDUCTION_SCHEME_ANY == 7
    assert pref[lt.CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES] == 100 << 10
