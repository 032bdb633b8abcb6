"""experiments.headlines: README's headline numbers agree with the committed tables of docs/results,
the extractor on a planted printed table, and a planted disagreement is caught."""

from pathlib import Path

import pytest

from experiments.curves import read, report
from experiments.headlines import CHECKS, RESULTS, check, extract, interval, main, markdown_tables, tolerance
from experiments.paired import read_differences

PAIRED_MD = """# x

## Paired

| comparison | metric | seeds | per-seed difference (pp) | mean | 95 % t interval | reading |
|---|---|---|---|---|---|---|
| e/b − e/a | overall | 0,1,2 | +1.00, +2.00, +3.00 | +2.00 | [-0.48, +4.48] | not distinguishable |
| e/b − e/a | others | 0,1,2 | -1.00, −2.00, +0.00 | -1.00 | [-3.48, +1.48] | not distinguishable |

## Other

| strategy | overall |
|---|---|
| all | **73.04 ± 6.23** |
"""


def test_readme_headlines_agree_with_the_committed_tables(capsys) -> None:
    assert main([]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert f"{len(CHECKS)} of {len(CHECKS)} phrases of README and docs/results agree" in out


def test_a_committed_interval_is_recomputed_from_its_per_seed_differences() -> None:
    # bench-agg.md prints the group oracle − FedAvg as +17.10 [+13.73, +20.47] from these five seeds
    mean, lo, hi = interval("bench-agg/vs-fedavg.csv", "bench-aggc-oracle/all", "bench-aggc-fedavg/all")
    assert (mean, lo, hi) == pytest.approx((17.10, 13.73, 20.47), abs=0.006)


def test_extract_turns_a_printed_paired_table_into_per_seed_differences(tmp_path: Path) -> None:
    source = tmp_path / "x.md"
    source.write_text(PAIRED_MD)
    drawn, base = read_differences(extract(source, tmp_path / "d.csv", "Paired"))
    assert base == "e/a"
    assert drawn == [("e/b", "overall", {0: 1.0, 1: 2.0, 2: 3.0}),
                     ("e/b", "others", {0: -1.0, 1: -2.0, 2: 0.0})]
    other = extract(source, tmp_path / "o.csv", "Other").read_text().splitlines()
    assert other == ["strategy,overall", "all,73.04 ± 6.23"]
    with pytest.raises(ValueError, match="2 tables; name one with --table"):
        extract(source, tmp_path / "y.csv")
    assert len(markdown_tables(PAIRED_MD)) == 2


ROOT = Path(__file__).resolve().parents[2]
PRIVACY = "docs/results/privacy.md"


def planted(tmp_path: Path, document: str, old: str, new: str) -> Path:
    """A copy of the checked documents with `old` replaced by `new` in `document`."""
    for name in dict.fromkeys(item.document for item in CHECKS):
        text = (ROOT / name).read_text(encoding="utf-8")
        if name == document:
            assert old in text, old
            text = text.replace(old, new)
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def failing(root: Path) -> list[tuple[str, list[str] | None]]:
    return [(item.template, printed) for item, printed, _, ok in check(root) if not ok]


@pytest.mark.parametrize(("document", "old", "new", "template", "printed"), [
    ("docs/compare.md", "gains +17.1 pp [+13.7, +20.5]", "gains +17.3 pp [+13.7, +20.5]",
     "(the group oracle) gains {} pp [{}, {}] over FedAvg", ["+17.3", "+13.7", "+20.5"]),
    ("docs/compare.md", "FedAvg falls 7.5 pp below", "FedAvg falls well below",
     "FedAvg falls {} pp below local training", None),
    ("docs/compare.md", "range 36.5-68.8 %", "range 46.5-68.8 %", None, None),
    (PRIVACY, "40.7 % after round 10", "39.3 % after round 10", None, None),
], ids=["interval", "phrase-gone", "newcomer-spread", "privacy-figure"])
def test_a_number_off_by_more_than_its_rounding_fails(tmp_path: Path, document, old, new, template,
                                                       printed) -> None:
    bad = failing(planted(tmp_path, document, old, new))
    if template is not None:
        assert bad == [(template, printed)]
    else:
        assert len(bad) == 1 and bad[0][1] is not None, bad


def test_tolerance_is_half_a_printed_digit_plus_the_tables_rounding() -> None:
    assert tolerance("+17.1") == pytest.approx(0.06)
    assert tolerance("0.13") == pytest.approx(0.015)
    assert tolerance("75") == pytest.approx(0.51)


# committed differences CSV <- the printed table it was copied from (docs/results/tables.sh)
PAIRED_SOURCES = [
    ("bench-agg/vs-fedavg.csv", "bench-agg.md", "Paired against FedAvg", None),
    ("bench-agg/vs-local.csv", "bench-agg.md", "Paired against local training", None),
    ("bench-agg/no-conflict.csv", "bench-agg.md", "Without the conflict", None),
    ("bench-yesno/paired.csv", "bench-yesno/paired.md", "", 1),
    ("bench-yesno-budget/paired.csv", "bench-yesno-budget/paired.md", "", 1),
    ("bench-gen/selection-paired.csv", "bench-gen/selection-paired.md", "", 1),
    ("sensitivity-aggregation/paired.csv", "sensitivity-aggregation.md", "Results", 1),
]


@pytest.mark.parametrize(("table", "source", "section", "index"), PAIRED_SOURCES)
def test_every_printed_interval_is_recomputed_from_the_committed_differences(table, source, section, index):
    """Each printed row's mean and 95 % interval (two decimals) from the CSV's per-seed differences.
    Those differences are printed to two decimals, so each may be off by 0.005: that moves the mean
    by up to 0.005 and the half-width by up to t_{0.975,4} · 0.005 · √(5/4) / √5 ≈ 0.007 (5 seeds),
    and the printed bounds are rounded by up to 0.005 too: 0.017 in all, hence a tolerance of 0.02."""
    printed = markdown_tables((RESULTS / source).read_text(encoding="utf-8"), section)[index or 0]
    head = printed[0]
    mean_col = head.index("mean")
    interval_col = next(i for i, h in enumerate(head) if "interval" in h)
    metric_col = head.index("metric") if "metric" in head else None
    for cells in printed[1:]:
        row, base = (s.strip() for s in cells[0].split(" − "))
        metric = cells[metric_col] if metric_col is not None else "overall"
        lo, hi = (float(v.replace("−", "-")) for v in cells[interval_col].strip("[]").split(","))
        assert interval(table, row, base, metric) == pytest.approx(
            (float(cells[mean_col].replace("−", "-")), lo, hi), abs=0.02), cells[0]


def test_a_paired_table_without_a_row_minus_base_comparison_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "x.md"
    source.write_text("| comparison | per-seed difference (pp) |\n|---|---|\n| just a | +1.00, +2.00 |\n")
    with pytest.raises(ValueError, match="comparison 'just a' is not 'row − base'"):
        extract(source, tmp_path / "x.csv")


# page <- the committed raw rows its tables were printed from (`experiments.curves`), the rules compared,
# and which of the printed tables the page holds (None: all five)
CURVE_SOURCES = [
    ("bench-gen-equal.md", "bench-gen-equal/runs.csv", "f3ocus-nsga2", "all,random,lntk", None),
    ("bench-gen-equal.md", "bench-gen-equal/runs.csv", "lntk", "all,random", (1,)),
    ("bench-gen-equal.md", "bench-gen-equal/runs-30.csv", "f3ocus-nsga2", "all", (0, 1, 2, 3)),
]


@pytest.mark.parametrize(("page", "rows", "reference", "against", "held"), CURVE_SOURCES)
def test_every_table_of_a_curves_page_is_reprinted_from_its_raw_rows(page, rows, reference, against, held):
    """Each table `experiments.curves` prints from the raw-rows CSV stands on the page as printed,
    row for row: a figure copied by hand, or left from runs the CSV no longer holds, is caught."""
    printed = report(read(RESULTS / rows), reference, against.split(",")).split("\n\n")
    text = (RESULTS / page).read_text(encoding="utf-8")
    for table in (printed if held is None else [printed[i] for i in held]):
        assert table in text, f"{page} lacks the table headed {table.splitlines()[0]!r}"
