"""``obliviate compare --task ember:<concept>``: every method on a tiny model first fine-tuned on the concept."""

from __future__ import annotations

import json

import pytest

from tests._run_dirs import tiny_model_dir

from obliviate.cli.main import main
from obliviate.methods import METHODS, method_names
from obliviate.utils import data_dir


@pytest.mark.slow  # every method and every default attack on an ember concept: 73 s of the default suite
def test_compare_every_method_on_an_ember_concept(tmp_path):
    if not (data_dir() / "ember" / "mc_questions.json").exists():
        pytest.skip("EMBER data not present")
    out = tmp_path / "cmp"
    # every method that runs on documents (none of the IdK ones) and trains: runs.<m> of a method the compare
    # does not run is refused
    steps = [f"runs.{m}.steps=2" for m in method_names()
             if METHODS[m].kind != "edit" and not getattr(METHODS[m], "needs_idk", False)]
    rc = main(["compare", "--task", "ember:harry_potter", "--limit", "6", "--out", str(out), "--no-progress",
               "finetune.epochs=2", "tiny.d_model=32", "tiny.vocab_size=400", "attacks.relearn.steps=2",
               "attacks.relearn.eval_every=1", "attacks.lr_grid=[1e-3]", "attacks.lora=false", *steps])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    # every method runs on documents (none of them needs QA pairs: EMBER's forget data are sentences)
    expected = {m for m in method_names() if not getattr(METHODS[m], "needs_idk", False)}
    assert set(res["metrics"]) == expected | {"base", "oracle", "positive_control", "positive_control_smallnorm"}
    assert set(res["robustness"]["verdicts"]) == expected
    assert res["task"]["name"] == "ember:harry_potter" and res["task"]["forget"] == "6 documents"
    for name in expected:
        assert "forget_score" in res["metrics"][name] and "relearn_acc" in res["metrics"][name], name
    assert (out / "report.html").exists() and (out / "plots" / "forget_keep.png").exists()
    assert set(res["model_dirs"]) == expected | {"base", "oracle", "positive_control", "positive_control_smallnorm"}


def test_compare_oracle_needs_a_task_or_model(tmp_path, capsys):
    assert main(["compare", "--out", str(tmp_path / "c"), "--oracle", str(tiny_model_dir(tmp_path))]) == 2
    assert "--oracle needs --model" in capsys.readouterr().err


def test_an_oracle_with_another_vocabulary_is_refused(tmp_path, capsys):
    """``--oracle DIR`` is scored on the base model's token ids: an oracle whose tokenizer differs is one line."""
    from obliviate.models import save_model, tiny_llama, train_tokenizer

    dirs = {}
    for name, words in (("base", "alpha beta gamma delta"), ("oracle", "one two three four five six")):
        tok = train_tokenizer([f"{words} {i}" for i in range(50)], vocab_size=300)
        d = tmp_path / name
        save_model(tiny_llama(len(tok), n_layer=1, d_model=16, n_head=2), d)
        tok.save_pretrained(str(d))
        dirs[name] = d
    forget, retain = tmp_path / "f.jsonl", tmp_path / "r.jsonl"
    forget.write_text("".join(json.dumps({"question": f"q{i}?", "answer": f"a{i}"}) + "\n" for i in range(4)))
    retain.write_text("".join(json.dumps({"question": f"r{i}?", "answer": f"b{i}"}) + "\n" for i in range(4)))
    capsys.readouterr()  # the fixtures' own output
    rc = main(["compare", "--model", str(dirs["base"]), "--oracle", str(dirs["oracle"]), "--forget", str(forget),
               "--retain", str(retain), "--out", str(tmp_path / "c"), "--no-progress", "methods=[npo]",
               "runs.npo.train.steps=1", "attacks.relearn.steps=1", "attacks.lr_grid=[1e-3]", "attacks.lora=false"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("obliviate:")]
    assert rc == 2 and len(err) == 1 and "another tokenizer than the base model" in err[0], err
