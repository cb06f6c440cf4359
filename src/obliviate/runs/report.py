"""Plots and Markdown reports (matplotlib, headless)."""

from __future__ import annotations

import base64
import html
import json
import os
import re
import stat
from pathlib import Path
from typing import Iterable

from obliviate.utils import atomic_write_bytes, atomic_write_text


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path, dpi: int = 110) -> Path:
    """Lay out ``fig``, write it to ``path`` atomically (format from the suffix) and close it."""
    import io

    path = Path(path)
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lstrip(".") or "png", dpi=dpi)
    _plt().close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path


def read_jsonl(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def plot_loss_curve(metrics_path: str | Path, out_png: str | Path, title: str = "training loss") -> Path:
    plt = _plt()
    recs = [r for r in read_jsonl(metrics_path) if "loss" in r]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if recs:
        ax.plot([r["step"] for r in recs], [r["loss"] for r in recs], lw=1.5)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return save_figure(fig, out_png)


def plot_grouped_bars(groups: dict[str, dict[str, float]], out_png: str | Path, title: str, ylabel: str,
                      ylim: tuple[float, float] | None = (0, 1.05)) -> Path:
    """``groups[model][metric] = value`` as grouped bars (one colour per model)."""
    import numpy as np

    plt = _plt()
    models = list(groups)
    metrics = list(dict.fromkeys(k for g in groups.values() for k in g))  # first-seen order
    x = np.arange(len(metrics))
    w = 0.8 / max(1, len(models))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(metrics) + 2), 3.8))
    for i, m in enumerate(models):
        vals = [groups[m].get(k, float("nan")) for k in metrics]
        ax.bar(x + (i - (len(models) - 1) / 2) * w, vals, w, label=m)
    ax.set_xticks(x)
    ax.set_xticklabels(metrics, rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    if ylim:
        ax.set_ylim(*ylim)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    if len(models) > 1:
        ax.legend(fontsize=8)
    return save_figure(fig, out_png)


REFERENCES = ("base", "oracle")
"""Models drawn as stars and dashed lines: the reference points of a comparison."""


def plot_tradeoff(points: dict[str, tuple[float, float]], png: str | Path, xlabel: str, ylabel: str,
                  title: str | None = None, arrows: dict[str, float] | None = None) -> Path:
    """Scatter of ``{name: (x, y)}`` in [0, 1]^2, one marker and label per model.

    Models at the same point (to 0.01) are fanned out around it and labelled together, so none hides
    another. ``arrows``: ``{name: x_after}`` draws an arrow from a model's point to ``(x_after, y)``
    (e.g. its forget score after an attack).
    """
    import math

    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.8, 4.4))
    markers = "osD^vP<>Xh"
    groups: dict[tuple, list[str]] = {}
    for name, (x, y) in points.items():
        groups.setdefault((round(x, 2), round(y, 2)), []).append(name)
    for i, name in enumerate(points):
        x, y = points[name]
        group = groups[(round(x, 2), round(y, 2))]
        if len(group) > 1:  # fan out on a small circle, in a fixed order
            a = 2 * math.pi * group.index(name) / len(group)
            x, y = x + 0.025 * math.cos(a), y + 0.025 * math.sin(a)
        marker = "*" if name in REFERENCES else markers[i % len(markers)]
        ax.scatter([x], [y], s=110 if marker == "*" else 45, marker=marker, label=name, alpha=0.85)
        if arrows and arrows.get(name) is not None and name not in REFERENCES:
            ax.annotate("", xy=(arrows[name], y), xytext=(x, y),
                        arrowprops=dict(arrowstyle="->", color="grey", alpha=0.6))
    for (gx, gy), names in groups.items():
        if len(names) > 1:
            ax.annotate(", ".join(names), (gx, gy), xytext=(0, -16), textcoords="offset points", fontsize=6,
                        ha="center", color="dimgrey")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xlim(-0.08, 1.08)
    ax.set_ylim(-0.08, 1.08)
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower center", ncol=3)
    return save_figure(fig, png)


def plot_recovery_curves(curves: dict[str, list], png: str | Path, xlabel: str, ylabel: str,
                         title: str | None = None, base_line: float | None = None,
                         empty: str = "no relearning attack was run") -> Path:
    """One line per ``{name: [[x, y], ...]}`` curve (references dashed); ``base_line``: a dotted level."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    drawn = 0
    for name, curve in curves.items():
        if curve:
            xs, ys = zip(*curve)
            ax.plot(xs, ys, marker="o", ms=3, lw=1.5, ls="--" if name in REFERENCES else "-", label=name)
            drawn += 1
    if base_line is not None:
        ax.axhline(base_line, color="k", lw=0.8, ls=":", label="base before attack")
    if not drawn:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(-0.05, 1.05)
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    if drawn or base_line is not None:
        ax.legend(fontsize=7)
    return save_figure(fig, png)


RELEARN_CURVES = {"relearn": "related corpus", "relearn_disjoint": "disjoint halves"}
"""The relearning attacks of :func:`obliviate.evidence.harness.run_task_attacks` that record a curve
(``metrics[f"{key}_curve"]``), and their names in the plot."""


def plot_relearn_curves(metrics: dict, png: str | Path) -> Path | None:
    """The forget score during each relearning attack of ``metrics`` (``relearn_curve``,
    ``relearn_disjoint_curve``), the base model's as a level; None (nothing drawn) without a curve."""
    curves = {name: metrics[f"{key}_curve"] for key,
              name in RELEARN_CURVES.items() if f"{key}_curve" in metrics}
    if not curves:
        return None
    return plot_recovery_curves(curves, png, "fine-tuning step", "forget score", title="relearning attack",
                                base_line=metrics.get("relearn_base_acc",
                                                      metrics.get("relearn_disjoint_base_acc")))


_MD_SPECIAL = re.compile(r"[\\`*\[\]<>|!#&~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]+")
_LINE_START = re.compile(r"^(\s*)([-+=]|\d{1,9}[.)])(?=\s|$)")  # a list item, a rule, a setext heading


def md_escape(text) -> str:
    """``text`` as literal Markdown text: what it says, never markup.

    For strings that reached us from users (task, set, method and model names, questions, answers):
    newlines and other control characters become one space (a string cannot start a line, so it
    cannot become a heading, an image or a table row), and the characters that make links, images,
    raw HTML, code spans, emphasis and table cells are backslash-escaped. An ``_`` inside a word
    (``forget_score``) is left as it is, as Markdown leaves it.
    """
    text = _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), _CONTROL.sub(" ", str(text)))
    return _LINE_START.sub(lambda m: m.group(1) + m.group(2)[:-1] + "\\" + m.group(2)[-1], text)


def md_code(text) -> str:
    """``text`` as a Markdown code span; :func:`md_escape` text where it holds a backtick (which would
    end the span). Control characters become one space either way."""
    text = _CONTROL.sub(" ", str(text))
    return md_escape(text) if "`" in text or not text.strip() else f"`{text}`"


def markdown_table(rows: list[dict], columns: list[str], fmt: str = "{:.3f}", missing: str = "") -> str:
    """A Markdown table of ``rows`` (dicts) over ``columns``: floats with ``fmt``, NaN "n/a", None
    ``missing``.

    Column names and other cells are data: each is :func:`md_escape` d, so a ``|`` or a newline in a
    model or set name stays inside its cell and no cell becomes a link, an image or HTML."""

    def cell(v):
        if isinstance(v, float):
            return fmt.format(v) if v == v else "n/a"
        return missing if v is None else md_escape(v)

    head = "| " + " | ".join(md_escape(c) for c in columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body])


_PUNCT = r"[!-/:-@\[-`{-~]"
_INLINE = re.compile(r"\\(" + _PUNCT + r")|`([^`]+)`")  # a backslash escape (CommonMark) or a code span


def _inline(text: str) -> str:
    """HTML of one line of Markdown text: backslash escapes, `code` and **bold**; everything else escaped."""
    held: list[str] = []

    def hold(m: re.Match) -> str:
        esc, code = m.groups()
        held.append(html.escape(esc) if esc is not None else f"<code>{html.escape(code)}</code>")
        return f"\x00{len(held) - 1}\x00"

    t = _INLINE.sub(hold, _CONTROL.sub(" ", text))  # no stray \x00 can meet a held piece
    t = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(t))
    return re.sub("\x00(\\d+)\x00", lambda m: held[int(m.group(1))], t)


def _cells(line: str) -> list[str]:
    """The cells of one table row, split at each ``|`` that no backslash escapes."""
    cells, cell, chars = [], "", iter(line.strip())
    for ch in chars:
        if ch == "\\":
            cell += ch + next(chars, "")
        elif ch == "|":
            cells.append(cell)
            cell = ""
        else:
            cell += ch
    cells.append(cell)
    if cells and not cells[0].strip():
        cells = cells[1:]
    if cells and not cells[-1].strip():
        cells = cells[:-1]
    return [c.strip() for c in cells]


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def embeddable_image(base_dir: Path, target: str, images: Iterable[str | Path]) -> bytes | str:
    """The bytes of image ``target`` of a report in ``base_dir``, or why it is not embedded.

    Only a plot the run wrote is embedded: ``target`` must be one of ``images`` (paths relative to
    ``base_dir``), relative and without ``..``, reached without a symbolic link from ``base_dir`` on,
    a regular file inside ``base_dir``, and a PNG. Anything else (an absolute path, ``../x.png``, a
    plot replaced by a link, a path someone wrote into the Markdown) is named, never read.
    """
    allowed = {Path(p).as_posix() for p in images}
    rel = Path(target)
    if rel.is_absolute() or target.startswith("~") or ".." in rel.parts or not rel.parts:
        return "not a path inside the report's directory"
    if rel.as_posix() not in allowed:
        return "not a plot this run wrote"
    path = Path(base_dir)
    for part in rel.parts:
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            return "missing"
        if stat.S_ISLNK(mode):
            return "a symbolic link"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return "cannot be opened"
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return "not a regular file"
        data = f.read()
    if not data.startswith(PNG_SIGNATURE):
        return "not a PNG"
    return data


def markdown_to_html(md: str, base_dir: Path, images: Iterable[str | Path] = ()) -> str:
    """Render the small Markdown subset our reports use, with images embedded as base64.

    ``images``: the plots the run wrote (paths relative to ``base_dir``), the only images embedded
    (:func:`embeddable_image`); any other image line shows its alt text and why it was left out.
    """
    images = list(images)
    out, lines, i = [], md.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append("<pre>" + html.escape("\n".join(lines[i + 1:j])) + "</pre>")
            i = j + 1
            continue
        m = re.match(r"^(#+) (.*)", line)
        if m:
            n = len(m.group(1))
            out.append(f"<h{n}>{_inline(m.group(2))}</h{n}>")
        elif (m := re.match(r"^!\[(.*?)\]\((.*?)\)", line)):
            data = embeddable_image(base_dir, m.group(2), images)
            if isinstance(data, bytes):
                out.append(f'<p><img alt="{html.escape(m.group(1))}" '
                           f'src="data:image/png;base64,{base64.b64encode(data).decode()}"></p>')
            else:
                out.append(f"<p>[image {html.escape(m.group(2))!s} not embedded: {data}]</p>")
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                if not re.match(r"^\|[-|: ]+\|$", lines[i]):
                    rows.append(_cells(lines[i]))
                i += 1
            head, body = rows[0], rows[1:]
            t = ["<div class='wide'><table><tr>" + "".join(f"<th>{_inline(c).replace('_', '_<wbr>')}</th>"
                                                         for c in head) + "</tr>"]
            t += ["<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in body]
            out.append("\n".join(t) + "</table></div>")
            continue
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline(lines[i][2:])}</li>")
                i += 1
            out.append("<ul>" + "".join(items) + "</ul>")
            continue
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
        i += 1
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             ".wide{overflow-x:auto}table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ccc;"
             "padding:3px 5px;text-align:right}th{max-width:7em;vertical-align:bottom}th{background:#f3f3f3}"
             "img{max-width:100%}pre{background:#f6f6f6;padding:8px}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>obliviate report</title>"
            f"<style>{style}</style></head><body>{''.join(out)}</body></html>\n")


def write_html(md_path: str | Path, html_path: str | Path, images: Iterable[str | Path] = ()) -> Path:
    """``html_path``: the self-contained HTML of ``md_path``, embedding only ``images`` (the plots the
    run wrote, relative to ``md_path``'s directory; see :func:`markdown_to_html`)."""
    md_path = Path(md_path)
    atomic_write_text(html_path, markdown_to_html(md_path.read_text(), md_path.parent, images))
    return Path(html_path)
