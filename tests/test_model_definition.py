"""``model/_definition.py``: command and IO validation, weight_bytes, launch_config, prepare."""

import numpy as np
import pytest

from _model_fixtures import assert_close, build, f32
from xinfer_async.hal import Access, ValidationError
from xinfer_async.model import Binding, Copy, Dispatch, Fill, Indices, IODesc, Packed


@pytest.fixture
def m(devices):
    return build(devices)


def _rmsnorm(m, x, w, y, access=Access.WRITE):
    return Dispatch(m.kernels[0], [Binding(x), Binding(w), Binding(y, access)], {"rows": m.rows, "dim": m.dim, "eps": 1e-5})


def test_region_of_another_definition(devices, m):
    other = build(devices)
    with pytest.raises(ValidationError, match=r"command #0 \(Fill\): region of another model definition"):
        m.definition.fragment([Fill(other.x, 1.0)], [], [])
    with pytest.raises(ValidationError, match=r"command #0 \(Dispatch\) binding 0 \(x\): region of another model definition"):
        m.definition.fragment([_rmsnorm(m, other.x, m.weights[0], m.y)], [], [])
    with pytest.raises(ValidationError, match=r"input 0: region of another model definition"):
        m.definition.fragment([], [IODesc(other.x, f32((m.rows, m.dim)))], [])


def test_kernel_of_another_definition(devices, m):
    other = build(devices)
    cmd = Dispatch(other.kernels[0], [Binding(m.x), Binding(m.weights[0]), Binding(m.y, Access.WRITE)],
                   {"rows": m.rows, "dim": m.dim, "eps": 1e-5})
    with pytest.raises(ValidationError, match=r"command #0 \(Dispatch\): kernel 'rmsnorm' of another model definition"):
        m.definition.fragment([cmd], [], [])
    with pytest.raises(ValidationError, match=r"launch_config: kernel 'rmsnorm' of another model definition"):
        m.definition.launch_config(other.kernels[0], {"rows": 1, "dim": 1, "eps": 1e-5})


def test_launch_config(m):
    grid = m.definition.launch_config(m.kernels[1], Indices(m.rows, m.n, m.dim, 0))
    assert len(grid) == 3 and all(isinstance(g, int) and g >= 1 for g in grid)


def test_empty_io_descriptor(m):
    with pytest.raises(ValidationError, match=r"input 0: empty IO descriptor TensorDesc\(\(0, 64\), f32\)"):
        m.definition.fragment([], [IODesc(m.x, f32((0, m.dim)))], [])
    with pytest.raises(ValidationError, match=r"output 0: empty IO descriptor"):
        m.definition.fragment([], [], [IODesc(m.z, f32((0,)))])


def test_io_descriptor_larger_than_region(m):
    with pytest.raises(ValidationError, match=r"output 0: descriptor TensorDesc\(\(8, 33\), f32\) needs 1056 bytes, its region has 1024"):
        m.definition.fragment([], [], [IODesc(m.z, f32((m.rows, m.n + 1)))])
    with pytest.raises(ValidationError, match=r"input 0: descriptor .* needs 2048 bytes, its region has 2044"):
        m.definition.fragment([], [IODesc(m.x.slice(4, 2044), f32((m.rows, m.dim)))], [])


def test_io_aliasing_immutable_weights(m):
    wn = m.weights[0]
    with pytest.raises(ValidationError, match=r"input 0: IO aliases immutable weight <Allocation #\d+ 'norm' weight 256 B>"):
        m.definition.fragment([], [IODesc(wn, f32((m.dim,)))], [])
    with pytest.raises(ValidationError, match=r"output 0: IO aliases immutable weight"):
        m.definition.fragment([], [], [IODesc(wn.slice(0, 64), f32((16,)))])


def test_fill_of_weight(m):
    with pytest.raises(ValidationError, match=r"command #1 \(Fill\): fill of immutable weight <Allocation #\d+ 'proj' weight"):
        m.definition.fragment([Fill(m.x, 0.0), Fill(m.weights[1], 0.0)], [], [])


def test_copy_to_weight(m):
    wn = m.weights[0]
    with pytest.raises(ValidationError, match=r"command #0 \(Copy\): write of immutable weight <Allocation #\d+ 'norm'"):
        m.definition.fragment([Copy(wn, m.x.slice(0, wn.nbytes))], [], [])
    m.definition.fragment([Copy(m.x.slice(0, wn.nbytes), wn)], [], [])  # reading a weight is fine


def test_dispatch_writing_a_weight(m):
    wn, wm = m.weights
    # declared WRITE on a binding the kernel only reads
    bad = Dispatch(m.kernels[1], [Binding(wm, Access.WRITE), Binding(m.y), Binding(m.z, Access.READ_WRITE)],
                   Indices(m.rows, m.n, m.dim, 0))
    with pytest.raises(ValidationError, match=r"command #0 \(Dispatch\): binding 0 \(w\) writes immutable weight .*'proj'"):
        m.definition.fragment([bad], [], [])
    # a weight at a binding the kernel writes, whatever access the binding declares
    out_weight = wm.slice(0, m.rows * m.dim * 4)
    for access in (Access.READ, Access.WRITE):
        with pytest.raises(ValidationError, match=r"binding 2 \(y\) writes immutable weight .*'proj'"):
            m.definition.fragment([_rmsnorm(m, m.x, wn, out_weight, access)], [], [])


def test_binding_declared_read_but_written(m):
    with pytest.raises(ValidationError, match=r"binding 2 \(y\) is declared READ but rmsnorm writes it"):
        m.definition.fragment([_rmsnorm(m, m.x, m.weights[0], m.y, Access.READ)], [], [])


def test_binding_smaller_than_contract(m):
    with pytest.raises(ValidationError, match=r"command #0 \(Dispatch\): binding 0 \(x\) has 2044 bytes, the contract needs 2048"):
        m.definition.fragment([_rmsnorm(m, m.x.slice(0, 2044), m.weights[0], m.y)], [], [])
    with pytest.raises(ValidationError, match=r"binding 2 \(y\) has 1020 bytes, the contract needs 1024"):
        m.definition.fragment([Dispatch(m.kernels[1], [Binding(m.weights[1]), Binding(m.y),
                                                        Binding(m.z.slice(4, 1020), Access.READ_WRITE)],
                                        Indices(m.rows, m.n, m.dim, 0))], [], [])


def test_binding_count_and_arguments(m):
    km = m.kernels[1]
    with pytest.raises(ValidationError, match=r"matmul_f32 takes 3 bindings, got 2"):
        m.definition.fragment([Dispatch(km, [Binding(m.weights[1]), Binding(m.y)], Indices(m.rows, m.n, m.dim, 0))], [], [])
    with pytest.raises(ValueError, match=r"matmul_f32: Indices has 3 values, the contract has 4"):
        m.definition.fragment([Dispatch(km, [], Indices(1, 2, 3))], [], [])
    with pytest.raises(ValueError, match=r"matmul_f32: Packed has 12 bytes, the contract needs 16"):
        m.definition.fragment([Dispatch(km, [], Packed(bytes(12)))], [], [])
    with pytest.raises(TypeError, match=r"command #0 \(str\): not a model command"):
        m.definition.fragment(["fill"], [], [])


def test_fill_must_be_whole_words(m):
    with pytest.raises(ValidationError, match=r"command #0 \(Fill\): fill of 6 bytes, not a multiple of 4"):
        m.definition.fragment([Fill(m.x.slice(0, 6), 1.0)], [], [])


def test_prepare_runs_one_fragment(m):
    pm = m.definition.prepare(m.f1.commands, m.f1.inputs, m.f1.outputs, capacity=2)
    assert pm.capacity == 2 and len(pm.slots) == 2
    pm.close()


async def test_prepare_fragment_output_is_correct(m):
    pm = m.f1.prepare(1)
    x = m.sample()
    (y,) = await pm.run([x])
    xd = x.astype(np.float64)
    assert_close(y, xd / np.sqrt((xd ** 2).mean(-1, keepdims=True) + 1e-5) * m.w_norm)
    pm.close()


def test_weight_bytes_counted_once(devices, m):
    wbytes = m.w_norm.nbytes + m.W.nbytes
    assert m.definition.weight_bytes() == wbytes
    before = devices.allocated_bytes
    one = m.prepare(8)
    after_one = devices.allocated_bytes
    two = m.prepare(8)
    after_two = devices.allocated_bytes
    s1, s2 = one.statistics(), two.statistics()
    assert s1.weight_bytes == s2.weight_bytes == m.definition.weight_bytes() == wbytes
    # each plan allocates its 8 slots' private bytes and nothing for the weights (every size here is
    # a multiple of the 256-byte allocation granule)
    assert after_one - before == 8 * s1.private_bytes_per_slot
    assert after_two - after_one == 8 * s2.private_bytes_per_slot
    # every slot of both plans binds the one weight buffer
    (wn_alloc, wm_alloc) = (w.allocation for w in m.weights)
    for pm in (one, two):
        for slot in pm.slots:
            assert wn_alloc not in slot._buffers and wm_alloc not in slot._buffers
    one.close()
    two.close()
