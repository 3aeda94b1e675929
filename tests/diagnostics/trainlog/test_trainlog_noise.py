"""Per-batch noise is no spike (issue 35): a loss logged per few batches late in training
scatters with heavy tails (most batches near the level, a few 10x it: a near-converged
classifier's batch losses), and its high values are its noise, not incidents; the spike rule
measures each value against how far the series' own values reach off their neighbours, so
a real step (last month's 5x grad norm in a short series: test_trainlog_regressions.py) is
still one.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from tests.trainlog_kit import run, shipped


def _per_batch_console(path: Path, seed: int) -> Path:
    """A hand-rolled trainer's console, 4 lines an epoch for 100 epochs: the loss falls
    from 0.32 to 0.13 under lognormal per-batch noise (sigma 0.8: a batch 10x the level
    now and then)."""
    rng = random.Random(seed)
    lines = []
    for s in range(400):
        loss = (0.3 * math.exp(-s / 300) + 0.02) * math.exp(rng.gauss(0, 0.8))
        at = (s % 4) * 12800
        lines.append(
            f"Train Epoch: {s // 4 + 1} [{at}/45000 ({at * 100 // 45000}%)]\tLoss: {loss:.6f}"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("seed", [21, 26])
def test_heavy_tailed_per_batch_noise_is_no_spike(tmp_path: Path, seed: int) -> None:
    """Before: one or two 'spikes' at batches 10x the level, as the noise makes them."""
    r = run(_per_batch_console(tmp_path / "train.log", seed))
    assert r.one("source")["rows"] == 400
    assert r.all("spike") == [] and r.code == 0


def test_heavy_tailed_per_batch_noise_gives_far_fewer_spikes() -> None:
    """60 such series (400 values each, past the first 20): 71 'spikes' before the noise
    reach, 57 with it, 8 since the multiplicative rule (a value within 3.7 sigma of the
    window's log values is noise where they are positive with a continuous top)."""
    spikes = shipped("trainlog.spikes")
    analyze = shipped("trainlog.analyze")
    found = 0
    for seed in range(60):
        rng = random.Random(seed)
        vals = [(0.3 * math.exp(-s / 300) + 0.02) * math.exp(rng.gauss(0, 0.8)) for s in range(400)]
        preset = analyze.preset_for("trend", 400)
        inc, _ = spikes.detect("loss", vals, None, list(range(400)), "up", preset)
        found += sum(1 for i in inc if i["onset_step"] >= 20)
    assert found <= 15


def test_a_step_beyond_the_noise_reach_is_still_a_spike(tmp_path: Path) -> None:
    """The same noisy console with one batch at 60x the level: beyond anything the noise
    reached, a spike."""
    log = _per_batch_console(tmp_path / "train.log", 26)
    lines = log.read_text().splitlines()
    head, _, value = lines[300].rpartition("Loss: ")
    lines[300] = f"{head}Loss: {float(value) * 60:.6f}"
    log.write_text("\n".join(lines) + "\n")
    spikes = run(log).all("spike")
    assert len(spikes) == 1 and spikes[0]["value"] > 30 * spikes[0]["baseline"]


def test_the_reach_of_gaussian_noise_mostly_leaves_the_sigma_rule_as_it_was() -> None:
    """1.5 times the largest neighbour excursion of Gaussian noise (100 values) is below 7
    sigma: where the noise has no heavy tails the rule is z's."""
    spikes = shipped("trainlog.spikes")
    rng = random.Random(3)
    reach = sorted(spikes._tail([rng.gauss(0, 1) for _ in range(100)], 1.0) for _ in range(200))
    assert spikes.TAIL * reach[100] < 7 and sum(spikes.TAIL * r > 7 for r in reach) < 5
    assert spikes._tail([1.0, 2.0, 9.0, 1.0, 1.0], 1.0) == 0.0  # too few values to say


def _converged(seed: int, n: int = 1400) -> list[float]:
    """A converged classifier's per-batch loss: 0.02 times lognormal noise of sigma 0.9
    (most batches 0.005-0.08, one in a hundred 8x the level, now and then 20x)."""
    rng = random.Random(seed)
    return [0.02 * math.exp(rng.gauss(0, 0.9)) for _ in range(n)]


def _spikes(vals: list[float]) -> list[dict[str, object]]:
    spikes = shipped("trainlog.spikes")
    preset = shipped("trainlog.analyze").preset_for("trend", len(vals))
    return spikes.detect("loss", vals, None, list(range(len(vals))), "up", preset)[0]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lone_batches_of_multiplicative_noise_are_no_spike(seed: int) -> None:
    """Lone batches at 12x, 20x and 25x the level (0.24, 0.4, 0.5) in a loss whose batches
    scatter by factors: a log scale shows them inside the noise (3-3.6 of its sigmas), and
    the noise's own history holds many 5-8x batches with no level change after them.
    Before: each flagged (beyond 1.5 times the largest neighbour excursion of a window)."""
    vals = _converged(seed)
    for at, factor in ((700, 12), (900, 20), (1200, 25)):
        vals[at] = 0.02 * factor
    assert _spikes(vals) == []


def test_a_lone_step_over_length_buckets_is_still_a_spike() -> None:
    """Batches of three length buckets, levels 10x apart, each with 8% noise (its logs as
    wide as lognormal noise of sigma 1, but the top a tight mode, not a tail): a lone 13.0
    (8x the highest bucket) is a spike, as bench_trainlog plants it."""
    rng = random.Random(5)
    level = (1.6, 0.7, 0.15)
    vals = [
        rng.choices(level, weights=(0.18, 0.30, 0.52))[0] * math.exp(rng.gauss(0, 0.08))
        for _ in range(3000)
    ]
    vals[2000] = 13.0
    assert shipped("trainlog.spikes")._log_spread(vals[1800:2000]) == (0.0, 0.0)
    assert [s["peak_idx"] for s in _spikes(vals)] == [2000]


def test_a_spike_of_a_series_with_signed_values_keeps_the_linear_rule() -> None:
    """A loss that goes to 0 or below (an RL total with a signed policy part) is no
    multiplicative noise: its spread is not read in logs."""
    spikes = shipped("trainlog.spikes")
    vals = _converged(4, 200)
    assert spikes._log_spread(vals) != (0.0, 0.0)
    assert spikes._log_spread([*vals[:100], -0.01, *vals[101:]]) == (0.0, 0.0)
