"""llm/_arch.py: the family declarations and the tensors each one names."""

from __future__ import annotations

import pytest

from xinfer_async.llm._arch import ARCHITECTURES, Architecture, architecture
from xinfer_async.llm._support import SUPPORTED_ARCHITECTURES


def test_the_families_and_what_sets_them_apart():
    assert tuple(ARCHITECTURES) == SUPPORTED_ARCHITECTURES == ("llama", "qwen2", "qwen3", "gemma3", "phi3")
    # llama.cpp llama_model_rope_type: NORM for llama, NEOX for the others
    assert {n: a.rope for n, a in ARCHITECTURES.items()} == {
        "llama": "norm", "qwen2": "neox", "qwen3": "neox", "gemma3": "neox", "phi3": "neox"}
    g = architecture("gemma3")
    assert (g.qk_norm, g.post_norms, g.activation, g.embed_scale_sqrt_dim, g.swa_pattern, g.rope_theta_swa) == (
        True, True, "gelu_tanh", True, 6, 10000.0)
    assert architecture("qwen2").qkv_bias and not architecture("qwen3").qkv_bias and architecture("qwen3").qk_norm
    p = architecture("phi3")
    assert p.fused_qkv and p.fused_gate_up and p.activation == "silu" and p.swa_pattern == 0
    assert architecture("llama") == Architecture("llama", rope_freqs=True)  # every other block off


@pytest.mark.parametrize("name,expected", [
    ("llama", ["attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
               "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"]),
    ("qwen2", ["attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias", "attn_k.bias",
               "attn_v.bias", "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
               "ffn_down.weight"]),
    ("qwen3", ["attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q_norm.weight",
               "attn_k_norm.weight", "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
               "ffn_down.weight"]),
    ("gemma3", ["attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q_norm.weight",
                "attn_k_norm.weight", "attn_output.weight", "post_attention_norm.weight", "ffn_norm.weight",
                "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", "post_ffw_norm.weight"]),
    ("phi3", ["attn_norm.weight", "attn_qkv.weight", "attn_output.weight", "ffn_norm.weight", "ffn_up.weight",
              "ffn_down.weight"]),
])
def test_block_tensors_are_gguf_py_names(name, expected):
    """gguf-py's names (constants.py MODEL_TENSORS) and llama.cpp's shapes, numpy order (rows, K)."""
    t = architecture(name).block_tensors(q_dim=1024, kv_dim=256, dim=640, ffn_dim=2048, head_dim=256)
    assert list(t) == expected
    assert t["attn_output.weight"] == (640, 1024) and t["ffn_down.weight"] == (640, 2048)
    if name == "phi3":
        assert t["attn_qkv.weight"] == (1024 + 2 * 256, 640) and t["ffn_up.weight"] == (2 * 2048, 640)
    else:
        assert t["attn_q.weight"] == (1024, 640) and t["attn_k.weight"] == (256, 640)
    if "attn_q_norm.weight" in t:
        assert t["attn_q_norm.weight"] == t["attn_k_norm.weight"] == (256,)


def test_gguf_py_knows_every_name():
    import gguf

    for name, a in ARCHITECTURES.items():
        arch = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == name)
        known = {gguf.TENSOR_NAMES[t].format(bid=0) for t in gguf.MODEL_TENSORS[arch]}
        for suffix in a.block_tensors(8, 4, 8, 16, 4):
            assert "blk.0." + suffix.rsplit(".", 1)[0] in known, (name, suffix)


def test_bad_declarations_and_names():
    with pytest.raises(ValueError, match=r"^unknown architecture 'gemma2'; supported: llama, qwen2, qwen3, gemma3, phi3$"):
        architecture("gemma2")
    with pytest.raises(ValueError, match=r"^rope must be 'norm' or 'neox', got 'yarn'$"):
        Architecture("x", rope="yarn")
    with pytest.raises(ValueError, match=r"^activation must be 'silu' or 'gelu_tanh', got 'relu'$"):
        Architecture("x", activation="relu")
