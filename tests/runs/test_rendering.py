"""Reports and model cards are rendered from data: a user's string (a task, set, method or model name, a
question) is shown as text in Markdown and HTML, never as markup, and report.html embeds only the plots
the run wrote."""

from __future__ import annotations

import base64
import html
import os
import re

import pytest
import yaml
from tests.tasks._userdata import write_user_files

from obliviate.api import load_task
from obliviate.pipelines.compare.report import write_report
from obliviate.runs.card import write_model_card
from obliviate.runs.report import markdown_table, markdown_to_html, md_code, md_escape, write_html
from obliviate.utils import recorded_path

PNG = b"\x89PNG\r\n\x1a\n" + b"a plot the run wrote"

INJECTED = [
    "x\n![x](/any/path)",  # the case: a newline, then an image line
    "y\r\n\n![secret](../secret.png)\n# heading",
    "<img src=x onerror=alert(1)>",
    "<script>alert(1)</script>",
    "[link](javascript:alert(1))",
    "a | b | c",
    "`code` and **bold** and _under_",
    "- a list item",
    "&lt;img src=x&gt;",
    "tab\there\x00nul\u2028sep",
]


def _body(page: str) -> str:
    return page.split("<body>", 1)[1].split("</body>", 1)[0]


def _text(page: str) -> str:
    """What a browser shows of ``page``'s body: the tags dropped, the entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", _body(page)))


def _no_markup(page: str) -> None:
    body = _body(page)
    assert not re.search(r"<(?!/?(p|h\d|b|code|table|tr|th|td|div|ul|li|wbr|pre)\b)", body), body
    assert "<img" not in body and "<a " not in body and "base64" not in body


@pytest.mark.parametrize("name", INJECTED)
def test_a_user_string_is_text_in_markdown_and_html(name, tmp_path):
    (tmp_path / "secret.png").write_bytes(PNG)
    md = md_escape(name)
    assert "\n" not in md and "\r" not in md
    shown = re.sub(r"[\x00-\x1f\u2028]+", " ", name)
    for line in (f"# task {md}", f"Forget: {md}.", f"- **{md}**: a sentence", f"task {md_code(name)}", md):
        page = markdown_to_html(line, tmp_path)
        _no_markup(page)
        assert shown in _text(page), (line, page)


@pytest.mark.parametrize("name", INJECTED)
def test_a_user_string_in_a_table_stays_in_its_cell(name, tmp_path):
    md = markdown_table([{"model": name, "score": 0.5}, {"model": "npo", "score": 0.25}], ["model", name])
    lines = md.splitlines()
    assert len(lines) == 4  # header, rule, two rows: no row was broken or added
    page = markdown_to_html(md, tmp_path)
    _no_markup(page)
    cells = re.findall(r"<t[dh]>(.*?)</t[dh]>", _body(page))
    assert len(cells) == 6
    shown = re.sub(r"[\x00-\x1f\u2028]+", " ", name)
    assert html.unescape(cells[2]) == shown and html.unescape(cells[1].replace("<wbr>", "")) == shown


def test_plain_names_are_unchanged():
    """What the committed reports hold reads as before: names with inner underscores, dots, dashes."""
    for name in ("forget_score", "relearn_disjoint_acc", "tofu:forget10", "1.8B", "rmu-lat", "0.5"):
        assert md_escape(name) == name
    assert md_code("my-task") == "`my-task`"


def test_the_report_embeds_only_the_plots_the_run_wrote(tmp_path):
    run = tmp_path / "run"
    (run / "plots").mkdir(parents=True)
    (run / "plots" / "ours.png").write_bytes(PNG)
    (run / "plots" / "other.png").write_bytes(PNG + b" not declared")
    (run / "plots" / "fake.png").write_bytes(b"not a png")
    outside = tmp_path / "secret.png"
    outside.write_bytes(PNG + b" SECRET")
    os.symlink(outside, run / "plots" / "linked.png")
    os.symlink(tmp_path, run / "linkdir")
    wrote = ["plots/ours.png", "plots/linked.png", "linkdir/secret.png", "plots/fake.png", "../secret.png",
             str(outside)]
    refused = ["plots/other.png", "plots/linked.png", "linkdir/secret.png", "plots/fake.png", "../secret.png",
               "plots/../../secret.png", str(outside), "~/secret.png", "plots/missing.png"]
    md = "\n".join(f"![{t}]({t})" for t in ["plots/ours.png", *refused]) + "\n"
    (run / "report.md").write_text(md)
    page = write_html(run / "report.md", run / "report.html", images=wrote).read_text()
    assert page.count("<img") == 1 and base64.b64encode(PNG).decode() in page
    for leaked in (outside, run / "plots" / "other.png", run / "plots" / "fake.png"):
        assert base64.b64encode(leaked.read_bytes()).decode() not in page
    for t in refused:
        assert f"[image {html.escape(t)} not embedded:" in page, t
    assert markdown_to_html("![p](plots/ours.png)", run).count("<img") == 0  # nothing declared: nothing embedded


@pytest.mark.parametrize("name", INJECTED)
def test_the_model_card_shows_names_as_text(name, tmp_path):
    path = write_model_card(tmp_path, base_model=name, task=name, method=name, settings={"note": name},
                            metrics={name: 0.5, "forget_score": 0.25})
    text = path.read_text()
    meta = yaml.safe_load(text.split("---\n")[1])
    assert meta["obliviate"] == {"task": name, "method": name, "inputs": []}
    assert meta["base_model"] == recorded_path(name)  # (a name that can only be a path: absolute)
    body = text.split("---\n", 2)[2]
    lines = body.splitlines()
    assert not any(l.startswith(("![", "<", "# heading", "- a list")) for l in lines), body
    assert sum(l.startswith("|") for l in lines) == 4  # header, rule, two metrics
    _no_markup(markdown_to_html(body, tmp_path))


def test_a_task_spec_name_cannot_pull_a_file_into_the_compare_report(tmp_path):
    """The issue's case, through a user's spec: a task name holding a newline and an image line, set and
    method names holding HTML, links and table breaks; report.md shows them as text, report.html embeds
    only the comparison's own plots."""
    files = write_user_files(tmp_path / "data")
    secret = tmp_path / "secret.png"
    secret.write_bytes(PNG + b" SECRET")
    (tmp_path / "data" / "spec.yaml").write_text(yaml.safe_dump({
        "name": f"mine\n![x]({secret})\n<img src=x onerror=alert(1)>",
        "forget": ["forget.jsonl"], "retain": ["retain.csv"],
        "evals": [{"path": "utility_mcq.json", "role": "utility", "name": "u | [l](javascript:alert(1))"}]}))
    task = load_task(f"file:{tmp_path / 'data' / 'spec.yaml'}")
    assert files and "\n" in task.name
    evil = "npo\n![y](../secret.png)"
    metrics = {name: {"forget_score": f, "retain_score": 0.8, "utility_score": 0.5,
                      **{f"{es.name}_{'acc' if es.kind == 'mcq' else 'em'}": 0.5 for es in task.evals}}
               for name, f in (("base", 0.9), (evil, 0.2))}
    out = tmp_path / "run"
    write_report(out, task, metrics, curves={}, configs={evil: {"note": "a\n```\n![z](/etc/hostname)"}}, seconds=1)
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert not any(l.startswith(("![x]", "![y]", "![z]", "<img")) for l in md.splitlines())
    assert str(secret) in _text(page) and "<img src=x" in _text(page)  # shown as text
    assert base64.b64encode(secret.read_bytes()).decode() not in page
    wrote = sorted(p.relative_to(out).as_posix() for p in (out / "plots").glob("*.png"))
    embedded = re.findall(r'<p><img alt="[^"<>]*" src="data:image/png;base64,([^"]+)"></p>', page)
    assert page.count("<img") == len(embedded) == len(wrote) >= 2  # every plot the run drew, nothing else
    assert sorted(embedded) == sorted(base64.b64encode((out / w).read_bytes()).decode() for w in wrote)
    _no_markup(re.sub(r"<p><img [^>]*></p>", "", page))
