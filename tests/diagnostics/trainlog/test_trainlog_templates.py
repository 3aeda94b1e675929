"""The line templates of a text log no trainer format claims (``remote/trainlog/templates.py``):
train, validation and test lines read as their own series, on the step each line states,
and the runs a file holds told apart.

The consoles are written to the shape their trainers' source prints (pytorch/examples'
``word_language_model/main.py`` and ``mnist/main.py``, quoted beside each), one public run is
a real console (tests/public_runs.md, ``resnet-stochdepth-console``), and the property test
prints random mixes of train / valid / test lines with random separators from a fixed seed.
"""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

from tests.harness import DATA
from tests.trainlog_kit import Run, run

PUBLIC = DATA / "public" / "resnet-stochdepth-console" / "train_resnet110_log.md"


def _warnings(r: Run) -> str:
    return "\n".join(w["message"] for w in r.all("warning"))


def _series(r: Run, metric: str) -> list[dict[str, object]]:
    return [s for s in r.all("series") if s["metric"] == metric]


def test_public_console_reads_train_val_and_test_lines_apart(tmp_path: Path) -> None:
    """A real console (train lines per 128 batches that state epoch and [i/N], per-epoch
    average, validation and test lines, each with "loss"): today one "loss" series of all of
    them on row numbers; read apart, the loss is the train lines' on epoch x N + i."""
    r = run(PUBLIC)
    assert r.code in (0, 1), r.records
    src = r.one("source")
    assert src["columns"]["loss"] == "train/loss"
    assert src["columns"]["val_loss"] == "validation_loss"
    assert src["step_key"] == "step"
    assert src["stride"] == 12800  # samples: [i/45000] every 12,800 of them
    metrics = {m["label"]: m for m in r.all("metric")}
    assert metrics["loss"]["n"] == 42 * 4  # the train lines of the run read, no other kind
    # the run's own 41: its epoch 42 ends the file before its evaluation (the first run's
    # epoch-42 validation line, between the runs, is the first run's)
    assert metrics["val_loss"]["n"] == 41
    said = _warnings(r)
    assert "epoch x 45000 + i" in said
    assert "val lines like '====> Validation loss" in said


def test_public_console_two_runs_appended_are_said_and_the_last_read(tmp_path: Path) -> None:
    """The file holds two runs (a baseline and a stochastic-depth ResNet, each from epoch 1):
    the counter falls and climbs again; said, and the last one read unless --run-part."""
    r = run(PUBLIC)
    said = _warnings(r)
    assert "a second run (or a restart from scratch) appended to the same file" in said
    assert "run part 2 of 2 read" in said
    assert r.one("source")["first_step"] == 0
    assert not r.all("spike")  # the second run's first loss is no spike of the first
    first = run(PUBLIC, "--run-part", "1")
    assert "run part 1 of 2 read" in _warnings(first)
    assert first.one("source")["last_step"] == 41 * 45000 + 38400


def _word_lm(path: Path, epochs: int = 4, batches: int = 2983, every: int = 200) -> Path:
    # pytorch/examples word_language_model/main.py:
    #   print('| epoch {:3d} | {:5d}/{:5d} batches | lr {:02.2f} | ms/batch {:5.2f} | '
    #         'loss {:5.2f} | ppl {:8.2f}'.format(...))
    #   print('| end of epoch {:3d} | time: {:5.2f}s | valid loss {:5.2f} | '
    #         'valid ppl {:8.2f}'.format(...))
    #   print('| End of training | test loss {:5.2f} | test ppl {:8.2f}'.format(...))
    out = ["Namespace(batch_size=20, bptt=35, clip=0.25, epochs=4, lr=20, seed=1111)"]
    loss = 7.6
    for e in range(1, epochs + 1):
        for b in range(every, batches, every):
            loss -= 0.05
            out.append(
                f"| epoch {e:3d} | {b:5d}/{batches:5d} batches | lr {20:02.2f} | ms/batch "
                f"{12.1:5.2f} | loss {loss:5.2f} | ppl {math.exp(loss):8.2f}"
            )
        out.append("-" * 89)
        out.append(
            f"| end of epoch {e:3d} | time: {36.9:5.2f}s | valid loss {loss + 0.1:5.2f} | "
            f"valid ppl {math.exp(loss + 0.1):8.2f}"
        )
        out.append("-" * 89)
    out.append("=" * 89)
    out.append(f"| End of training | test loss {loss:5.2f} | test ppl {math.exp(loss):8.2f}")
    path.write_text("\n".join(out) + "\n")
    return path


def test_word_language_model_console_steps_from_epoch_and_batch(tmp_path: Path) -> None:
    r = run(_word_lm(tmp_path / "wlm.log"))
    src = r.one("source")
    assert src["columns"]["loss"] == "train/loss"
    assert src["columns"]["val_loss"] == "valid_loss"
    assert src["first_step"] == 200 and src["stride"] == 200
    assert src["last_step"] == 3 * 2983 + 2800  # epoch x batches-per-epoch + batch
    metrics = {m["label"]: m for m in r.all("metric")}
    assert metrics["loss"]["n"] == 4 * 14 and metrics["val_loss"]["n"] == 4
    assert not [e for e in r.all("event") if e["kind"] == "resume"]  # no resume per epoch


def test_name_and_value_as_two_comma_fields_is_read_with_val_lines(tmp_path: Path) -> None:
    """Train lines ``loss, 0.53`` and validation lines ``val_loss: 0.61``: exit 2 ("no rows
    with val_loss") today; both are series now."""
    lines = []
    for s in range(1, 61):
        lines.append(f"iter, {s * 10}, loss, {2.0 / s:.4f}, lr, 0.001")
        if s % 10 == 0:
            lines.append(f"validation at iter {s * 10}: val_loss: {2.2 / s:.4f}")
    log = tmp_path / "comma.log"
    log.write_text("\n".join(lines) + "\n")
    r = run(log)
    assert r.code in (0, 1), r.records
    src = r.one("source")
    assert src["columns"]["loss"] == "train/loss"
    assert src["columns"]["val_loss"] == "val_loss"
    assert src["last_step"] == 600
    assert {m["label"]: m["n"] for m in r.all("metric")}["val_loss"] == 6


def test_train_lines_without_val_lines_are_read_not_refused(tmp_path: Path) -> None:
    lines = [
        f"Train Epoch: {e} [{b * 640}/60000 ({b}%)]\tLoss: {2.3 / (e + b):.6f}"
        for e in (1, 2, 3)
        for b in range(0, 94, 10)
    ]
    log = tmp_path / "mnist.log"
    log.write_text("\n".join(lines) + "\n")
    r = run(log)
    assert r.code in (0, 1), r.records
    assert r.one("source")["last_step"] == 2 * 60000 + 90 * 640


def test_a_step_logged_again_with_other_values_is_a_restart(tmp_path: Path) -> None:
    lines = [f"Iter: {s}, Loss: {3.0 - s / 100:.3f}" for s in range(0, 120, 10)]
    lines += [f"EVAL Iter: {s}, Loss: {3.1 - s / 100:.3f}" for s in (50, 100)]
    lines += [f"Iter: {s}, Loss: {3.5 - s / 90:.3f}" for s in range(110, 200, 10)]
    lines += [f"EVAL Iter: {s}, Loss: {3.1 - s / 100:.3f}" for s in (150,)]
    log = tmp_path / "restart.log"
    log.write_text("\n".join(lines) + "\n")
    r = run(log)
    said = _warnings(r)
    assert "step 110 logged again with other values: a restart" in said
    assert "run part 2 of 2 read" in said


SEPARATORS = [" | ", ", ", "  ", "\t", " - ", "; "]
ASSIGN = [": ", "=", " ", ", "]
KINDS = {"train": ["train", "Train", "TRAIN"], "val": ["valid", "Validation", "val", "eval"]}
KINDS["test"] = ["test", "Test"]


def _line(word: str, step: int, sep: str, eq: str, value: float) -> str:
    return sep.join([f"{word} step{eq}{step}", f"loss{eq}{value:.4f}", f"acc{eq}{0.5:.3f}"])


def test_any_mix_of_train_val_test_lines_comes_back_as_separate_series(tmp_path: Path) -> None:
    """Property: whatever the separators and the mix, each kind is its own series of the
    length printed (seeded random logs, 12 of them)."""
    rng = random.Random(3507)
    for case in range(12):
        sep, eq = rng.choice(SEPARATORS), rng.choice(ASSIGN)
        words = {k: rng.choice(v) for k, v in KINDS.items()}
        counts = {"train": 0, "val": 0, "test": 0}
        lines = []
        for step in range(1, rng.randrange(60, 200)):
            counts["train"] += 1
            lines.append(_line(words["train"], step, sep, eq, 3.0 / step))
            for kind, p in (("val", 0.15), ("test", 0.05)):
                if rng.random() < p:
                    counts[kind] += 1
                    lines.append(_line(words[kind], step, sep, eq, 3.2 / step))
        for kind in ("val", "test"):  # at least two of each
            while counts[kind] < 2:
                counts[kind] += 1
                lines.append(_line(words[kind], step, sep, eq, 3.2 / step))
        log = tmp_path / f"mix{case}.log"
        log.write_text("\n".join(lines) + "\n")
        r = run(log)
        assert r.code in (0, 1), (case, sep, eq, r.records[-3:])
        cols = r.one("source")["columns"]
        n = {m["label"]: m["n"] for m in r.all("metric")}
        assert cols["loss"] == "train/loss" and n["loss"] == counts["train"], (case, cols, n)
        assert cols["val_loss"] == "val/loss" and n["val_loss"] == counts["val"], (case, n)
        kinds = re.findall(r"(\w+) lines like '[^']*' \((\d+)\): (\S+),", _warnings(r))
        assert sorted((k, int(c)) for k, c, _ in kinds) == sorted(counts.items()), (case, kinds)
        assert {k: name for k, _, name in kinds}["test"] == "test/loss"


def test_a_step_column_with_a_space_is_found_by_being_a_counter(tmp_path: Path) -> None:
    """``Samples Seen`` is in no list of step names: today row numbers, which hid the two
    runs the column shows (it falls and climbs again); found by its values now, the runs
    said, the last analysed, ``--run-part 1`` the first."""
    rows = ["Wall Time,Samples Seen,Train Loss"]
    for r in range(2):
        rows += [
            f"{1000 + r * 100 + i * 0.5},{i * 256},{3.0 / (1 + i / 10) + r * 0.3:.4f}"
            for i in range(1, 41)
        ]
    log = tmp_path / "hand.csv"
    log.write_text("\n".join(rows) + "\n")
    r = run(log)
    src = r.one("source")
    assert src["step_key"] == "Samples Seen" and src["rows"] == 40
    assert (src["first_step"], src["last_step"]) == (256, 40 * 256)
    said = _warnings(r)
    assert "chosen by its values: whole numbers that rise by one stride" in said
    assert "falls from 10240 to 256 at row 41 and climbs again: a second run" in said
    assert "run part 2 of 2 analysed" in said
    assert not r.all("spike")  # the second run's start is no spike of the first
    assert "run part 1 of 2 analysed (rows 1-40" in _warnings(run(log, "--run-part", "1"))


def test_tensorboard_series_with_their_own_counter_keep_their_points(tmp_path: Path) -> None:
    """A validation loss logged at its epoch (0, 1, 2 ...) beside a train loss at the global
    step: today the train loss loses every point (0 of 500) and a resume is invented at
    each epoch; now each keeps its points and the validation value sits at the global step
    logged before it."""
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(log_dir=str(tmp_path))
    g = 0
    for e in range(10):
        for _ in range(50):
            w.add_scalar("train/loss", 3.0 / (1 + g / 100), g)
            g += 1
        w.add_scalar("val/loss", 3.2 / (1 + g / 100), e)
    w.close()
    r = run(tmp_path)
    metrics = {m["label"]: m["n"] for m in r.all("metric")}
    assert metrics == {"loss": 500, "val_loss": 10}
    assert not [e for e in r.all("event") if e["kind"] == "resume"]
    assert (
        "'val/loss' carries a step counter of its own (0, 1, 2, ...: not the global step)"
        in _warnings(r)
    )
    series = {s["metric"]: s for s in run(tmp_path, "--points", "2000").all("series")}
    assert series["val_loss"]["steps"][:3] == [49, 99, 149]


def _console_lines(rng: random.Random, n: int) -> list[str]:
    """A console of train lines and a validation line a 700, whose fields take every shape
    a number is printed in: nan and infinities, signs, ``-0``, a column of whole numbers
    that turns to decimals, CR line ends, digits of another script, a non-ASCII word."""
    out = []
    for s in range(n):
        loss = (
            rng.choice(["nan", "-inf", "Infinity", "+2.5", "1e-3", "-0"])
            if s % 97 == 3
            else f"{2 + 1 / (1 + s):.5f}"
        )
        grad = rng.choice(["-0", "+3", "0", "12"]) if s < 9000 else f"{rng.random():.3f}"
        whole = rng.choice(["-0", "0", "7", "-12"])
        line = f"step {s} | epoch {s // 1000} | loss {loss} | grad {grad} | k {whole} | lr 0.0003"
        if s % 1234 == 5:
            line = line.replace(f"step {s}", f"step {'١٢'}")  # Arabic-Indic digits
        if s % 1500 == 7:
            line += " | note µ"
        out.append(line + ("\r" if s % 811 == 9 else ""))
        if s % 700 == 699:
            out.append(f"valid | step {s} | loss {2.1 + 1 / (1 + s):.4f}")
    return out


def test_the_block_regex_reads_what_the_line_split_reads() -> None:
    """The template most lines are of is read a block at a time by its own regex and kept
    as numbers; every field's text, number, constancy and every event must be what the
    line-by-line split gives for the same lines (a speed path, never another answer)."""
    from remotekit.remote.trainlog.templates import mine, most

    lines = _console_lines(random.Random(35), 16000)
    ev_split: list[tuple[int, str]] = []
    split = mine(lines, 0, None, ev_split)
    ev_fast: list[tuple[int, str]] = []
    fast_table = mine(lines[:5000], 0, None, ev_fast)
    fast = most(fast_table)
    n = 5000
    while n < len(lines):
        block = lines[n : n + 700]
        mine(block, n, fast_table, ev_fast, fast)
        n += len(block)
    assert fast is not None and fast.rx is not None  # the block path ran
    assert sorted(split) == sorted(fast_table) and ev_split == ev_fast
    for key, a in split.items():
        b = fast_table[key]
        assert list(a.at) == list(b.at) and a.first == b.first, key
        for j in range(a.width):
            assert a.texts(j) == b.texts(j), (key, j)
            assert a.column(j).tobytes() == b.column(j).tobytes(), (key, j)  # -0.0, nan alike
            assert a.varies(j) == b.varies(j), (key, j)
            for i in (0, 1, len(a.at) // 2, len(a.at) - 1):
                assert a.cell(i, j) == b.cell(i, j), (key, i, j)
