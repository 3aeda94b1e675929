"""``remotekit.result.table`` fitted to a width: long paths shortened in the middle, a
free-text column wrapped within its cell, the other columns whole; no width, every cell."""

from __future__ import annotations

import re

from remotekit.result import fit_lines, table, tables_fit

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


SCAN = ["CHECKPOINT", "STATUS", "STEP", "WEIGHTS NaN/+Inf/-Inf", "EPOCH", "SECONDS"]
SCAN_ROWS = [("clean/checkpoint.pt", "clean", 5, "0/0/0", 0, "0.1")]


def test_headers_wrap_at_their_spaces_before_any_column_goes() -> None:
    lines = table(SCAN, SCAN_ROWS, width=66, optional=("SECONDS", "EPOCH")).splitlines()
    assert lines[0].split() == ["CHECKPOINT", "STATUS", "STEP", "WEIGHTS", "EPOCH", "SECONDS"]
    assert lines[1].split() == ["NaN/+Inf/-Inf"] and lines[3].split()[-1] == "0.1"
    assert max(len(line) for line in lines) <= 66


def test_spare_columns_go_one_at_a_time_the_first_named_first_and_a_line_names_them() -> None:
    spare = ("SECONDS", "EPOCH")
    one = table(SCAN, SCAN_ROWS, width=56, optional=spare).splitlines()
    assert "SECONDS" not in one[0] and "EPOCH" in one[0], one
    assert one[-1] == "(--wide adds SECONDS)"
    two = table(SCAN, SCAN_ROWS, width=48, optional=spare).splitlines()
    assert two[0].split() == ["CHECKPOINT", "STATUS", "STEP", "WEIGHTS"], two
    assert two[-1] == "(--wide adds EPOCH, SECONDS)" and two[-2].split()[-1] == "0/0/0"
    for lines, width in ((one, 56), (two, 48)):
        assert max(len(line) for line in lines) <= width
    # nothing goes where it fits, nor where no width is set (a pipe, the API)
    assert "--wide" not in table(SCAN, SCAN_ROWS, width=200, optional=spare)
    assert table(SCAN, SCAN_ROWS, optional=spare) == table(SCAN, SCAN_ROWS)


def test_an_indented_table_counts_its_indent_in_the_width() -> None:
    rows = [(f"name_{i}", "x" * 30, "y" * 30) for i in range(2)]
    lines = table(["NAME", "A", "B"], rows, width=70, optional=("B",), indent="  ").splitlines()
    assert all(line.startswith("  ") and len(line) <= 70 for line in lines), lines
    assert lines[0].split() == ["NAME", "A"] and lines[-1] == "  (--wide adds B)"
    assert table(["A"], [("a",)], indent="  ") == "  A\n  -\n  a"


def test_prose_lines_wrap_under_their_first_word_only_where_a_width_is_set() -> None:
    line = "  truncated/checkpoint.pt: " + REASON
    assert fit_lines([line, "short"]) == [line, "short"]
    fitted = fit_lines([line, "short"], width=40)
    assert fitted[0].startswith("  truncated/checkpoint.pt:") and fitted[-1] == "short"
    assert all(len(x) <= 40 for x in fitted) and all(x.startswith("    ") for x in fitted[1:-1])
    assert " ".join(x.strip() for x in fitted[:-1]) == line.strip()
    with tables_fit(40):
        assert fit_lines([line, "short"]) == fitted
