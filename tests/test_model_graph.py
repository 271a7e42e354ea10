"""``model/_graph.py``: ModelFragment.record into a caller-owned Graph, reuse_private_scratch."""

import numpy as np
import pytest

from _model_fixtures import assert_close, build, f32
from xinfer_async.hal import Access, TensorDesc, ValidationError
from xinfer_async.model import Binding, Dispatch, GraphTensor, IODesc, ModelContext, ModelSession
from xinfer_async.model._graph import GraphDispatch


@pytest.fixture
def m(devices):
    return build(devices)


def test_record_binds_inputs_without_a_copy(m):
    g, inp, out, h = m.graph()
    assert [type(c) for c in g.commands] == [GraphDispatch, GraphDispatch]  # no copy, fill, upload or sync added
    (n1, refs1), (n2, refs2) = [(c.kernel, c.refs) for c in g.commands]
    assert (n1, n2) == ("rmsnorm", "matmul_f32")
    assert refs1[0][0] is inp.alloc  # the first fragment reads the graph input in place
    y_alloc, y_off, y_n = refs1[2]
    assert refs2[1] == (y_alloc, y_off, y_n)  # the second fragment reads the first's output region
    assert (h.alloc, h.offset) == (y_alloc, y_off) and h.desc == f32((m.rows, m.dim))
    assert refs2[0][0] is m.weights[1].allocation  # weights are bound, not copied
    assert out.alloc is refs2[2][0]
    # inputs/outputs of both fragments: graph input, y, z; nothing else is allocated
    assert g.private_bytes() == (2 * m.rows * m.dim + m.rows * m.n) * 4


async def test_recorded_graph_runs_correctly(m):
    pm = m.prepare(2)
    for _ in range(3):
        x = m.sample()
        (z,) = await pm.run([x])
        assert_close(z, m.reference(x))
    pm.close()


def test_record_into_graph_of_another_definition(devices, m):
    other = build(devices)
    g = other.definition.graph()
    with pytest.raises(ValidationError, match="record: the graph belongs to another model definition"):
        m.f1.record(g, [g.input(f32((m.rows, m.dim)))])


def test_record_input_count_mismatch(m):
    g = m.definition.graph()
    t = g.input(f32((m.rows, m.dim)))
    with pytest.raises(ValidationError, match="record: the fragment has 1 inputs, got 2"):
        m.f1.record(g, [t, t])
    with pytest.raises(ValidationError, match="record: the fragment has 1 inputs, got 0"):
        m.f1.record(g, [])


def test_record_descriptor_mismatch(m):
    g = m.definition.graph()
    with pytest.raises(ValidationError, match=r"record: input 0 descriptor mismatch: the fragment expects "
                                              r"TensorDesc\(\(8, 64\), f32\), got TensorDesc\(\(4, 128\), f32\)"):
        m.f1.record(g, [g.input(f32((4, 128)))])
    with pytest.raises(ValidationError, match=r"input 0 descriptor mismatch: .* got TensorDesc\(\(8, 64\), f16\)"):
        m.f1.record(g, [g.input(TensorDesc((8, 64), "f16"))])


def test_record_input_of_another_graph(m):
    g, g2 = m.definition.graph(), m.definition.graph()
    with pytest.raises(ValidationError, match="record: input 0 is not a tensor of this graph"):
        m.f1.record(g, [g2.input(f32((m.rows, m.dim)))])


def test_empty_graph_input(m):
    with pytest.raises(ValidationError, match=r"empty graph input descriptor TensorDesc\(\(0,\), f32\)"):
        m.definition.graph().input(f32((0,)))


def _two_input_fragment(devices, n=64):
    """y = a + b with a and b two halves of one allocation."""
    s = ModelSession(devices)
    ab = s.scratch(2 * n * 4, name="ab")
    y = s.scratch(n * 4, name="y")
    k = s.kernel("add")
    d = s.freeze(ModelContext(devices))
    a, b = ab.slice(0, n * 4), ab.slice(n * 4, n * 4)
    frag = d.fragment([Dispatch(k, [Binding(a), Binding(b), Binding(y, Access.WRITE)], {"n": n})],
                      [IODesc(a, f32((n,))), IODesc(b, f32((n,)))], [IODesc(y, f32((n,)))])
    return d, frag


async def test_inputs_alias_one_allocation_consistently(devices):
    n = 64
    d, frag = _two_input_fragment(devices, n)
    g = d.graph()
    whole = g.input(f32((2 * n,)))
    a = GraphTensor(g, whole.alloc, 0, f32((n,)))
    b = GraphTensor(g, whole.alloc, n * 4, f32((n,)))
    (y,) = frag.record(g, [a, b])  # the same layout as the fragment's: accepted
    pm = g.prepare([whole], [y], 1)
    xin = np.random.default_rng().standard_normal(2 * n).astype(np.float32)
    (got,) = await pm.run([xin])
    assert_close(got, xin[:n].astype(np.float64) + xin[n:])
    pm.close()


def test_inputs_alias_one_allocation_inconsistently(devices):
    n = 64
    d, frag = _two_input_fragment(devices, n)
    g = d.graph()
    with pytest.raises(ValidationError, match=r"record: inputs alias allocation <Allocation #\d+ 'ab' scratch 512 B> "
                                              r"inconsistently: input 1 maps it to a different tensor or offset"):
        frag.record(g, [g.input(f32((n,))), g.input(f32((n,)))])
    whole = g.input(f32((2 * n,)))
    swapped = [GraphTensor(g, whole.alloc, n * 4, f32((n,))), GraphTensor(g, whole.alloc, 0, f32((n,)))]
    with pytest.raises(ValidationError, match="record: inputs alias allocation .* inconsistently: input 1"):
        frag.record(g, swapped)


def test_remapping_introduces_undeclared_alias(devices):
    n = 64
    s = ModelSession(devices)
    x = s.scratch(2 * n * 4, name="x")
    y = s.scratch(2 * n * 4, name="y")
    k = s.kernel("affine")
    d = s.freeze(ModelContext(devices))
    # the input declares the first half of x, but the kernel reads all of it: bound to a caller's
    # (n,) tensor, the second half would alias whatever follows that tensor
    frag = d.fragment([Dispatch(k, [Binding(x), Binding(y, Access.WRITE)], {"n": 2 * n, "a": 1.0, "b": 0.0})],
                      [IODesc(x.slice(0, n * 4), f32((n,)))], [IODesc(y, f32((2 * n,)))])
    g = d.graph()
    with pytest.raises(ValidationError, match=r"record: remapping <Allocation #\d+ 'x' scratch 512 B> onto the caller's "
                                              r"tensor would alias bytes \[0:512\] that command #0 uses but no input declares"):
        frag.record(g, [g.input(f32((n,)))])
    # a region larger than its descriptor: the caller's tensor has only the descriptor's bytes
    frag2 = d.fragment([Dispatch(k, [Binding(x), Binding(y, Access.WRITE)], {"n": 2 * n, "a": 1.0, "b": 0.0})],
                       [IODesc(x, f32((n,)))], [IODesc(y, f32((2 * n,)))])
    with pytest.raises(ValidationError, match=r"would alias bytes \[0:512\] that command #0 uses but no input declares"):
        frag2.record(g, [g.input(f32((n,)))])
    # an output in the remapped allocation outside the declared bytes
    frag3 = d.fragment([Dispatch(k, [Binding(x.slice(0, n * 4)), Binding(x.slice(n * 4, n * 4), Access.WRITE)],
                                 {"n": n, "a": 1.0, "b": 0.0})],
                       [IODesc(x.slice(0, n * 4), f32((n,)))], [IODesc(x.slice(n * 4, n * 4), f32((n,)))])
    with pytest.raises(ValidationError, match=r"would alias bytes \[256:512\] that command #0 uses but no input declares"):
        frag3.record(g, [g.input(f32((n,)))])
    frag4 = d.fragment([], [IODesc(x.slice(0, n * 4), f32((n,)))], [IODesc(x.slice(n * 4, n * 4), f32((n,)))])
    with pytest.raises(ValidationError, match=r"would alias bytes \[256:512\] that output 0 uses but no input declares"):
        frag4.record(g, [g.input(f32((n,)))])


def test_distinct_allocations_bound_to_one_tensor_while_written(devices):
    n = 64
    s = ModelSession(devices)
    a, b = s.scratch(n * 4, name="a"), s.scratch(n * 4, name="b")
    k = s.kernel("affine")
    d = s.freeze(ModelContext(devices))
    # reads a, writes b: bound to one tensor, b's write would clobber a, which the fragment never declared
    frag = d.fragment([Dispatch(k, [Binding(a), Binding(b, Access.WRITE)], {"n": n, "a": 2.0, "b": 1.0})],
                      [IODesc(a, f32((n,))), IODesc(b, f32((n,)))], [IODesc(b, f32((n,)))])
    g = d.graph()
    t = g.input(f32((n,)))
    with pytest.raises(ValidationError, match=r"record: inputs 0 and 1 bind distinct allocations <Allocation #\d+ 'a' "
                                              r"scratch 256 B> and <Allocation #\d+ 'b' scratch 256 B> to overlapping "
                                              r"bytes of one tensor while the fragment writes one of them"):
        frag.record(g, [t, t])
    frag.record(g, [t, g.input(f32((n,)))])  # distinct tensors: fine


def test_reuse_private_scratch_lowers_private_bytes(devices):
    m = build(devices, temporaries=True)
    g_plain, *_ = m.graph(reuse=False)
    g_reuse, *_ = m.graph(reuse=True)
    kinds = lambda g: sorted(a.kind for a in g.allocs)  # noqa: E731
    assert kinds(g_plain) == ["input", "scratch", "scratch", "scratch", "scratch"]  # t1, y, t2, z
    assert kinds(g_reuse) == ["arena", "input", "scratch", "scratch"]  # t1 and t2 share the arena
    t1, t2 = m.rows * m.dim * 4, m.rows * m.n * 4
    assert g_plain.private_bytes() - g_reuse.private_bytes() == min(t1, t2)
    assert m.f1.reuse_private_scratch().reuses_private_scratch and not m.f1.reuses_private_scratch


async def test_reuse_private_scratch_keeps_outputs_correct(devices):
    m = build(devices, temporaries=True)
    plain, reuse = m.prepare(2, reuse=False), m.prepare(2, reuse=True)
    sp, sr = plain.statistics(), reuse.statistics()
    assert sr.private_bytes_per_slot < sp.private_bytes_per_slot
    assert reuse.slots[0].private_bytes == sr.private_bytes_per_slot
    for _ in range(4):
        x = m.sample()
        (zp,) = await plain.run([x])
        (zr,) = await reuse.run([x])
        assert_close(zp, m.reference(x))
        assert_close(zr, m.reference(x))
    plain.close()
    reuse.close()
