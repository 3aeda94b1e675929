"""train-log's report and its faces: :class:`TrainLogReport` (everything the analysis found),
its text (:func:`render_report`, what ``train-log`` prints, and the :func:`diagnosis` in it) and
its picture (:func:`plot_report`, drawn by :mod:`.plot`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from remotekit.diagnostics.base import EXIT_FAILED, EXIT_FINDINGS, EXIT_OK
from remotekit.diagnostics.trainlog import plot
from remotekit.diagnostics.trainlog.model import (
    Composition,
    Correlation,
    Distribution,
    Event,
    Histogram,
    LogSource,
    MetricStats,
    Onset,
    Periodicity,
    Preset,
    Series,
    Spike,
)
from remotekit.diagnostics.trainlog.words import (
    KIND_WORDS,
    SPIKE_COLUMNS,
    SPIKE_SPARE_COLUMNS,
    event_line,
    num,
    onset_line,
    p_value,
    pct,
    spike_cells,
)
from remotekit.render import fit_lines, table
from remotekit.result import Shown

__all__ = ["TrainLogReport", "diagnosis", "plot_report", "render_report"]


@dataclass(frozen=True, repr=False)
class TrainLogReport(Shown):
    """Everything train-log found; ``exit_code`` 0 OK, 1 findings, 2 could not run."""

    host: str
    path: str
    source: LogSource | None = None
    preset: Preset | None = None
    onset: Onset | None = None
    metrics: tuple[MetricStats, ...] = ()
    spikes: tuple[Spike, ...] = ()
    events: tuple[Event, ...] = ()
    correlations: tuple[Correlation, ...] = ()
    distribution: Distribution | None = None
    periodicity: Periodicity | None = None
    composition: Composition | None = None
    histogram: Histogram | None = None
    series: tuple[Series, ...] = ()
    warnings: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    hints: tuple[str, ...] = ()  # command lines to run next (e.g. naming a metric column)
    numeric_columns: tuple[str, ...] = ()  # when no loss was found: the columns there are
    findings: tuple[str, ...] = ()
    diagnosis: tuple[str, ...] = ()
    exit_code: int = EXIT_OK
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    @property
    def notes(self) -> tuple[str, ...]:
        """The script's warnings: caveats of the reading (a column chosen by its name's last
        part, skipped lines, a summary without history), context that never changes the
        exit code; the problems found are ``findings``."""
        return self.warnings

    def render(self) -> str:
        return render_report(self)

    def pictures(self) -> list[tuple[str, bytes]]:
        """The picture ``--plot`` draws (:func:`plot_report`), shown in Jupyter below the
        findings and the text: when the report holds series (made with ``points`` > 0) and
        matplotlib is installed; none otherwise."""
        if not self.series:
            return []
        import os
        import tempfile

        try:
            with tempfile.TemporaryDirectory(prefix="remotekit-plot-") as tmp:  # 0700
                path = plot_report(self, os.path.join(tmp, "plot.png"))
                with open(path, "rb") as f:
                    return [(f"{self.host}:{self.path}", f.read())]
        except ImportError:
            return []

    def series_for(self, metric: str) -> Series | None:
        """The analysed series of column ``metric``, or None when it was not analysed."""
        return next((s for s in self.series if s.metric == metric), None)


def _onsets(spikes: Sequence[Spike], tol: float) -> list[list[Spike]]:
    """Spikes grouped into incidents: onsets within ``tol`` steps of each other."""
    groups: list[list[Spike]] = []
    for s in sorted((s for s in spikes if s.kind != "nonfinite"), key=lambda s: s.step):
        if groups and s.step - groups[-1][0].step <= tol:
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def diagnosis(rep: TrainLogReport) -> list[str]:
    """A few sentences that lead from the findings to a cause."""
    if rep.errors:
        return []
    out: list[str] = []
    if rep.onset is not None and rep.onset.unhealthy:
        out.append(onset_line(rep.onset) + "." + START_ADVICE.get(rep.onset.kind, ""))
    tol = rep.source.tolerance if rep.source else 0.0
    groups = _onsets(rep.spikes, tol)
    if groups:
        kinds = sorted({f"{s.metric} {s.kind}s" for g in groups for s in g})
        out.append(f"{len(groups)} incident(s) ({', '.join(kinds)}).")
        for c in rep.correlations:
            if c.beyond_chance:
                out.append(
                    f"{c.at_events} of {c.spikes} sit at {KIND_WORDS.get(c.kind, c.kind)} "
                    f"(±{num(tol)} steps), more than chance ({num(c.expected, 2)} expected, "
                    f"p={p_value(c.p_value)})."
                )
        out += [f"{line}." for line in filter(None, (s.resume_line() for s in rep.spikes))]
        loose = [g for g in groups if not any(s.at_event for s in g)]
        if loose:
            worst = [max(g, key=lambda s: s.score or 0.0) for g in loose[:5]]  # the peak's step
            where = ", ".join(
                f"step {num(w.step)}" + (f" (bucket {w.bucket})" if w.bucket else "") for w in worst
            )
            more = f" and {len(loose) - 5} more" if len(loose) > 5 else ""
            out.append(
                f"{len(loose)} at no event: {where}{more}; events do not explain those, "
                "look at what the batches were."
            )
    nonfinite = [s for s in rep.spikes if s.kind == "nonfinite"]
    if nonfinite:
        out.append(
            f"non-finite {', '.join(sorted({s.metric for s in nonfinite}))} from step "
            f"{num(nonfinite[0].step)} ({sum(s.flagged for s in nonfinite)} value(s))."
        )
    comp = rep.composition
    if comp is not None and comp.finding:
        out.append(comp.verdict + ".")
        if comp.key is not None:
            out.append(
                "Fix: interleave buckets in proportion (stride-based), so that every bucket "
                "is spread over the epoch and no bucket runs for many steps in a row."
            )
    elif comp is not None and comp.homogeneous:
        out.append(comp.verdict + ".")
    warm = [e for e in rep.events if e.kind == "warmup"]
    if warm:
        out.append(f"{warm[0].detail} (expect a rough start; a warmup schedule avoids it).")
    if not out:
        out.append("no spikes, cliffs or signs of homogeneous batches.")
    return out


#: What to look at first for each way of being unhealthy from the start.
START_ADVICE = {
    "above-chance": " Worse than a uniform guess: look at the lr (too high for the init), the"
    " targets (shifted or mislabelled) and the loss's reduction before the spikes.",
    "nonfinite": " Broken before the first log line: look at the init, the data's first"
    " batches and the loss scale.",
    "flat": " Nothing was learned: look at the lr (zero, or the schedule never left its"
    " warm-up), frozen parameters or an optimizer given none, and targets that do not match"
    " the inputs. A run resumed from a trained model is flat too: then it is no finding.",
}


def render_report(rep: TrainLogReport) -> str:
    """The report as text for people: what was read, then one part per kind of finding."""
    parts = (_head, _metrics, _spikes, _events, _correlations, _distribution, _periodicity)
    lines = fit_lines([f"train-log  {rep.host}:{rep.path}"])
    for part in (*parts, _composition, _ending):
        for item in part(rep):  # a line of prose fits the terminal; a table fits itself
            lines += [item] if "\n" in item else fit_lines([item])
    return "\n".join(lines)


def _head(rep: TrainLogReport) -> list[str]:
    """Errors, hints, what was read, the preset and the reading's warnings."""
    lines: list[str] = []
    for msg in rep.errors:
        lines.append(f"  error: {msg}")
    for hint in rep.hints:
        lines.append(f"  try: {hint}")
    src = rep.source
    if src is not None:
        lines += [f"  {d}" for d in src.describe()]
        meta = [k for k in ("bucket", "seq_len", "tokens") if k in src.columns]
        lines.append(
            f"  {src.format}, {src.rows} rows (steps {num(src.first_step)}..{num(src.last_step)}),"
            f" metrics {', '.join(src.metrics)}"
            + (f"; batch fields: {', '.join(meta)}" if meta else "; no batch fields")
        )
    if rep.preset is not None:
        p = rep.preset
        short = (
            f" (window {p.window}, shortened from {p.preset_window} for this log)"
            if p.window != p.preset_window
            else ""
        )
        lines.append(f"  preset {p.name}: {p.rule}{short}")
    if rep.onset is not None:
        lines.append(f"  start: {onset_line(rep.onset)}")
    for w in rep.warnings:
        lines.append(f"  warning: {w}")
    return lines


def _metrics(rep: TrainLogReport) -> list[str]:
    """The table of metrics checked."""
    lines: list[str] = []
    if rep.metrics:
        lines += ["", "Metrics"]
        lines.append(
            table(
                ["metric", "key", "checks", "values", "flagged", "share", "non-finite", "median"],
                [
                    (
                        m.label,
                        m.key,
                        {"up": "spikes", "down": "cliffs"}.get(m.direction, "-"),
                        m.n,
                        m.flagged,
                        f"{m.spike_share:.2%}" if m.direction != "none" else "-",
                        m.nonfinite,
                        num(m.median),
                    )
                    for m in rep.metrics
                ],
            )
        )
    return lines


def _spikes(rep: TrainLogReport) -> list[str]:
    """The table of spikes and cliffs."""
    lines: list[str] = []
    tol = rep.source.tolerance if rep.source else 0.0
    if rep.spikes:
        lines += ["", f"Spikes and cliffs ({len(rep.spikes)})"]
        cells = [spike_cells(s, tol) for s in rep.spikes]
        lines.append(table(list(SPIKE_COLUMNS), cells, optional=SPIKE_SPARE_COLUMNS))
    return lines


def _events(rep: TrainLogReport) -> list[str]:
    """The events by kind, and the notable ones."""
    lines: list[str] = []
    if rep.events:
        counts: dict[tuple[str, str], int] = {}
        for e in rep.events:
            counts[(e.kind, e.source)] = counts.get((e.kind, e.source), 0) + 1
        lines += ["", "Events: " + ", ".join(f"{n} {k} ({s})" for (k, s), n in counts.items())]
        notable = [e for e in rep.events if e.kind in ("resume", "warmup", "lr-jump", "pause")]
        for e in notable[:10]:
            lines.append("  " + event_line(e))
    return lines


def _correlations(rep: TrainLogReport) -> list[str]:
    """Whether spikes sit at events more often than chance."""
    lines: list[str] = []
    tol = rep.source.tolerance if rep.source else 0.0
    if rep.correlations and any(c.spikes for c in rep.correlations):
        lines += ["", f"Spikes at events (onsets within ±{num(tol)} steps)"]
        lines.append(
            table(
                ["events", "count", "spikes at them", "by chance", "p", "verdict"],
                [
                    (
                        c.kind,
                        c.events,
                        f"{c.at_events} of {c.spikes}",
                        num(c.expected, 2),
                        p_value(c.p_value),
                        "more than chance" if c.beyond_chance else "-",
                    )
                    for c in rep.correlations
                ],
            )
        )
    return lines


def _distribution(rep: TrainLogReport) -> list[str]:
    """The loss's shape over the stable window, with its modes."""
    lines: list[str] = []
    d = rep.distribution
    if d is not None and d.quantised:
        lines += [
            "",
            f"{d.metric.capitalize()} distribution, steps {num(d.first_step)}..{num(d.last_step)}:"
            f" only {num(d.quantised.get('distinct'))} distinct values in steps of "
            f"{num(d.quantised.get('quantum'))} (rounded when logged): no shape to judge",
        ]
    elif d is not None:
        lines += [
            "",
            f"{d.metric.capitalize()} distribution, steps {num(d.first_step)}..{num(d.last_step)} "
            f"({d.n} values, trend removed, {d.scale} scale): {d.shape}, bimodality "
            f"coefficient {num(d.bimodality, 2)} (> 0.56 hints at several modes)",
        ]
        lines.append(
            table(
                ["mode", "weight", "range", "bucket (purity)"],
                [
                    (
                        num(m.center),
                        pct(m.weight),
                        f"{num(m.lo)}..{num(m.hi)}",
                        f"{m.bucket} ({pct(m.purity)})" if m.bucket is not None else "-",
                    )
                    for m in d.modes
                ],
            )
        )
    return lines


def _periodicity(rep: TrainLogReport) -> list[str]:
    """The periodicity line."""
    lines: list[str] = []
    per = rep.periodicity
    if per is not None:
        rows = f", {per.lag_rows} log rows" if per.stride != 1 and per.lag_rows else ""
        if per.periodic:
            lines.append(
                f"Periodicity: repeats every {num(per.lag)} steps{rows} "
                f"(autocorrelation {num(per.acf, 2)})"
            )
        elif per.quantised:
            lines.append("Periodicity: not judged (the loss is too coarsely rounded)")
        elif per.lag is not None:
            lines.append(
                f"Periodicity: none (strongest autocorrelation {num(per.acf, 2)} at lag "
                f"{num(per.lag)} steps{rows})"
            )
    return lines


def _composition(rep: TrainLogReport) -> list[str]:
    """The batch composition table and its verdict."""
    lines: list[str] = []
    c = rep.composition
    if c is not None:
        if c.key is not None:
            lines += [
                "",
                f"Batch composition by {c.key}: it explains {pct(c.explained)} of the loss "
                f"variance; longest same-{c.key} run {c.max_run} (random order: ~"
                f"{num(c.random_max_run, 2)}, interleaved: {c.interleaved_max_run})",
            ]
            if c.derived:
                lines.append(f"  ({c.derived})")
            lines.append(
                table(
                    [c.key, "batches", "share", "loss median", "longest run"],
                    [
                        (b.bucket, b.batches, pct(b.share), num(b.loss_median), b.max_run)
                        for b in c.buckets
                    ],
                )
            )
        lines.append(f"Verdict: {c.verdict}")
    return lines


def _ending(rep: TrainLogReport) -> list[str]:
    """The diagnosis and the exit line."""
    lines: list[str] = []
    if rep.diagnosis:
        lines += ["", "Diagnosis"]
        lines += [f"  - {s}" for s in rep.diagnosis]
    word = {EXIT_OK: "OK", EXIT_FINDINGS: "findings", EXIT_FAILED: "could not run"}
    extra = (
        f": {', '.join(rep.findings)}" if rep.findings and rep.exit_code == EXIT_FINDINGS else ""
    )
    lines += ["", f"exit {rep.exit_code} ({word.get(rep.exit_code, '?')}{extra})"]
    return lines


def plot_report(rep: TrainLogReport, path: str) -> str:
    """Draw loss and accuracy against step (spikes and events marked) and the loss
    histogram by bucket into ``path`` (PNG, SVG, PDF by suffix). Needs matplotlib and a
    report made with ``points`` > 0; raises ImportError without matplotlib."""
    tol = rep.source.tolerance if rep.source else 0.0
    title = f"{rep.host}:{rep.path}"
    if rep.preset is not None:
        title += f"  (preset {rep.preset.name}, ±{num(tol)} steps counts as at an event)"
    return plot.draw(
        path,
        title=title,
        series=rep.series,
        events=rep.events,
        spikes=rep.spikes,
        histogram=rep.histogram,
        shape=rep.distribution.shape if rep.distribution else "",
        verdict=rep.composition.verdict if rep.composition is not None else None,
    )
