import os

import pytest

from obliviate.errors import ObliviateError
from obliviate.runs.report import _plt, markdown_table, save_figure


def test_save_figure_writes_closes_and_leaves_no_temporary(tmp_path):
    plt = _plt()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    out = save_figure(fig, tmp_path / "a.png")
    assert out == tmp_path / "a.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plt.fignum_exists(fig.number)
    assert os.listdir(tmp_path) == ["a.png"]


def test_save_figure_format_follows_the_suffix(tmp_path):
    fig, _ = _plt().subplots()
    assert save_figure(fig, tmp_path / "a.svg").read_text().lstrip().startswith("<?xml")


def test_save_figure_keeps_the_old_plot_when_the_write_fails(tmp_path, monkeypatch):
    plt = _plt()
    save_figure(plt.subplots()[0], tmp_path / "a.png")
    old = (tmp_path / "a.png").read_bytes()

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("obliviate.runs.results.os.replace", full_disk)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    with pytest.raises(ObliviateError, match="a.png.*No space left"):
        save_figure(fig, tmp_path / "a.png")
    assert (tmp_path / "a.png").read_bytes() == old
    assert os.listdir(tmp_path) == ["a.png"]


def test_markdown_table_formats_floats_and_missing_cells():
    md = markdown_table([{"a": 0.12345, "b": "x"}, {"a": None}], ["a", "b"], missing="-")
    assert md.splitlines() == ["| a | b |", "|---|---|", "| 0.123 | x |", "| - | - |"]


def test_wide_tables_scroll_in_their_own_box_and_headers_can_break(tmp_path):
    from obliviate.runs.report import markdown_table, markdown_to_html

    cols = ["model"] + [f"relearn_disjoint_metric_{i}" for i in range(12)]
    html = markdown_to_html(markdown_table([{"model": "npo", **{c: 0.5 for c in cols[1:]}}], cols), tmp_path)
    assert "<div class='wide'><table>" in html and html.count("</table></div>") == 1
    assert "<th>relearn_<wbr>disjoint_<wbr>metric_<wbr>0</th>" in html
    assert ".wide{overflow-x:auto}" in html


def test_models_at_one_point_are_all_drawn_apart(tmp_path, monkeypatch):
    import obliviate.runs.report as R

    drawn = []
    real = R._plt

    def spy():
        plt = real()
        orig = plt.Axes.scatter

        def scatter(self, x, y, *a, **k):
            drawn.append((round(x[0], 4), round(y[0], 4)))
            return orig(self, x, y, *a, **k)

        monkeypatch.setattr(plt.Axes, "scatter", scatter)
        return plt

    monkeypatch.setattr(R, "_plt", spy)
    pts = {"base": (1.0, 1.0), "graddiff": (0.0, 1.0), "npo": (0.0, 1.0), "rmu": (0.001, 0.999)}
    assert R.plot_tradeoff(pts, tmp_path / "p.png", "x", "y").exists()
    assert len(drawn) == 4 and len(set(drawn)) == 4  # three models at one point, three markers apart


def test_relearn_curves_are_named_by_their_attack_and_drawn_against_the_base(tmp_path, monkeypatch):
    import obliviate.runs.report as R

    metrics = {"relearn_curve": [[0, 0.1], [5, 0.6]], "relearn_disjoint_curve": [[0, 0.2], [5, 0.4]],
               "relearn_base_acc": 0.9, "relearn_acc": 0.6}
    assert R.plot_relearn_curves(metrics, tmp_path / "c.png").stat().st_size > 1000
    assert R.plot_relearn_curves({"relearn_acc": 0.6}, tmp_path / "none.png") is None  # no curve: no plot
    assert not (tmp_path / "none.png").exists()
    calls = []
    monkeypatch.setattr(R, "plot_recovery_curves", lambda curves, png, *a, **k: calls.append((curves, k)) or png)
    R.plot_relearn_curves({"relearn_disjoint_curve": [[0, 0.2]], "relearn_disjoint_base_acc": 0.7}, tmp_path / "d.png")
    assert calls == [({"disjoint halves": [[0, 0.2]]}, {"title": "relearning attack", "base_line": 0.7})]
