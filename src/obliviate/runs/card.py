"""A Hugging Face model card (``README.md`` with YAML metadata) for every model obliviate saves."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from obliviate.runs.results import atomic_write_text


def write_model_card(directory: str | Path, *, base_model: str | None, task: str, method: str, settings: dict,
                     metrics: dict) -> Path:
    """Write ``directory/README.md``: hub-style metadata (``base_model``, ``tags``), the task, the settings
    and a table of the scalar metrics."""
    directory = Path(directory)
    meta = {"library_name": "transformers", "tags": ["unlearning", "obliviate", method], "obliviate": {"task": task,
            "method": method}}
    if base_model:
        meta["base_model"] = str(base_model)
    rows = [f"| {k} | {v:.4f} |" for k, v in metrics.items() if isinstance(v, float)]
    text = "\n".join([
        "---", yaml.safe_dump(meta, sort_keys=False).strip(), "---", "",
        f"# {method} on {task}", "",
        f"Unlearned with obliviate, method `{method}` on task `{task}`"
        + (f", starting from `{base_model}`." if base_model else "."), "",
        "## Settings", "", "```json", json.dumps(settings, indent=1, default=str), "```", "",
        "## Results", "", "| metric | value |", "|---|---|", *rows, "",
    ])
    atomic_write_text(directory / "README.md", text)
    return directory / "README.md"
