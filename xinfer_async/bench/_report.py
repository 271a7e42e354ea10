"""Shared output of the benchmarks: percentiles, a text table, ``--json FILE`` and ``--plot FILE.png``.

``--plot`` draws throughput (tok/s) and latency (ms) against concurrency with matplotlib, an optional
extra (``pip install 'xinfer_async[plot]'``); ``check_plot`` fails before a benchmark runs when it is
missing, with that hint.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, Callable, Iterable, Sequence

import numpy as np

__all__ = ["percentiles", "render_table", "add_output_args", "check_plot", "write_json", "plot_concurrency",
           "PlotUnavailableError", "concurrency_figure"]


class PlotUnavailableError(RuntimeError):
    """``--plot`` was asked for but matplotlib is not installed."""


def percentiles(samples: Iterable[float], qs: Sequence[int] = (50, 90, 99), scale: float = 1.0,
                prefix: str = "") -> dict[str, float]:
    """Percentiles of ``samples`` (times ``scale``) as ``{prefix + "p50": ..., ...}`` plus ``mean``.

    Returns NaN for every key when there are no samples (a row with nothing measured stays a row).
    """
    a = np.asarray(list(samples), np.float64) * scale
    out = {f"{prefix}p{q}": (float(np.percentile(a, q)) if a.size else math.nan) for q in qs}
    out[f"{prefix}mean"] = float(a.mean()) if a.size else math.nan
    return out


def render_table(columns: Sequence[tuple[str, str, str]], rows: Sequence[dict[str, Any]]) -> str:
    """A fixed-width text table.

    Args:
        columns: (header, key, format spec) per column, e.g. ``("tok/s", "out_tok_per_s", ".1f")``;
            a value that is missing, None or NaN prints as ``-``.
        rows: dicts holding the keys.
    """
    cells = [[_cell(r.get(key), fmt) for _, key, fmt in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (h, _, _) in enumerate(columns)]
    head = " ".join(h.rjust(w) for (h, _, _), w in zip(columns, widths))
    lines = [head, "-" * len(head)]
    lines += [" ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def _cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, fmt) if fmt else str(value)


def add_output_args(parser: argparse.ArgumentParser, plot: bool = True) -> None:
    """Add ``--json FILE`` and (when ``plot``) ``--plot FILE.png`` to a benchmark's parser."""
    parser.add_argument("--json", metavar="FILE", default=None, help="also write the numbers as JSON to FILE")
    if plot:
        parser.add_argument("--plot", metavar="FILE.png", default=None,
                            help="also plot tok/s and latency against concurrency (needs matplotlib: "
                                 "pip install 'xinfer_async[plot]')")


def check_plot(path: str | None) -> None:
    """Fail early when ``--plot`` is given and matplotlib is missing.

    Raises:
        PlotUnavailableError: ``path`` is set and ``import matplotlib`` fails (the message says
            how to install it).
    """
    if path is None:
        return
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotUnavailableError(
            f"--plot {path} needs matplotlib, which is not installed: pip install 'xinfer_async[plot]' "
            "(or pip install matplotlib)") from None


def _clean(obj: Any) -> Any:
    """JSON-safe copy: NaN/inf -> None, numpy scalars -> Python numbers, dataclasses -> dicts."""
    import dataclasses

    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _clean(dataclasses.asdict(obj))
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(path: str, result: dict[str, Any]) -> None:
    """Write ``result`` as indented JSON (NaN and inf become null, so any JSON reader takes it)."""
    with open(path, "w") as f:
        json.dump(_clean(result), f, indent=2)
        f.write("\n")


def concurrency_figure(rows: Sequence[dict[str, Any]], *, x: str, x_label: str, tok_per_s: str,
                       latencies: dict[str, str], title: str, integer_x: bool = False,
                       point_label: Callable[[dict], str] | None = None) -> Any:
    """The matplotlib figure of ``plot_concurrency`` (not saved; the caller closes it).

    The throughput axis starts at 0 (a small dip is drawn as small), an integer ``x`` (slot counts)
    gets integer ticks only, and each throughput point is labelled with ``point_label(row)``.

    Raises:
        PlotUnavailableError: matplotlib is missing.
    """
    check_plot("figure")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    pts = sorted(rows, key=lambda r: r[x])
    xs = [r[x] for r in pts]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    ys = [r.get(tok_per_s) for r in pts]
    a1.plot(xs, ys, "o-")
    if point_label is not None:
        for r, xv, yv in zip(pts, xs, ys):
            a1.annotate(point_label(r), (xv, yv), textcoords="offset points", xytext=(0, 7), ha="center",
                        fontsize=8)
    a1.set_xlabel(x_label)
    a1.set_ylabel("tokens/s")
    a1.set_title("throughput")
    top = max([v for v in ys if v is not None and v == v] or [1.0])
    a1.set_ylim(0, top * 1.15)  # from 0: the eye reads heights as ratios
    for label, key in latencies.items():
        a2.plot(xs, [r.get(key) for r in pts], "o-", label=label)
    a2.set_xlabel(x_label)
    a2.set_ylabel("ms")
    a2.set_ylim(bottom=0)
    a2.set_title("latency")
    a2.legend()
    for a in (a1, a2):
        a.grid(True, alpha=0.3)
        if len(xs) > 1 and min(xs) > 0 and max(xs) / min(xs) >= 8:
            a.set_xscale("log", base=2)
        if integer_x:
            a.set_xticks(sorted(set(xs)))
            a.set_xticklabels([str(int(v)) for v in sorted(set(xs))])
            a.xaxis.set_minor_locator(NullLocator())
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_concurrency(path: str, rows: Sequence[dict[str, Any]], *, x: str, x_label: str, tok_per_s: str,
                     latencies: dict[str, str], title: str, integer_x: bool = False,
                     point_label: Callable[[dict], str] | None = None) -> None:
    """Two panels against concurrency: throughput and latency percentiles, saved to ``path`` (PNG).

    Args:
        rows: one dict per measured point.
        x: the key of the concurrency (slots, mean busy slots...).
        x_label: its axis label.
        tok_per_s: the key of the throughput, tokens/s.
        latencies: legend label -> key of a latency in milliseconds.
        title: the figure's title (say the settings: batching, tokens asked).
        integer_x: ``x`` is a count (slots): ticks at the measured counts only, no 1.5.
        point_label: a row -> the text written beside its throughput point (its settings).

    Raises:
        PlotUnavailableError: matplotlib is missing.
    """
    check_plot(path)
    import matplotlib.pyplot as plt

    fig = concurrency_figure(rows, x=x, x_label=x_label, tok_per_s=tok_per_s, latencies=latencies, title=title,
                             integer_x=integer_x, point_label=point_label)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot written to {path}", file=sys.stderr)
