"""``remotekit.result.table`` fitted to a width: long paths shortened in the middle, a
free-text column wrapped within its cell, the other columns whole; no width, every cell."""

from __future__ import annotations

import re

from remotekit.result import table, tables_fit

HEADERS = ["CHECKPOINT", "STATUS", "SIZE", "REASON"]
PATH = "/work/runs/experiment_2026_12_07_long_name/checkpoints/step_400/model.pt"
REASON = (
    "3 tensor(s) hold NaN: encoder.layers.0.weight, encoder.layers.1.bias and "
    "decoder.head.weight; the optimizer state also holds Inf"
)
ROWS = [(PATH, "bad", "12.0 MiB", REASON), (PATH.replace("400", "300"), "clean", "1 B", None)]


def test_a_wide_table_fits_with_paths_cut_in_the_middle_and_reasons_wrapped() -> None:
    assert max(len(line) for line in table(HEADERS, ROWS).splitlines()) > 80
    lines = table(HEADERS, ROWS, width=80).splitlines()
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    # the path keeps its first part and its last ones: what a long reason leaves room for
    assert re.match(r"/work/\.\.\./(\S+/)?step_400/model\.pt ", lines[2]), lines[2]
    assert "bad" in lines[2] and "12.0 MiB" in lines[2] and "clean" in "\n".join(lines)
    # the reason, wrapped in its column under the first row: every word, in order, none cut
    col = lines[0].index("REASON")
    second_row = next(i for i, line in enumerate(lines[3:], 3) if line[:col].strip())
    wrapped = [line[col:] for line in lines[2:second_row]]
    assert len(wrapped) > 1 and " ".join(wrapped) == REASON, wrapped
    assert all(not line[:col].strip() for line in lines[3:second_row])


def test_a_table_that_fits_or_names_no_width_keeps_every_cell() -> None:
    whole = table(HEADERS, ROWS)
    assert PATH in whole and REASON in whole
    assert table(HEADERS, ROWS, width=1000) == whole
    with tables_fit(None):
        assert table(HEADERS, ROWS) == whole


def test_tables_fit_sets_the_width_of_tables_that_name_none() -> None:
    with tables_fit(80):
        assert table(HEADERS, ROWS) == table(HEADERS, ROWS, width=80)
    assert table(HEADERS, ROWS) != table(HEADERS, ROWS, width=80)  # restored on the way out


def test_short_columns_stay_whole_when_nothing_else_can_give() -> None:
    rows = [("a", "clean", "38.0 KiB", "0/0/0")]
    assert table(["NAME", "STATUS", "SIZE", "WEIGHTS NaN/+Inf/-Inf"], rows, width=10) == table(
        ["NAME", "STATUS", "SIZE", "WEIGHTS NaN/+Inf/-Inf"], rows
    )


def test_a_table_that_cannot_fit_is_left_whole_rather_than_cut_for_nothing() -> None:
    headers = ["CHECKPOINT", *(f"COLUMN{i}" for i in range(12))]
    rows = [(PATH, *(f"v{i}" for i in range(12)))]
    assert table(headers, rows, width=80) == table(headers, rows)
