"""A Hugging Face model card (``README.md`` with YAML metadata) for every model obliviate saves.

Every path a card records is absolute (:func:`obliviate.utils.recorded_path`): the model it started from
(``base_model``) and the data files it was made from (``obliviate.inputs``, each with its SHA-256), so a later
command run from any directory finds them. A card written before that may hold a path relative to the
directory its command ran in: it is read relative to the card's own directory, else to the working directory
(:func:`card_base_model`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from obliviate.errors import ConfigError, ModelError, setting
from obliviate.models.load import check_model_dir, could_be_hub_id, hub_model_missing
from obliviate.runs.cost import cost_line
from obliviate.runs.report import markdown_table, md_code, md_escape
from obliviate.runs.results import atomic_write_text, run_inputs
from obliviate.utils import looks_like_path, recorded_path

FINETUNE = "finetune"
"""The ``obliviate.method`` of a card ``obliviate finetune`` writes: the model it names as ``base_model`` is
the model before it was taught the task (:func:`untaught_model`)."""


def write_model_card(directory: str | Path, *, base_model: str | None, task, method: str, settings: dict,
                     metrics: dict, outcome: dict | None = None, inputs: list | None = None,
                     cost: dict | None = None) -> Path:
    """Write ``directory/README.md``: hub-style metadata (``base_model``, ``tags``), the task, the settings,
    the run's outcome (:func:`obliviate.eval.outcome.unlearn_outcome`: also ``obliviate.outcome`` in the
    metadata; not a verdict on removal, which only ``obliviate attack`` and ``obliviate compare`` give), a
    table of the scalar metrics and the data files the run read, each with its SHA-256
    (:func:`~obliviate.runs.results.run_inputs` of ``task``, a :class:`~obliviate.tasks.Task` or its name, and
    ``inputs``; also ``obliviate.inputs`` in the metadata) and, given the run's ``cost``
    (:class:`~obliviate.runs.cost.CostRecord`'s), what making the model spent (``obliviate.cost`` in the
    metadata: its total and wall seconds). ``method`` ``finetune``: the card of a model taught the task
    (``obliviate finetune``), which says so; any other: a model unlearned with that method.

    ``base_model`` is recorded absolute where it is a local path (:func:`~obliviate.utils.recorded_path`; a
    hub id as it is). The names (task, method, base model, metric, file) are data, often from a user's spec:
    the Markdown shows them escaped (:func:`~obliviate.runs.report.md_escape`), never as HTML, links or
    images; the YAML metadata holds them as YAML strings."""
    directory = Path(directory)
    name = getattr(task, "name", task)
    files = run_inputs(task if hasattr(task, "meta") else None, inputs)
    base_model = recorded_path(base_model) if base_model else None
    meta = {"library_name": "transformers", "tags": ["unlearning", "obliviate", method],
            "obliviate": {"task": name,
            "method": method}}
    if base_model:
        meta["base_model"] = base_model
    if outcome:
        meta["obliviate"]["outcome"] = outcome["outcome"]
    meta["obliviate"]["inputs"] = files
    if cost:
        meta["obliviate"]["cost"] = {**cost["total"], "wall_seconds": cost["wall_seconds"]}
    rows = [{"metric": k, "value": v} for k, v in metrics.items() if isinstance(v, float)]
    start = f", starting from {md_code(base_model)}." if base_model else "."
    made = (f"Fine-tuned with obliviate on task {md_code(name)}: "
            f"taught its training data{start}" if method == FINETUNE
            else f"Unlearned with obliviate, method {md_code(method)} on task {md_code(name)}{start}")
    title = f"# {'fine-tuned' if method == FINETUNE else md_escape(method)} on {md_escape(name)}"
    data = [f"- {md_code(f['path'])}, SHA-256 "
            f"{md_code(f['sha256'])}" for f in files] or ["none (no file was read)"]
    text = "\n".join([
        "---", yaml.safe_dump(meta, sort_keys=False).strip(), "---", "",
        title, "", made, "",
        "## Settings", "", "```json", json.dumps(settings, indent=1, default=str), "```", "",
        *(["## Outcome", "", md_escape(outcome["line"]), ""] if outcome else []),
        "## Results", "", markdown_table(rows, ["metric", "value"], fmt="{:.4f}"), "",
        "## Data", "", *data, "",
        *(["## Cost", "", md_escape(cost_line(cost)), ""] if cost else []),
    ])
    atomic_write_text(directory / "README.md", text)
    return directory / "README.md"


def read_model_card(directory: str | Path) -> dict:
    """The YAML metadata of ``directory/README.md`` as :func:`write_model_card` writes it ({} when there is
    none)."""
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


def card_base_model(directory: str | Path) -> str | None:
    """The model ``directory``'s card names as ``base_model``, as this process can open it: an absolute path
    as it is; a relative one (a card written before paths were recorded absolute holds the path as its command
    was given it) resolved against the card's directory where it is there, else against the working directory
    where it is there; anything else as written (a hub id, or a local path that is gone:
    :func:`check_card_base` says which). None when the card names none."""
    value = read_model_card(directory).get("base_model")
    if not value:
        return None
    given = os.path.expanduser(str(value))
    if os.path.isabs(given):
        return given
    for root in (Path(directory), Path.cwd()):
        if os.path.lexists(root / given):
            return os.path.abspath(root / given)
    return str(value)


def check_card_base(directory: str | Path, allow_hub: bool = False, *, model: bool = True) -> str:
    """The model ``directory``'s card names as ``base_model`` (:func:`card_base_model`), checked without
    loading it: a local model directory (:func:`~obliviate.models.load.check_model_dir`; without ``model``, a
    directory is enough: one whose card is followed), or a hub id in the local hub cache or, with
    ``allow_hub``, on the hub. Anything else is one :class:`ConfigError` line naming the card (its
    ``README.md``) and the model, and saying to give the model before it was taught the task
    (``--base-untrained DIR``): before any run directory is made or model loaded."""
    card = Path(directory) / "README.md"
    value = read_model_card(directory).get("base_model")
    name = card_base_model(directory)
    hint = setting("base_untrained=DIR", "--base-untrained DIR")
    if name is None:
        raise ConfigError(f"the model card {card} names no base_model: give {hint}")
    if os.path.lexists(name) and not model and os.path.isdir(name):
        return name
    if os.path.lexists(name):
        try:
            check_model_dir(name)
        except ModelError as e:
            raise ConfigError(f"the model card {card} names base_model {str(value)!r}: {e}; give {hint} (the "
                              "model before it was taught the task)") from None
        return name
    hub = could_be_hub_id(name) and not looks_like_path(name)
    if hub:
        missing = hub_model_missing(name, allow_hub)
        if missing is None:
            return name
        why = ("is no local directory (beside the card, or in the "
               f"working directory {os.getcwd()}) and {missing}")
        fetch = setting("allow_hub=True", "--allow-hub")
        extra = f", or {fetch} to fetch it from the hub" if not allow_hub and fetch else ""
    else:
        why = ("does not exist" if os.path.isabs(os.path.expanduser(str(value))) else
               f"is neither beside the card nor in the working directory {os.getcwd()}")
        extra = ""
    raise ConfigError(f"the model card {card} names base_model {str(value)!r}, which {why}: give {hint} (the "
                      f"model before it was taught the task){extra}")


def finetune_card(model: str | Path, max_depth: int = 4, *, strict: bool = False,
                  allow_hub: bool = False) -> Path | None:
    """The directory of the first ``obliviate finetune`` model card met following ``base_model`` through the
    model cards from ``model`` (an unlearned model's card names the fine-tuned one, :func:`card_base_model`);
    None when no card on the way is one, or a ``base_model`` on the way is no local directory (a hub model has
    no card here: the chain ends there). ``strict``: a ``base_model`` on the way that is a local path that
    cannot be found is one line naming the card that names it (:func:`check_card_base`). The directory is
    absolute."""
    here = Path(os.path.abspath(model))
    for _ in range(max_depth):
        meta = read_model_card(here)
        if not meta.get("base_model"):
            return None
        if (meta.get("obliviate") or {}).get("method") == FINETUNE:
            return here
        nxt = card_base_model(here)
        # a hub model (no card here) ends the chain; a path that is gone is said, if strict
        if not os.path.isdir(nxt):
            if strict and (looks_like_path(nxt) or not could_be_hub_id(nxt)):
                check_card_base(here, allow_hub, model=False)
            return None
        here = Path(nxt)
    return None


def untaught_model(model: str | Path, max_depth: int = 4, allow_hub: bool = False) -> str | None:
    """The model before it was taught the task: following ``base_model`` through the model cards from
    ``model`` (an unlearned model's card names the fine-tuned one, whose card names its input), the input of
    the first ``obliviate finetune`` card, checked (:func:`check_card_base`: a missing one fails in one line
    naming the card, before anything is loaded); None when no card on the way says so."""
    card = finetune_card(model, max_depth, strict=True, allow_hub=allow_hub)
    return None if card is None else check_card_base(card, allow_hub)


def card_settings(directory: str | Path) -> dict:
    """The settings :func:`write_model_card` recorded in ``directory/README.md`` (its ``## Settings`` JSON
    block; for ``obliviate finetune``, the fine-tuning config with the epochs, lr, steps and preset used); {}
    without."""
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
