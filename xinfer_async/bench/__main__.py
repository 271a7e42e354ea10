"""``xinfer-async bench SUBCOMMAND [options]`` (also ``python -m xinfer_async.bench``; see
``xinfer_async.bench.SUBCOMMANDS``)."""

from __future__ import annotations

import importlib
import sys

from . import OWN_HELP, PROG, SUBCOMMANDS, SUMMARIES, resolve


def usage() -> str:
    """``bench --help``: the usage line and what each subcommand measures."""
    width = max(len(n) for n in SUBCOMMANDS)
    lines = [f"usage: {PROG} SUBCOMMAND [options]", f"       {PROG} SUBCOMMAND --help   (its options and what its columns mean)",
             "", "subcommands:"]
    lines += [f"  {n:<{width}}  {SUMMARIES.get(n, '')}".rstrip() for n in SUBCOMMANDS]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    try:
        fn = resolve(name, check_cuda=not ({"-h", "--help"} & set(rest)))
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if {"-h", "--help"} & set(rest) and name not in OWN_HELP:
        # a subcommand that does not parse its options: its docstring is its help (nothing runs)
        module = importlib.import_module(SUBCOMMANDS[name].partition(":")[0])
        print(f"usage: {PROG} {name}\n\n{(module.__doc__ or SUMMARIES.get(name, '')).strip()}")
        return 0
    return int(fn(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
