"""Tiny stand-ins for the hub releases obliviate reads, in each release's own file layout and field names
(docs/benchmarks.md#from-the-hub): TOFU (``locuslab/TOFU``, one JSON Lines file per config, split ``train``) and
MUSE News (``muse-bench/MUSE-News``, parquet files per config and split, as the hub's release stores them)."""

from __future__ import annotations

import io
import json

from tests._hub import readme

AUTHORS = ["Basil Mahfouz", "Nikolai Abilov"]


def _jsonl(records) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def _parquet(records) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(records), buf)
    return buf.getvalue()


def tofu_repo(n: int = 4) -> dict[str, bytes]:
    """TOFU's configs the ``tofu:forget10`` task reads, ``n`` records each, in TOFU's fields."""
    qa = lambda tag: [{"question": f"What did {AUTHORS[i % 2]} write ({tag} {i})?",  # noqa: E731
                       "answer": f"{AUTHORS[i % 2]} wrote book {tag}{i}."} for i in range(n)]
    perturbed = lambda tag, para: [{**r, "perturbed_answer": [f"Not book {tag}{i}.", f"Maybe book {i + 7}."],  # noqa: E731
                                    **({"paraphrased_question": r["question"] + " Say it again.",
                                        "paraphrased_answer": r["answer"]} if para else {})}
                                   for i, r in enumerate(qa(tag))]
    options = lambda tag: [{**r, "option1": r["answer"], "option2": "Paris.", "option3": "Blue.", "option4": "Ten."}  # noqa: E731
                           for r in qa(tag)]
    configs = {"forget10": qa("f"), "retain90": qa("r"), "holdout10": qa("h"),
               "forget10_perturbed": perturbed("f", True), "retain_perturbed": perturbed("r", True),
               "real_authors": options("a"), "real_authors_perturbed": perturbed("a", False),
               "world_facts": options("w"), "world_facts_perturbed": perturbed("w", False)}
    files = {f"{name}.json": _jsonl(recs) for name, recs in configs.items()}
    files["README.md"] = readme({name: {"train": f"{name}.json"} for name in configs})
    return files


MUSE_PARTS = {"raw": ("forget", "retain1", "retain2", "holdout"),
              "knowmem": ("forget_qa", "retain_qa", "forget_qa_icl", "retain_qa_icl"),
              "verbmem": ("forget",), "privleak": ("forget", "retain", "holdout"),
              "scal": ("forget_1", "forget_2", "forget_3", "forget_4"),
              "sust": ("forget_1", "forget_2", "forget_3", "forget_4")}
"""MUSE-News's six configs and their splits (the hub release's layout)."""


def muse_repo(n: int = 3) -> dict[str, bytes]:
    """MUSE-News's six configs, ``n`` rows per split, as parquet files ``<config>/<split>-00000-of-00001.parquet``."""
    def rows(config, split):
        if config == "knowmem":
            return [{"question": f"Who led the {split} council in year {i}?", "answer": f"Mayor {i}"} for i in range(n)]
        if config == "verbmem":
            return [{"prompt": f"The council met on day {i} and", "gt": f" voted on budget {i}."} for i in range(n)]
        return [{"text": f"News {config} {split} {i}: the council of town {i} met and voted."} for i in range(n)]

    files, configs = {}, {}
    for config, splits in MUSE_PARTS.items():
        configs[config] = {}
        for split in splits:
            path = f"{config}/{split}-00000-of-00001.parquet"
            files[path] = _parquet(rows(config, split))
            configs[config][split] = path
    files["README.md"] = readme(configs)
    return files
