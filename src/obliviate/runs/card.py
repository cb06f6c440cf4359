"""A Hugging Face model card (``README.md`` with YAML metadata) for every model obliviate saves."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from obliviate.runs.report import markdown_table, md_code, md_escape
from obliviate.runs.results import atomic_write_text


def write_model_card(directory: str | Path, *, base_model: str | None, task: str, method: str, settings: dict,
                     metrics: dict, outcome: dict | None = None) -> Path:
    """Write ``directory/README.md``: hub-style metadata (``base_model``, ``tags``), the task, the settings,
    the run's outcome (:func:`obliviate.eval.outcome.unlearn_outcome`: also ``obliviate.outcome`` in the
    metadata; not a verdict on removal, which only ``obliviate attack`` and ``obliviate compare`` give) and a
    table of the scalar metrics.

    The names (task, method, base model, metric) are data, often from a user's spec: the Markdown shows
    them escaped (:func:`~obliviate.runs.report.md_escape`), never as HTML, links or images; the YAML
    metadata holds them as YAML strings."""
    directory = Path(directory)
    meta = {"library_name": "transformers", "tags": ["unlearning", "obliviate", method], "obliviate": {"task": task,
            "method": method}}
    if base_model:
        meta["base_model"] = str(base_model)
    if outcome:
        meta["obliviate"]["outcome"] = outcome["outcome"]
    rows = [{"metric": k, "value": v} for k, v in metrics.items() if isinstance(v, float)]
    text = "\n".join([
        "---", yaml.safe_dump(meta, sort_keys=False).strip(), "---", "",
        f"# {md_escape(method)} on {md_escape(task)}", "",
        f"Unlearned with obliviate, method {md_code(method)} on task {md_code(task)}"
        + (f", starting from {md_code(base_model)}." if base_model else "."), "",
        "## Settings", "", "```json", json.dumps(settings, indent=1, default=str), "```", "",
        *(["## Outcome", "", md_escape(outcome["line"]), ""] if outcome else []),
        "## Results", "", markdown_table(rows, ["metric", "value"], fmt="{:.4f}"), "",
    ])
    atomic_write_text(directory / "README.md", text)
    return directory / "README.md"


def read_model_card(directory: str | Path) -> dict:
    """The YAML metadata of ``directory/README.md`` as :func:`write_model_card` writes it ({} when there is none)."""
    path = Path(directory) / "README.md"
    try:
        text = path.read_text()
    except OSError:
        return {}
    if not text.startswith("---\n") or "\n---" not in text[4:]:
        return {}
    try:
        meta = yaml.safe_load(text[4:text.index("\n---", 4)])
    except yaml.YAMLError:
        return {}
    return meta if isinstance(meta, dict) else {}


def finetune_card(model: str | Path, max_depth: int = 4) -> Path | None:
    """The directory of the first ``obliviate finetune`` model card met following ``base_model`` through the model
    cards from ``model`` (an unlearned model's card names the fine-tuned one); None when no card on the way is one."""
    here = Path(model)
    for _ in range(max_depth):
        meta = read_model_card(here)
        if not meta.get("base_model"):
            return None
        if (meta.get("obliviate") or {}).get("method") == "finetune":
            return here
        here = Path(str(meta["base_model"]))
    return None


def untaught_model(model: str | Path, max_depth: int = 4) -> str | None:
    """The model before it was taught the task: following ``base_model`` through the model cards from ``model`` (an
    unlearned model's card names the fine-tuned one, whose card names its input), the input of the first
    ``obliviate finetune`` card; None when no card on the way says so."""
    card = finetune_card(model, max_depth)
    return None if card is None else str(read_model_card(card)["base_model"])


def card_settings(directory: str | Path) -> dict:
    """The settings :func:`write_model_card` recorded in ``directory/README.md`` (its ``## Settings`` JSON block;
    for ``obliviate finetune``, the fine-tuning config with the epochs, lr, steps and preset used); {} without."""
    try:
        text = (Path(directory) / "README.md").read_text()
    except OSError:
        return {}
    head = "## Settings\n\n```json\n"
    if head not in text:
        return {}
    body = text[text.index(head) + len(head):]
    try:
        settings = json.loads(body[:body.index("\n```")])
    except (ValueError, json.JSONDecodeError):
        return {}
    return settings if isinstance(settings, dict) else {}
