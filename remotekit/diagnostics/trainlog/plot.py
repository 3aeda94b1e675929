"""train-log's picture (matplotlib, the ``plot`` extra): loss and accuracy against step with
the spikes and events marked, and the loss histogram by bucket. It draws the parts of a report
it is handed (:func:`~remotekit.diagnostics.trainlog.plot_report` hands them over), and knows
nothing of the report itself; matplotlib is imported when a picture is drawn."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from remotekit.diagnostics.trainlog.model import Event, Histogram, Series, Spike
from remotekit.diagnostics.trainlog.words import num

__all__ = ["draw"]

_EVENT_STYLE = {
    "checkpoint": ("tab:green", "--"),
    "resume": ("tab:purple", "-"),
    "epoch": ("0.6", ":"),
    "warmup": ("tab:orange", "-."),
    "lr-jump": ("tab:brown", "-."),
    "pause": ("tab:gray", "-"),
}


def draw(
    path: str,
    *,
    title: str,
    series: Sequence[Series],
    events: Sequence[Event],
    spikes: Sequence[Spike],
    histogram: Histogram | None,
    shape: str = "",
    verdict: str | None = None,
) -> str:
    """Draw loss and accuracy (else the first series) against step, each with the events and
    its spikes marked, and ``histogram`` below them (the loss's ``shape`` in its title, the
    ``verdict`` under it) into ``path`` (PNG, SVG, PDF by suffix); ValueError for nothing to
    draw, ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [m for m in ("loss", "acc") if _series_for(series, m) is not None]
    if not panels:
        panels = [s.metric for s in series[:1]]
    n = len(panels) + (1 if histogram is not None else 0)
    if n == 0:
        raise ValueError("nothing to draw: the report has no series (use points > 0)")
    fig, axes = plt.subplots(n, 1, figsize=(11, 3.2 * n), squeeze=False)
    ax_list = [a[0] for a in axes]
    for ax, metric in zip(ax_list, panels):
        s = _series_for(series, metric)
        assert s is not None
        _plot_metric(ax, s, events, spikes)
    ax_list[len(panels) - 1].set_xlabel("step")
    ax_list[0].set_title(title, fontsize=9)
    if histogram is not None:
        _plot_histogram(ax_list[-1], histogram, shape, plt)
        if verdict is not None:
            fig.text(0.01, 0.005, verdict, fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _series_for(series: Sequence[Series], metric: str) -> Series | None:
    return next((s for s in series if s.metric == metric), None)


def _plot_metric(ax: Any, s: Series, events: Sequence[Event], spikes: Sequence[Spike]) -> None:
    """One panel: the decimated series, the events as vertical lines, the spikes marked."""
    metric = s.metric
    ax.plot(s.steps, s.values, lw=0.6, color="tab:blue", label=metric)
    if metric == "loss" and s.values and min(s.values) > 0:
        ax.set_yscale("log")
    _plot_events(ax, events)
    _plot_spikes(ax, spikes, metric)
    ax.set_ylabel(metric)
    ax.grid(alpha=0.25)
    ax.legend(loc="best", fontsize=7, ncol=3)


def _plot_events(ax: Any, events: Sequence[Event]) -> None:
    """Each event as a vertical line styled by kind (epoch starts left out when crowded)."""
    seen: set[str] = set()
    for e in events:
        color, style = _EVENT_STYLE.get(e.kind, ("k", ":"))
        if e.kind == "epoch" and len(events) > 200:
            continue
        ax.axvline(
            e.step,
            color=color,
            ls=style,
            lw=0.9,
            alpha=0.8,
            label=e.kind if e.kind not in seen else None,
        )
        seen.add(e.kind)


def _plot_spikes(ax: Any, spikes: Sequence[Spike], metric: str) -> None:
    """Spikes and cliffs of ``metric`` at their peaks, each with its event (or none)."""
    mine = [sp for sp in spikes if sp.metric == metric and math.isfinite(sp.value)]
    for kind, marker, color in (("spike", "^", "red"), ("cliff", "v", "red")):
        pts = [sp for sp in mine if sp.kind == kind]
        if not pts:
            continue
        ax.scatter(
            [p.peak_step for p in pts],
            [p.value for p in pts],
            marker=marker,
            s=40,
            color=color,
            zorder=5,
            label=f"{kind} ({len(pts)})",
        )
        crowded = len(pts) > 6
        for p in pts[:40]:
            at = ("at " + p.event) if p.at_event and p.event else "no event"
            ax.annotate(
                f"{num(p.step)}: {at}",
                (p.peak_step, p.value),
                textcoords="offset points",
                xytext=(2, -4 if kind == "cliff" and crowded else 4),
                fontsize=6 if crowded else 7,
                rotation=90 if crowded else 0,
                va="top" if kind == "cliff" and crowded else "bottom",
                color="darkred",
            )


def _plot_histogram(ax: Any, hist: Histogram, shape: str, plt: Any) -> None:
    """The loss histogram (trend removed), stacked by bucket, with the modes marked."""
    edges = list(hist.edges)
    widths = [b - a for a, b in zip(edges[:-1], edges[1:])]
    bottom = [0.0] * len(widths)
    cmap = plt.get_cmap("tab10")
    for i, (name, counts) in enumerate(hist.counts.items()):
        label = f"{hist.key} {name}" if hist.key else name
        ax.bar(
            edges[:-1],
            counts,
            width=widths,
            bottom=bottom,
            align="edge",
            color=cmap(i % 10),
            alpha=0.85,
            label=label,
        )
        bottom = [b + c for b, c in zip(bottom, counts)]
    for m in hist.modes:
        ax.axvline(m, color="k", ls="--", lw=0.8)
    if hist.scale == "log":
        ax.set_xscale("log")
    ax.set_title(
        f"{hist.metric} over steps {num(hist.first_step)}..{num(hist.last_step)} "
        f"(trend removed): {shape}" + (f", coloured by {hist.key}" if hist.key else ""),
        fontsize=9,
    )
    ax.set_xlabel(hist.metric)
    ax.set_ylabel("steps")
    ax.legend(fontsize=7)
