"""The ``xinfer-async`` command: pull, generate, chat, perplexity, devices, bench."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import trio

from .hal import XinferError


def _add_model_args(p: argparse.ArgumentParser, *, sampling: bool = True,
                    ctx_help: str = "context length in tokens (default: min(2048, the model's))") -> None:
    p.add_argument("-m", "--model", default="smollm2-135m",
                   help="a known model name or a .gguf path (default: smollm2-135m, pulled when missing)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto (default: $XINFER_DEVICE, else auto)")
    p.add_argument("--ctx", type=int, default=None, help=ctx_help)
    p.add_argument("--chunk", type=int, default=None,
                   help="prompt tokens per prefill step (default: 512 on cuda, 64 on cpu; at most --ctx)")
    if sampling:
        p.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
        p.add_argument("--top-p", type=float, default=1.0)
        p.add_argument("--top-k", type=int, default=0, help="0 turns top-k off (default)")
        p.add_argument("--seed", type=int, default=None)
        p.add_argument("--min-p", type=float, default=0.0,
                       help="keep tokens at least this times as likely as the most likely one (0: off, default)")
        p.add_argument("--repeat-penalty", type=float, default=1.0,
                       help="divide the logits of recent tokens by this (llama.cpp's; 1: off, default; try 1.1-1.3)")
        p.add_argument("--presence-penalty", type=float, default=0.0,
                       help="subtract this from the logits of recent tokens, in [-2, 2] (0: off, default)")
        p.add_argument("--frequency-penalty", type=float, default=0.0,
                       help="subtract this times its count from a recent token's logit, in [-2, 2] (0: off, default)")
        p.add_argument("--repeat-last-n", type=int, default=64,
                       help="recent tokens (prompt and generated) the penalties look at; -1: all (default 64)")


def _add_template_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chat-template", default=None, metavar="NAME|FILE",
                   help="the chat template when the model file has none (a base model) or to replace its own: "
                        "chatml, gemma, llama3, or the path of a .jinja file")


#: the sampling flags' dests, as ``generate``'s keyword arguments (and ``SamplingParams``'s fields)
SAMPLING_ARGS = ("temperature", "top_p", "top_k", "seed", "min_p", "repeat_penalty", "presence_penalty",
                 "frequency_penalty", "repeat_last_n")


def _sampling(args) -> dict:
    return {k: getattr(args, k) for k in SAMPLING_ARGS}


async def _load(args, slots: int = 1, ctx: int | None = None):
    from . import llm

    return await llm.load(args.model, device=args.device, slots=slots, ctx=ctx or args.ctx, chunk=args.chunk,
                          progress=True, chat_template=getattr(args, "chat_template", None))


async def _generate(args) -> None:
    model = await _load(args)
    prompt = model.render_chat([{"role": "user", "content": args.prompt}]) if args.chat else args.prompt
    stream = model.generate(prompt, max_tokens=args.n_predict, stop=args.stop or (), special=args.special,
                            **_sampling(args))
    async for piece in stream:
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    sys.stdout.flush()
    t, n = stream.result.timings, len(stream.result.token_ids)
    plural = lambda k: "token" if k == 1 else "tokens"  # noqa: E731
    decode = f"decode {t.decode_tok_per_s:.1f} tok/s" if n > 1 else "no decode step"  # one token: the prefill's
    print(f"[{n} {plural(n)}, finish: {stream.result.finish_reason}; prompt {t.prompt_tokens} {plural(t.prompt_tokens)} "
          f"at {t.prefill_tok_per_s:.1f} tok/s, {decode}, "
          f"first token after {t.time_to_first_token_s * 1e3:.0f} ms, on {model.device.name}]", file=sys.stderr)
    if stream.result.finish_reason == "stop" and len(stream.result.token_ids) <= 1 and model.chat_template \
            and not args.chat:
        print("[the model ended its turn at once: it is a chat (instruct) model and the prompt was given as "
              "plain text. Add --chat to wrap the prompt in the model's chat template, or talk to it with "
              "`xinfer-async chat`]", file=sys.stderr)
    await model.aclose()


async def _chat(args) -> None:
    from ._cli_chat import run_chat

    model = await _load(args)
    try:
        if not model.chat_template:  # a known model pulled by load: the checks could not read its file before
            from ._cli_checks import CHAT_HINT, no_template_error

            raise no_template_error("chat", model.path, CHAT_HINT)
        await run_chat(model, system=args.system, n_predict=args.n_predict, sampling=_sampling(args))
    finally:
        with trio.CancelScope(shield=True):
            await model.aclose()


async def _perplexity(args, pre) -> None:
    from .llm._perplexity import perplexity

    text = Path(args.file).read_text(encoding="utf-8", errors="replace")
    model = await _load(args, ctx=args.ctx)
    ids = pre.text_ids if pre.text_ids is not None else model.tokenize(text)
    n_chunks = len(ids) // args.ctx
    if n_chunks < 1:
        raise ValueError(f"{args.file} has {len(ids)} tokens, fewer than one chunk of --ctx {args.ctx}")
    rows = []
    t0 = time.perf_counter()
    from tqdm import tqdm

    bar = tqdm(total=n_chunks, unit="chunk", desc="perplexity", file=sys.stderr, disable=args.quiet)
    for c in range(n_chunks):
        rows.append(await model.logits(ids[c * args.ctx:(c + 1) * args.ctx]))
        bar.update(1)
    bar.close()
    it = iter(rows)
    ppl, count = perplexity(lambda chunk: next(it), ids, args.ctx)
    dt = time.perf_counter() - t0
    print(f"perplexity {ppl:.4f} over {count} predicted tokens ({n_chunks} chunks of {args.ctx}; "
          f"{n_chunks * args.ctx / dt:.0f} tok/s on {model.device.name})")
    await model.aclose()


def _devices(args) -> None:
    import os

    from ._open import cuda_status

    from .backends.cpu import _isa

    try:
        isa = _isa.configure()
    except ValueError as e:  # a bad XINFER_CPU_ISA: said here, raised where a cpu device is made
        isa = f"none ({e})"
    print(f"cpu: available ({os.cpu_count()} cores, native C kernels, int8 dot products: {isa})")
    ok, reason = cuda_status()
    print(f"cuda: {'available' if ok else 'not available'}" + (f" ({reason})" if reason else ""))
    if os.environ.get("XINFER_DEVICE"):
        print(f"XINFER_DEVICE={os.environ['XINFER_DEVICE']}")


def _pull(args) -> None:
    from ._cli_checks import check_pull_name
    from .llm import pull

    check_pull_name(args.name)
    path = pull(args.name, progress=not args.quiet)
    print(path)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xinfer-async", description="Async inference runtime: models from GGUF, on cpu or cuda.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("pull", help="download a known model into the cache")
    p.add_argument("name", nargs="?", default="smollm2-135m")
    p.add_argument("-q", "--quiet", action="store_true")

    p = sub.add_parser("generate", help="stream a completion of a prompt")
    _add_model_args(p)
    p.add_argument("-p", "--prompt", required=True)
    p.add_argument("-n", "--n-predict", type=int, default=128, help="tokens to generate at most (default 128)")
    p.add_argument("--stop", action="append", help="a stop string (repeatable)")
    p.add_argument("--special", action="store_true", help="parse special tokens (<|im_start|>...) in the prompt")
    p.add_argument("--chat", action="store_true",
                   help="wrap the prompt in the model's chat template as one user message (for instruct models)")
    _add_template_arg(p)

    p = sub.add_parser("chat", help="interactive chat with the model's template")
    _add_model_args(p)
    p.add_argument("-n", "--n-predict", type=int, default=256)
    p.add_argument("--system", default=None, help="a system message")
    _add_template_arg(p)

    p = sub.add_parser("perplexity", help="perplexity of a text file")
    _add_model_args(p, sampling=False, ctx_help="tokens per chunk, each scored from position 0 (default 256)")
    p.set_defaults(ctx=256)
    p.add_argument("-f", "--file", required=True)
    p.add_argument("-q", "--quiet", action="store_true")

    sub.add_parser("devices", help="list the backends and whether they can run here")

    p = sub.add_parser("bench", help="benchmarks (runtime, model, load): see `xinfer-async bench -h`")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    sub.add_parser("serve", help="an OpenAI-compatible HTTP server: see `xinfer-async serve -h`", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # the bench runner parses its own options (and its -h lists the benchmarks)
        from .bench.__main__ import main as bench_main

        return bench_main(argv[1:])
    if argv[:1] == ["serve"]:  # parsed in the serve package (xinfer_async/serve/_command.py)
        from .serve import main as serve_main

        return serve_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        if args.command == "pull":
            _pull(args)
        elif args.command == "devices":
            _devices(args)
        else:
            from ._cli_checks import check_before_load

            pre = check_before_load(args)  # every option that can be judged before loading
            if args.command == "perplexity":
                trio.run(_perplexity, args, pre)
            else:
                trio.run({"generate": _generate, "chat": _chat}[args.command], args)
    except (XinferError, ValueError, FileNotFoundError) as exc:
        print(f"xinfer-async {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
