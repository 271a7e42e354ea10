"""A small two-stage model for the model-layer tests: rmsnorm then matmul, optionally with private
temporaries in each stage (so ``reuse_private_scratch`` has something to share)."""

from __future__ import annotations

import types

import numpy as np

from xinfer_async.hal import Access, TensorDesc
from xinfer_async.model import Binding, Dispatch, Indices, IODesc, ModelContext, ModelSession

EPS = 1e-5
A1, B1, A2, B2 = 0.5, 0.25, 2.0, -1.0


def f32(shape) -> TensorDesc:
    return TensorDesc(shape, "f32")


def build(device, rows: int = 8, dim: int = 64, n: int = 32, *, temporaries: bool = False, rng=None):
    """The session is frozen; returns a namespace with the definition, both fragments, the weights
    (numpy) and ``reference(x)`` in float64.

    Stage 1: x (rows, dim) -> [affine a1, b1 -> t1] -> rmsnorm(w) -> y (rows, dim).
    Stage 2: y -> matmul(W (n, dim)) -> [t2 -> affine a2, b2] -> z (rows, n).
    """
    rng = np.random.default_rng() if rng is None else rng
    w_norm = rng.standard_normal(dim).astype(np.float32)
    W = rng.standard_normal((n, dim)).astype(np.float32)
    s = ModelSession(device)
    wn = s.weight(w_norm, f32((dim,)), name="norm")
    wm = s.weight(W, f32((n, dim)), name="proj")
    x, y, z = s.scratch(rows * dim * 4, name="x"), s.scratch(rows * dim * 4, name="y"), s.scratch(rows * n * 4, name="z")
    kn, km = s.kernel("rmsnorm"), s.kernel("matmul_f32")
    cmds1, cmds2 = [], []
    norm_in = x
    if temporaries:
        ka = s.kernel("affine")
        t1, t2 = s.scratch(rows * dim * 4, name="t1"), s.scratch(rows * n * 4, name="t2")
        cmds1.append(Dispatch(ka, [Binding(x), Binding(t1, Access.WRITE)], {"n": rows * dim, "a": A1, "b": B1}))
        norm_in = t1
    cmds1.append(Dispatch(kn, [Binding(norm_in), Binding(wn), Binding(y, Access.WRITE)], {"rows": rows, "dim": dim, "eps": EPS}))
    if temporaries:
        cmds2.append(Dispatch(km, [Binding(wm), Binding(y), Binding(t2, Access.READ_WRITE)], Indices(rows, n, dim, 0)))
        cmds2.append(Dispatch(ka, [Binding(t2), Binding(z, Access.WRITE)], {"n": rows * n, "a": A2, "b": B2}))
    else:
        cmds2.append(Dispatch(km, [Binding(wm), Binding(y), Binding(z, Access.READ_WRITE)], Indices(rows, n, dim, 0)))
    d = s.freeze(ModelContext(device))
    f1 = d.fragment(cmds1, [IODesc(x, f32((rows, dim)))], [IODesc(y, f32((rows, dim)))])
    f2 = d.fragment(cmds2, [IODesc(y, f32((rows, dim)))], [IODesc(z, f32((rows, n)))])

    def reference(xin: np.ndarray) -> np.ndarray:
        xd = xin.astype(np.float64)
        if temporaries:
            xd = A1 * xd + B1
        h = xd / np.sqrt((xd ** 2).mean(-1, keepdims=True) + EPS) * w_norm.astype(np.float64)
        out = h @ W.T.astype(np.float64)
        return A2 * out + B2 if temporaries else out

    def graph(reuse: bool = False):
        g = d.graph()
        inp = g.input(f32((rows, dim)))
        a, b = (f1.reuse_private_scratch(), f2.reuse_private_scratch()) if reuse else (f1, f2)
        (h,) = a.record(g, [inp])
        (out,) = b.record(g, [h])
        return g, inp, out, h

    def prepare(capacity: int, reuse: bool = False):
        g, inp, out, _ = graph(reuse)
        return g.prepare([inp], [out], capacity)

    def sample() -> np.ndarray:
        return rng.standard_normal((rows, dim)).astype(np.float32)

    return types.SimpleNamespace(session=s, definition=d, f1=f1, f2=f2, w_norm=w_norm, W=W, weights=(wn, wm),
                                 x=x, y=y, z=z, rows=rows, dim=dim, n=n, reference=reference, graph=graph,
                                 prepare=prepare, sample=sample, kernels=(kn, km))


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
