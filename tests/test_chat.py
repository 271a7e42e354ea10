"""Tests of xinfer_async/llm/_chat.py."""

from __future__ import annotations

import pytest

from _llm_fixtures import golden, require_model
from xinfer_async.llm._chat import TemplateError, render_chat

# SmolLM2-135M-Instruct's tokenizer.chat_template, as stored in the GGUF file.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _question(prompt: str) -> str:
    return prompt.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]


def test_golden_chat_prompts():
    chats = [g for g in golden()["generations"] if g["kind"] == "chat"]
    assert chats
    for g in chats:
        out = render_chat(SMOLLM2_TEMPLATE, [{"role": "user", "content": _question(g["prompt"])}])
        assert out == g["prompt"]


@pytest.mark.model
def test_template_from_gguf_matches():
    from xinfer_async.llm._gguf import load_gguf

    t = load_gguf(require_model()).metadata["tokenizer.chat_template"]
    assert t == SMOLLM2_TEMPLATE
    g = next(g for g in golden()["generations"] if g["kind"] == "chat")
    assert render_chat(t, [{"role": "user", "content": _question(g["prompt"])}]) == g["prompt"]


def test_system_message_and_no_generation_prompt():
    msgs = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."}]
    out = render_chat(SMOLLM2_TEMPLATE, msgs, add_generation_prompt=False)
    assert out == ("<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                   "<|im_start|>assistant\nHello.<|im_end|>\n")


def test_missing_role_or_content():
    with pytest.raises(ValueError, match=r"^messages\[1\] has no 'content'$"):
        render_chat(SMOLLM2_TEMPLATE, [{"role": "user", "content": "a"}, {"role": "user"}])
    with pytest.raises(ValueError, match=r"^messages\[0\] has no 'role'$"):
        render_chat(SMOLLM2_TEMPLATE, [{"content": "a"}])
    with pytest.raises(ValueError, match=r"^messages\[0\]\['content'\] must be a str, got int$"):
        render_chat(SMOLLM2_TEMPLATE, [{"role": "user", "content": 3}])
    with pytest.raises(TypeError, match=r"^messages\[0\] must be a dict, got str$"):
        render_chat(SMOLLM2_TEMPLATE, ["hi"])


def test_raise_exception_and_bos_eos():
    t = ("{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}{% endif %}"
         "{{ bos_token }}{{ messages[0]['content'] }}{{ eos_token }}")
    with pytest.raises(TemplateError, match="^first must be user$"):
        render_chat(t, [{"role": "assistant", "content": "x"}])
    assert render_chat(t, [{"role": "user", "content": "x"}], bos_token="<s>", eos_token="</s>") == "<s>x</s>"


def test_sandbox_blocks_attribute_access():
    t = "{{ messages.__class__.__mro__ }}"
    with pytest.raises(TemplateError, match="^chat template failed: SecurityError"):
        render_chat(t, [])


def test_template_syntax_error():
    with pytest.raises(TemplateError, match="^chat template failed: TemplateSyntaxError"):
        render_chat("{% for %}", [])
