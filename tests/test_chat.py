"""Tests of xinfer_async/llm/_chat.py."""

from __future__ import annotations

import pytest

from _llm_fixtures import gemma_tokenizer, golden, golden_named, require_model
from xinfer_async.llm._chat import (BUILTIN_TEMPLATES, TemplateError, chat_prompt_ids, render_chat,
                                    resolve_chat_template)

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


# -- built-in templates and chat_prompt_ids -----------------------------------------------------

def _gemma_chats():
    """(messages, rendered, ids) of every Gemma golden chat: the template cases and the chat generations."""
    g = golden_named("gemma3_llamacpp.json")
    out = [(c["messages"], c["rendered"], c["ids"]) for c in g["chat_template"]["conversations"]]
    for gen in g["generations"]:
        if gen["kind"] == "chat":
            q = gen["prompt"].split("<start_of_turn>user\n", 1)[1].split("<end_of_turn>", 1)[0]
            out.append(([{"role": "user", "content": q}], gen["prompt"], gen["prompt_ids"]))
    return out


def test_gemma_builtin_is_the_golden_template():
    assert BUILTIN_TEMPLATES["gemma"] == golden_named("gemma3_llamacpp.json")["chat_template"]["template"]
    for messages, rendered, _ in _gemma_chats():
        assert render_chat(BUILTIN_TEMPLATES["gemma"], messages, bos_token="<bos>", eos_token="<eos>") == rendered


@pytest.mark.model
def test_gemma_builtin_golden_ids():
    tok = gemma_tokenizer()
    chats = _gemma_chats()
    assert len(chats) >= 5
    for messages, _, ids in chats:
        assert chat_prompt_ids(BUILTIN_TEMPLATES["gemma"], messages, tok) == ids


@pytest.mark.model
def test_chat_prompt_ids_keeps_user_markers_as_text_and_trims_as_the_template():
    tok = gemma_tokenizer()
    gemma = BUILTIN_TEMPLATES["gemma"]
    ids = chat_prompt_ids(gemma, [{"role": "user", "content": "<start_of_turn>hi"}], tok)
    assert ids.count(105) == 2  # the template's two markers, not the user's text
    # the template trims contents: a padded message gives the same prompt
    padded = chat_prompt_ids(gemma, [{"role": "user", "content": "  \nWhy?  "}], tok)
    assert padded == chat_prompt_ids(gemma, [{"role": "user", "content": "Why?"}], tok)
    # a template that does not trim keeps the spaces with the content (tokenized as one text)
    chatml = chat_prompt_ids(BUILTIN_TEMPLATES["chatml"], [{"role": "user", "content": " Why? "}], tok)
    assert tok.decode(chatml) == "<|im_start|>user\n Why? <|im_end|>\n<|im_start|>assistant\n"


def test_chatml_and_llama3_builtins():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert render_chat(BUILTIN_TEMPLATES["chatml"], msgs) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert render_chat(BUILTIN_TEMPLATES["llama3"], msgs, bos_token="<|begin_of_text|>") == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")


def test_resolve_chat_template(tmp_path):
    assert resolve_chat_template("gemma") == BUILTIN_TEMPLATES["gemma"]
    f = tmp_path / "t.jinja"
    f.write_text("{% for m in messages %}[{{ m['content'] }}]{% endfor %}")
    assert render_chat(resolve_chat_template(f), [{"role": "user", "content": "x"}]) == "[x]"
    assert resolve_chat_template(str(f)) == f.read_text()
    with pytest.raises(ValueError, match=r"^unknown chat template 'gemma3': give a built-in name "
                                         r"\(chatml, gemma, llama3\) or the path of a \.jinja file$"):
        resolve_chat_template("gemma3")
    (tmp_path / "empty.jinja").write_text(" \n")
    with pytest.raises(ValueError, match=r"empty\.jinja is empty$"):
        resolve_chat_template(tmp_path / "empty.jinja")
    (tmp_path / "bad.jinja").write_text("{% for m in messages %}")
    with pytest.raises(ValueError, match=r"bad\.jinja is not a valid Jinja2 template: line 1: "):
        resolve_chat_template(tmp_path / "bad.jinja")
    with pytest.raises(TypeError, match=r"^chat_template must be a template name or a file path, got int$"):
        resolve_chat_template(3)
