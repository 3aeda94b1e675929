"""train-log's roles by evidence (issue 35, item 3): the loss analysed is the train-side
objective (a total before its parts, a maximised or signed part never the loss while a
minimised one exists, a critic's value loss no held-out loss), and every pick says why.

Public runs: tests/data/public/gail-ppo-progress (MIT) and jobshop-sb3-ppo (MIT), see
tests/public_runs.md.
"""

from __future__ import annotations

import csv
import random
import statistics
from collections.abc import Callable
from pathlib import Path

from tests.harness import DATA
from tests.trainlog_kit import run, shipped

PUBLIC = DATA / "public"

# -- roles: the loss is the train-side objective, chosen by what the values say too -------------


def _write_csv(path: Path, columns: list[str], rows: list[list[float]]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        w.writerows(rows)
    return path


def _a2c(path: Path, total: bool) -> Path:
    """An actor-critic's progress.csv as stable-baselines3 writes it (A2C: no total; PPO
    with ``total``: ``train/loss`` = pg + 0.5 value + 0.01 entropy)."""
    rng = random.Random(1)
    cols = ["time/total_timesteps", "train/entropy_loss", "train/learning_rate"]
    cols += ["train/n_updates", "train/policy_loss", "train/value_loss", "rollout/ep_rew_mean"]
    cols += ["train/loss"] if total else []
    rows = []
    for i in range(60):
        ent = -1.38 + 0.005 * i + rng.gauss(0, 0.01)
        pg = rng.gauss(0, 0.02)
        vl = 0.5 * 0.97**i + abs(rng.gauss(0, 0.02))
        row = [500.0 * (i + 1), ent, 0.0007, i + 1.0, pg, vl, 10.0 + i]
        rows.append(row + ([pg + 0.5 * vl + 0.01 * ent] if total else []))
    return _write_csv(path, cols, rows)


def test_a_critics_value_loss_is_a_train_side_part_not_a_held_out_loss(tmp_path: Path) -> None:
    """A2C logs no total: its policy-gradient loss is signed, its entropy loss maximised (an
    entropy bonus, negative), its value loss the one minimised part: that is the loss, and
    no held-out loss is named at all (``value`` is no ``val``)."""
    r = run(_a2c(tmp_path / "progress.csv", total=False))
    src = r.one("source")
    assert src["columns"]["loss"] == "train/value_loss"
    assert "val_loss" not in src["columns"]
    why = src["why"]["loss"]
    assert "'train/entropy_loss' (maximised: an entropy term; its values negative)" in why
    assert "'train/policy_loss' (signed: values from -" in why and "around 0" in why


def test_a_total_is_the_loss_and_says_the_parts_it_sums(tmp_path: Path) -> None:
    r = run(_a2c(tmp_path / "progress.csv", total=True))
    src = r.one("source")
    assert src["columns"]["loss"] == "train/loss" and "val_loss" not in src["columns"]
    assert src["metrics"] == ["loss", "lr"]  # the parts are in the total: none analysed apart
    assert (
        "a total: a weighted sum of 'train/entropy_loss', 'train/policy_loss', "
        in (src["why"]["loss"])
    )


def test_a_plain_named_total_is_the_loss_though_it_dips_below_zero(tmp_path: Path) -> None:
    """SB3's ``train/loss`` is the last batch's total, no exact sum of its parts' means, and
    goes below 0 as the entropy bonus grows: a loss that names nothing beside losses that
    name their part is the total all the same."""
    rng = random.Random(3)
    cols = ["step", "train/loss", "train/value_loss", "train/policy_gradient_loss"]
    cols.append("train/entropy_loss")
    rows = []
    for i in range(40):
        vl, pg, ent = 2 * 0.9**i + 0.01, rng.gauss(-0.01, 0.02), -1.3 + 0.02 * i
        rows.append([i + 1.0, pg + 0.5 * vl + 0.01 * ent + rng.gauss(0, 0.05), vl, pg, ent])
    src = run(_write_csv(tmp_path / "progress.csv", cols, rows)).one("source")
    assert src["columns"]["loss"] == "train/loss"
    assert "the total by its name: the others name parts" in src["why"]["loss"]


def test_yolo_parts_with_no_total_are_still_each_analysed(tmp_path: Path) -> None:
    """Unchanged: parts that are all minimised and sum to nothing logged are analysed each."""
    cols = ["epoch", "train/box_loss", "train/cls_loss", "train/dfl_loss"]
    rows = [
        [float(i), 1.5 - 0.01 * i, 2.0 - 0.02 * i + 0.01 * (i % 3), 1.2 - 0.005 * i]
        for i in range(60)
    ]
    src = run(_write_csv(tmp_path / "results.csv", cols, rows)).one("source")
    assert src["metrics"] == ["loss", "train/cls_loss", "train/dfl_loss"]


def test_public_gail_ppo_progress_loss_is_the_policys_total() -> None:
    """morikatron/GAIL_PPO (MIT) logs two objectives with names that hold spaces: the policy's
    ``loss`` (= policy loss + 0.5 value loss - 0.01 entropy loss, to 6 digits) and the
    discriminator's ``discriminator loss total`` (= agent + demo). The policy's loss is the
    one analysed, said to be a total; ``value loss`` is no held-out loss; the signed policy
    loss and the entropy term are said not to be the loss."""
    for part in ("ppo", "human"):
        r = run(PUBLIC / "gail-ppo-progress" / "sample_result" / part / "progress.csv")
        src = r.one("source")
        assert src["columns"] == {"loss": "loss"}, src["columns"]
        why = src["why"]["loss"]
        assert "a total: a weighted sum of 'policy loss', 'value loss' in every row" in why
        assert "'discriminator loss total' (a total: a weighted sum of " in why
        assert "'policy loss' (signed: values from " in why
        assert "'entropy loss' (maximised: an entropy term)" in why
    spikes = run(PUBLIC / "gail-ppo-progress" / "sample_result" / "ppo" / "progress.csv").spikes()
    assert set(spikes) == {53, 72}  # the two largest (63 and 70 against a median of 1.8)


def test_public_jobshop_sb3_ppo_value_loss_is_no_held_out_loss() -> None:
    """gbencheikh/RL_Job_Shop_Problem (MIT): stable-baselines3 PPO's progress.csv. Before,
    ``train/value_loss`` was "the held-out loss"; it is the critic's part of the total."""
    src = run(PUBLIC / "jobshop-sb3-ppo" / "logs" / "progress.csv").one("source")
    assert src["columns"]["loss"] == "train/loss"
    assert "val_loss" not in src["columns"]
    assert (
        "'train/entropy_loss' (maximised: an entropy term; its values negative)"
        in (src["why"]["loss"])
    )


def test_held_out_names_still_read_as_held_out() -> None:
    choose = shipped("trainlog.choose")
    for name in ("val_loss", "valid/loss", "validation_loss", "eval/loss", "test_loss"):
        assert choose._val_loss_score(name) is not None, name
    for name in ("val2_loss", "evaluation/nll", "testset_loss"):
        assert choose._val_loss_score(name) is not None, name
    for name in ("value_loss", "train/value_loss", "values_loss", "device_loss"):
        assert choose._val_loss_score(name) is None, name


def test_a_loss_that_falls_through_zero_is_no_signed_part(tmp_path: Path) -> None:
    """A continuous reconstruction NLL falls from 0.5 to -2 (a density's log-likelihood has
    no floor at 0): both signs, but not around 0, so it is no signed part set behind its
    always-positive KL term; the two are analysed as the parts of a loss with no total."""
    cols = ["step", "train/recon_loss", "train/kl_loss"]
    rows = [[i + 1.0, 0.5 - 2.5 * i / 59, 0.2 + 0.001 * (i % 4)] for i in range(60)]
    src = run(_write_csv(tmp_path / "metrics.csv", cols, rows)).one("source")
    assert src["columns"]["loss"] == "train/recon_loss", src["why"]
    assert src["metrics"] == ["loss", "train/kl_loss"]
    assert "signed" not in src["why"]["loss"]


# -- a column's role by its values: a sweep's runs side by side, an lr that is no schedule ----


def _sweep_csv(path: Path, stem: str, labels: list[str], lr_too: bool = False) -> Path:
    """A sweep's CSV: one column a run, named after the setting it swept (``stem`` +
    label), each the run's noisy train loss from ln 10 (a uniform guess over 10 classes)."""
    rng = random.Random(7)
    cols = [f"{stem}{x}" for x in labels] + (["lr"] if lr_too else [])
    rows = []
    for i in range(200):
        row = [0.4 + 1.9 * (0.96 + 0.01 * j) ** i + rng.gauss(0, 0.03) for j in range(len(labels))]
        rows.append(row + ([1e-3 * min(1.0, (i + 1) / 20)] if lr_too else []))
    rows[0][: len(labels)] = [2.30 + rng.gauss(0, 0.01) for _ in labels]
    return _write_csv(path, cols, rows)


def test_a_sweeps_loss_columns_named_after_their_lr_are_losses_not_lrs(tmp_path: Path) -> None:
    """Columns ``learning_rate_1e-3`` .. ``learning_rate_1e-1``: their names say which run,
    their values (noisy, falling, all from 2.30) are each run's loss. One is the loss, none
    the lr (an lr is a schedule, no noise); why is said."""
    r = run(_sweep_csv(tmp_path / "sweep.csv", "learning_rate_", ["1e-3", "1e-2", "1e-1"]))
    assert r.code in (0, 1), r.all("error")
    src = r.one("source")
    assert src["columns"] == {"loss": "learning_rate_1e-3"}, src["columns"]
    assert "runs side by side" in src["why"]["loss"]


def test_a_sweep_beside_a_real_schedule_keeps_the_lr(tmp_path: Path) -> None:
    """The same runs beside an ``lr`` column that warms up: the lr is that one."""
    path = _sweep_csv(tmp_path / "sweep.csv", "dropout_", ["0.1", "0.3"], lr_too=True)
    src = run(path).one("source")
    assert src["columns"] == {"loss": "dropout_0.1", "lr": "lr"}, src["columns"]


def test_columns_that_do_not_start_alike_are_no_sweep(tmp_path: Path) -> None:
    """Columns named alike but for a number that start apart (two sensors, two layers'
    norms) are no runs of one loss: no loss is chosen, the log is refused naming them."""
    rng = random.Random(3)
    rows = [
        [5.0 * 0.99**i + rng.gauss(0, 0.05), 1.0 * 0.99**i + rng.gauss(0, 0.05)] for i in range(100)
    ]
    r = run(_write_csv(tmp_path / "m.csv", ["sensor_1", "sensor_2"], rows))
    assert r.code == 2 and r.one("error")["kind"] == "no-loss", r.records[-2:]


# -- no loss, a score: analysed in the loss's place; one that never rose is said -------------


def _episodes(path: Path, level: Callable[[int], float]) -> Path:
    rng = random.Random(11)
    path.write_text(
        "".join(
            f"Episode {e}\tFrame {20 * e}\tAverage Score: {level(e) + rng.gauss(0, 1.5):.2f}\n"
            for e in range(1, 301)
        )
    )
    return path


def test_a_score_that_never_rose_is_said_when_no_loss_is_logged(tmp_path: Path) -> None:
    """An agent's console with a score and no loss: the score is analysed (higher is
    better, said so), and one that stays at its first level for 300 episodes is a run
    that never learned."""
    r = run(_episodes(tmp_path / "training.log", lambda e: 22.0))
    assert r.code == 1, r.all("error")
    assert r.one("source")["columns"] == {"Score": "Score"}
    (start,) = r.all("onset")
    assert start["unhealthy"] and "never learned" in start["verdict"], start


def test_a_score_that_rose_is_no_finding(tmp_path: Path) -> None:
    """The same console of an agent that learned (its score from 22 to 200): healthy."""
    r = run(_episodes(tmp_path / "training.log", lambda e: 22.0 + 178.0 * min(1.0, e / 200)))
    assert r.code in (0, 1), r.all("error")
    assert [o for o in r.all("onset") if o["unhealthy"]] == []
    assert "unhealthy-start" not in r.one("summary")["findings"]


# -- held-out losses on lines of their own, beside a trainer format's train lines --------------


def _iteration_console(path: Path) -> tuple[Path, list[float], list[float]]:
    """An ``iteration N/ M | ... | lm loss: x |`` console (a line format train-log knows):
    30 train lines (iterations 10 .. 300), a validation line after every tenth that states
    its iteration, and an argument dump before training whose names say eval and loss."""
    rng = random.Random(7)
    out = ["  eval_loss_weight ................ 0.5", "  eval_iters ...................... 10"]
    train, held = [], []
    for i in range(10, 310, 10):
        loss = round(9.0 - i / 100 + rng.uniform(-0.05, 0.05), 4)
        train.append(loss)
        out.append(
            f" iteration {i:8d}/   10000 | learning rate: 1.000E-04 | lm loss: {loss:.6E} |"
            " loss scale: 2048.0 | number of skipped iterations:   0 |"
        )
        if i % 100 == 0:
            val = round(loss + 0.4, 4)
            held.append(val)
            out += ["-" * 60, f" validation loss at iteration {i} | lm loss value: {val:.6E} |"]
            out += [f" lm loss PPL: {2.718**val:.6E} |", "-" * 60]
    path.write_text("\n".join(out) + "\n")
    return path, train, held


def test_a_line_formats_validation_lines_are_its_held_out_loss(tmp_path: Path) -> None:
    """A validation line the train lines' format does not claim is read by its template: its
    loss is the held-out loss, at the iteration it states, not merged into the train loss; the
    argument dump before training (``eval_loss_weight``) is no held-out point."""
    path, train, held = _iteration_console(tmp_path / "console.log")
    r = run(path)
    src = r.one("source")
    assert src["format"] == "megatron" and src["rows"] == 30, src
    assert src["columns"]["loss"] == "lm loss", src
    assert src["columns"]["val_loss"] == "val/lm_loss_value", src
    metrics = {m["label"]: m for m in r.all("metric")}
    assert metrics["loss"]["n"] == 30
    assert abs(metrics["loss"]["median"] - statistics.median(train)) < 1e-3
    assert metrics["val_loss"]["n"] == 3 and metrics["val_loss"]["median"] == held[1]


def test_one_validation_line_with_no_step_sits_at_the_train_row_before_it(
    tmp_path: Path,
) -> None:
    """A ``name value`` validation line that states no step of its own (its epoch only) and
    comes once: one held-out point, at the train row before it; the end-of-epoch train line
    beside it (its average) is neither the held-out loss nor merged into the train loss."""
    out = []
    for i in range(1, 21):
        out.append(
            f"2024-05-01 10:00:00 | INFO | train_inner | epoch 001:     {i:2d} / 20 "
            f"loss={10 - i * 0.2:.3f}, ppl=9.1, wps=100, num_updates={i}, lr=0.0003, gnorm=2.1"
        )
    out.append("2024-05-01 10:01:00 | INFO | fairseq_cli.train | begin validation on valid")
    out.append(
        "2024-05-01 10:02:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 6.25 "
        "| ppl 76.1 | wps 3000 | num_updates 20"
    )
    out.append(
        "2024-05-01 10:02:00 | INFO | train | epoch 001 | loss 8.1 | ppl 270 | num_updates 20"
    )
    path = tmp_path / "train.log"
    path.write_text("\n".join(out) + "\n")
    r = run(path)
    src = r.one("source")
    assert src["format"] == "fairseq" and src["rows"] == 20, src
    assert src["columns"]["val_loss"] == "val/loss", src
    metrics = {m["label"]: m for m in r.all("metric")}
    assert metrics["loss"]["n"] == 20 and metrics["loss"]["median"] < 9
    assert metrics["val_loss"]["n"] == 1 and metrics["val_loss"]["median"] == 6.25


def test_values_under_an_evaluation_header_are_held_out_not_the_train_loss(
    tmp_path: Path,
) -> None:
    """A console with no train loss: per-step lines of the lr and a throughput, and before
    each epoch a header ``***** Evaluating perplexity, Epoch e/8 *****`` with ``ppl: x``
    on the line under it. The perplexity is an evaluation (its header says so), not a
    train-side loss: read as held out, and said so."""
    out, ppl, step = [], [], 0
    for e in range(8):
        value = 900.0 if e == 0 else round(2.5 - e * 0.05, 4)
        ppl.append(value)
        out += [f"***** Evaluating perplexity, Epoch {e}/8 *****", f"ppl: {value}"]
        for _ in range(20):
            step += 10
            out.append(f"[INFO] step={step}, skipped=0, lr=[{1e-5 * (1 - step / 2000):.4e}]")
            out.append(f"[INFO] global_step={step}, SamplesPerSec={170 + step % 7}.5")
    path = tmp_path / "sft.log"
    path.write_text("\n".join(out) + "\n")
    r = run(path)
    src = r.one("source")
    why = src["why"]["loss"]
    assert src["columns"]["loss"] == "val/ppl" and "held-out" in why, src
    (loss,) = [m for m in r.all("metric") if m["label"] == "loss"]
    assert loss["n"] == 8 and loss["median"] == statistics.median(ppl)


def test_an_evaluation_before_the_first_train_line_is_the_held_out_losss_first_point(
    tmp_path: Path,
) -> None:
    """llm.c's and nanoGPT's consoles evaluate once before the first step: a ``val loss x``
    line before the first train line, whose shape recurs after the train lines began, is the
    held-out loss's first point (at the first train row); an argument line before training
    that names an evaluation (``val_loss_every``) and never recurs is none."""
    out = ["val_loss_every 20", "val_max_steps 5", "val loss 5.250000"]
    train, held = [], [5.25]
    for step in range(60):
        loss = round(5.2 - step * 0.02, 4)
        train.append(loss)
        out.append(f"step {step}: train loss {loss:.6f} (took 1300.5 ms)")
        if step % 20 == 19:
            held.append(round(loss + 0.1, 4))
            out.append(f"val loss {held[-1]:.6f}")
    path = tmp_path / "console.log"
    path.write_text("\n".join(out) + "\n")
    r = run(path)
    src = r.one("source")
    assert src["rows"] == 60, src
    metrics = {m["label"]: m for m in r.all("metric")}
    assert metrics["loss"]["n"] == 60
    assert metrics["val_loss"]["n"] == 4, metrics["val_loss"]
    assert abs(metrics["val_loss"]["median"] - statistics.median(held)) < 1e-6
