"""Issue #56, item 5: every attack asked for that does not run is named on one line with its reason, before any model
is loaded, and recorded in results.json (``attacks_skipped``)."""

from __future__ import annotations

import json
import logging

from obliviate.models.builders import tiny_llama
from obliviate.models.tokenizer import train_tokenizer
from obliviate.pipelines.attack import attack_settings, run_attack
from obliviate.tasks.files import task_from_files


def test_attacks_without_their_data_are_named_before_any_model_and_recorded(tmp_path, caplog):
    for name in ("forget", "retain"):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps({"question": f"What is {name} {i}?",
                                                                    "answer": f"a{i}"}) + "\n" for i in range(6)))
    task = task_from_files([str(tmp_path / "forget.jsonl")], [str(tmp_path / "retain.jsonl")])
    tok = train_tokenizer([f"Question: What is thing {i}?\nAnswer: value{i}." for i in range(20)] * 5, vocab_size=300)
    model = tiny_llama(vocab_size=len(tok), n_layer=2, d_model=32, n_head=2, seed=0)
    said_before_load = []

    def load(name):
        said_before_load.extend(r.getMessage() for r in caplog.records)
        return model, tok

    cfg = attack_settings(0, attacks="quantize,mia,relearn,probe")
    with caplog.at_level(logging.INFO, logger="obliviate"):
        res = run_attack(task, cfg, tmp_path / "out", model="m", load=load)
    skipped = {"mia": "needs a holdout set", "relearn": "needs a related corpus", "probe": "needs forget MCQs"}
    for name, why in skipped.items():
        line = next(x for x in said_before_load if x.startswith(f"attack {name!r} not run: "))
        assert why in line and "lacks" in line
    assert res["metrics"]["attacks_run"] == ["quantize"]
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(written["attacks_skipped"]) == set(skipped) == set(res["metrics"]["attacks_skipped"])
    assert "attacks_skipped" not in written["metrics"]  # one place in results.json
    assert all(why in written["attacks_skipped"][n] for n, why in skipped.items())
