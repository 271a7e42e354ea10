import numpy as np, trio
import xinfer_async as xa
from xinfer_async.model import *
from xinfer_async.hal import TensorDesc, Access

async def main():
    dev = xa.open_device("cpu")
    rows, dim, n = 8, 64, 32
    rng = np.random.default_rng()
    w_norm = rng.standard_normal(dim).astype(np.float32)
    W = rng.standard_normal((n, dim)).astype(np.float32)
    s = ModelSession(dev)
    wn = s.weight(w_norm, TensorDesc((dim,), "f32"))
    wm = s.weight(W, TensorDesc((n, dim), "f32"))
    x = s.scratch(rows*dim*4); y = s.scratch(rows*dim*4); z = s.scratch(rows*n*4)
    kn, km = s.kernel("rmsnorm"), s.kernel("matmul_f32")
    d = s.freeze(ModelContext(dev))
    f1 = d.fragment([Dispatch(kn, [Binding(x), Binding(wn), Binding(y, Access.WRITE)], {"rows": rows, "dim": dim, "eps": 1e-5})],
                    [IODesc(x, TensorDesc((rows, dim), "f32"))], [IODesc(y, TensorDesc((rows, dim), "f32"))])
    f2 = d.fragment([Dispatch(km, [Binding(wm), Binding(y), Binding(z, Access.READ_WRITE)], Indices(rows, n, dim, 0))],
                    [IODesc(y, TensorDesc((rows, dim), "f32"))], [IODesc(z, TensorDesc((rows, n), "f32"))])
    g = d.graph()
    inp = g.input(TensorDesc((rows, dim), "f32"))
    (h,) = f1.record(g, [inp]); (out,) = f2.record(g, [h])
    pm = g.prepare([inp], [out], capacity=4)
    async def one(i):
        xin = rng.standard_normal((rows, dim)).astype(np.float32)
        (res,) = await pm.run([xin])
        xd = xin.astype(np.float64)
        ref = (xd / np.sqrt((xd**2).mean(-1, keepdims=True) + 1e-5) * w_norm) @ W.T.astype(np.float64)
        assert np.allclose(res, ref, rtol=1e-4, atol=1e-4), i
    async with trio.open_nursery() as nur:
        for i in range(64): nur.start_soon(one, i)
    print(pm.statistics())
    dev.close()
trio.run(main)
