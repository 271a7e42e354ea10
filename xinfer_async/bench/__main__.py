"""``python -m xinfer_async.bench SUBCOMMAND [options]`` (see ``xinfer_async.bench.SUBCOMMANDS``)."""

from __future__ import annotations

import sys

from . import SUBCOMMANDS, resolve


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m xinfer_async.bench {" + ",".join(sorted(SUBCOMMANDS)) + "} [options]")
        print("       python -m xinfer_async.bench SUBCOMMAND --help")
        return 0 if argv else 2
    try:
        fn = resolve(argv[0])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return int(fn(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
