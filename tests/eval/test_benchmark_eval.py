"""Benchmark tasks (obliviate.tasks.benchmark) evaluated by evaluate_task (obliviate.eval.suite.evaluate_benchmark),
and the ``obliviate eval --benchmark/--data`` path."""

import argparse
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from obliviate.errors import ConfigError, DataError
from obliviate.eval.suite import evaluate_benchmark
from obliviate.utils import data_dir

BIAS = 5.0


class FixedLM(torch.nn.Module):
    """Same next-token logits at every position: ``BIAS`` on one token, 0 elsewhere."""

    def __init__(self, vocab_size: int, favourite: int):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.bias = torch.zeros(vocab_size, dtype=torch.float64)  # float64: the hand formulas below are float64
        self.bias[favourite] = BIAS
        self.config = SimpleNamespace(max_position_embeddings=512)

    def forward(self, input_ids, attention_mask=None, **kw):
        B, T = input_ids.shape
        logits = self.bias.expand(B, T, -1) + 0 * self.w
        return SimpleNamespace(logits=logits, past_key_values=None)


def single_token(tok, text):
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        pytest.skip(f"{text!r} is not one token in the tiny tokenizer")
    return ids[0]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


MCQ_ROWS = [
    {"q": "Which one?", "opts": ["w", "x", "y", "z"], "label": 1},
    {"q": "And now?", "opts": ["w", "x", "y", "z"], "label": 0},
    {"q": "Again?", "opts": ["w", "x", "y", "z"], "label": "B"},
    {"q": "Last?", "opts": ["w", "x", "y"], "label": 2},
]


def test_mcq_accuracy_on_user_file(tiny_tokenizer, tmp_path):
    # The model always prefers the letter B, so it is right on rows 0 and 2 only: accuracy 2/4.
    tok = tiny_tokenizer
    letter_b = tok(" B", add_special_tokens=False)["input_ids"][-1]
    model = FixedLM(len(tok), letter_b)
    path = write_jsonl(tmp_path / "mine.jsonl", MCQ_ROWS)
    res = evaluate_benchmark(model, tok, data=path, kind="mcq", mapping="question=q,choices=opts,answer_index=label")
    assert set(res["_per_item"]) == {"utility_mine"} and len(res["_per_item"]["utility_mine"]["correct"]) == 4
    assert res["utility_mine_acc"] == pytest.approx(0.5) and res["utility_score"] == res["utility_mine_acc"]
    assert res["utility_mine_chance"] == pytest.approx((3 * 0.25 + 1 / 3) / 4)
    assert res["_per_item"]["utility_mine"]["predictions"] == [1, 1, 1, 1]
    res = evaluate_benchmark(model, tok, data=path, kind="mcq", mapping="question=q,choices=opts,answer_index=label",
                             limit=2)
    assert len(res["_per_item"]["utility_mine"]["correct"]) == 2 and res["utility_mine_acc"] == pytest.approx(0.5)


def test_qa_metrics_on_user_file(tiny_tokenizer, tmp_path):
    # The model always generates " glimmerfin": with one new token the prediction is "glimmerfin".
    tok = tiny_tokenizer
    fav = single_token(tok, " glimmerfin")
    model = FixedLM(len(tok), fav)
    rows = [{"prompt": "What glows?", "target": "glimmerfin"},
            {"prompt": "What glows brightly?", "target": "the glimmerfin"},
            {"prompt": "What does it eat?", "target": "moss"}]
    path = write_jsonl(tmp_path / "qa.jsonl", rows)
    res = evaluate_benchmark(model, tok, data=path, kind="qa", mapping="question=prompt,answer=target",
                             max_new_tokens=1)
    assert res["_per_item"]["utility_qa"]["predictions"] == [" glimmerfin"] * 3
    assert res["utility_qa_em"] == pytest.approx(1 / 3)
    assert res["utility_qa_rouge_l"] == pytest.approx((1 + 0.5 + 0) / 3)  # LCS / reference words
    # P~(a|q) = exp(mean log p over the answer tokens and eos); log p = BIAS - logZ on "glimmerfin", -logZ elsewhere
    log_z = math.log(math.exp(BIAS) + len(tok) - 1)

    def p_tilde(answer):
        ids = tok(" " + answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        return math.exp(np.mean([(BIAS if i == fav else 0.0) - log_z for i in ids]))

    assert res["utility_qa_prob"] == pytest.approx(np.mean([p_tilde(r["target"]) for r in rows]), rel=1e-5)
    assert "qa_option_prob" not in res  # the items have no options


def test_qa_options_probability_is_normalised(tiny_tokenizer, tmp_path):
    # One question, options "glimmerfin" (correct) and "moss": P = p(glimmerfin) / (p(glimmerfin) + p(moss)).
    tok = tiny_tokenizer
    fav = single_token(tok, " glimmerfin")
    model = FixedLM(len(tok), fav)
    path = write_jsonl(tmp_path / "opts.jsonl",
                       [{"question": "What?", "answer": "glimmerfin", "options": ["moss", "glimmerfin"]}])
    res = evaluate_benchmark(model, tok, data=path, kind="qa", max_new_tokens=1)
    log_z = math.log(math.exp(BIAS) + len(tok) - 1)
    n_moss = len(tok(" moss", add_special_tokens=False)["input_ids"]) + 1
    p_fav = math.exp((BIAS - 2 * log_z) / 2)
    p_moss = math.exp(-log_z)  # every token of " moss" + eos has log p = -logZ, whatever n_moss
    assert n_moss >= 2
    assert res["utility_opts_option_prob"] == pytest.approx(p_fav / (p_fav + p_moss), rel=1e-5)
    assert res["utility_opts_prob"] == pytest.approx(p_fav, rel=1e-5)


def test_text_benchmark_points_to_toxicity(tiny_model, tiny_tokenizer):
    with pytest.raises(ConfigError, match="toxicity"):
        evaluate_benchmark(tiny_model, tiny_tokenizer, "rtp_insult")


def test_bad_requests(tiny_model, tiny_tokenizer, tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"question": "q", "answer": "a"}])
    with pytest.raises(DataError, match="^n.jsonl line 1: cannot tell whether it holds QA pairs, MCQs or texts"):
        evaluate_benchmark(tiny_model, tiny_tokenizer, data=write_jsonl(tmp_path / "n.jsonl", [{"id": 1}]))
    with pytest.raises(ConfigError, match="text"):
        evaluate_benchmark(tiny_model, tiny_tokenizer, data=path, kind="text")
    with pytest.raises(DataError, match="unknown benchmark"):
        evaluate_benchmark(tiny_model, tiny_tokenizer, "no_such_benchmark")
    with pytest.raises(ConfigError, match="limit"):
        evaluate_benchmark(tiny_model, tiny_tokenizer, data=path, kind="qa", limit=0)
    with pytest.raises(DataError, match="x.jsonl line 1: missing field 'target'"):
        evaluate_benchmark(tiny_model, tiny_tokenizer, data=path, kind="qa", mapping="answer=target")


# ------------------------------------------------------------------ CLI path

def eval_parser():
    from obliviate.cli.args import add_common
    from obliviate.cli.eval import add_benchmark_args

    p = argparse.ArgumentParser()
    add_common(p)  # the same options as `obliviate eval`
    p.add_argument("--model", required=True)
    p.add_argument("--tokenizer")
    p.add_argument("--pad-policy", choices=["error", "eos"], default="error")
    add_benchmark_args(p)
    return p


@pytest.fixture
def saved_model(tiny_model, tiny_tokenizer, tmp_path):
    from obliviate.models.load import save_model

    d = tmp_path / "model"
    save_model(tiny_model, str(d))
    tiny_tokenizer.save_pretrained(str(d))
    return d


def test_cli_without_benchmark_does_nothing(saved_model, tmp_path):
    from obliviate.cli.eval import run_benchmark_eval

    args = eval_parser().parse_args(["--model", str(saved_model), "--out", str(tmp_path / "o")])
    assert run_benchmark_eval(args) is False
    assert not (tmp_path / "o").exists()
    args = eval_parser().parse_args(["--model", str(saved_model), "--out", str(tmp_path / "o"), "--kind", "qa"])
    with pytest.raises(ConfigError, match="--kind needs --data"):
        run_benchmark_eval(args)


def test_cli_user_mcq_file_writes_results(saved_model, tiny_model, tiny_tokenizer, tmp_path):
    from obliviate.cli.eval import run_benchmark_eval
    from obliviate.eval import mcq_accuracy
    from obliviate.runs.results import read_results

    path = write_jsonl(tmp_path / "mine.jsonl", MCQ_ROWS)
    out = tmp_path / "run"
    args = eval_parser().parse_args(["--model", str(saved_model), "--out", str(out), "--data", str(path),
                                     "--kind", "mcq", "--mapping", "question=q,choices=opts,answer_index=label",
                                     "--benchmark", "my_mcq"])
    assert run_benchmark_eval(args) is True
    res = read_results(out)
    assert (res["status"] == "complete" and set(res["metrics"]) == {"model"}
            and res["task"]["name"] == "benchmark:my_mcq")
    # the saved-and-reloaded model scores exactly as the in-memory one
    mcqs = [{"question": r["q"], "choices": r["opts"], "answer_index": i}
            for r, i in zip(MCQ_ROWS, [1, 0, 1, 2])]
    expected = mcq_accuracy(tiny_model, tiny_tokenizer, mcqs, style="letters")
    assert res["metrics"]["model"]["my_mcq_acc"] == pytest.approx(expected["accuracy"])
    assert res["task"]["evals"]["my_mcq"]["n"] == 4
    preds = json.loads((out / "predictions.json").read_text())
    assert [r["prediction_index"] for r in preds["my_mcq"]] == expected["predictions"]
    assert [r["score"] for r in preds["my_mcq"]] == [float(c) for c in expected["correct"]]
    first = preds["my_mcq"][0]  # the item, its gold and the model's answer, as lm-eval's --log_samples keeps them
    assert first["input"] == "Which one?" and first["choices"] == ["w", "x", "y", "z"]
    assert first["gold"] == "x" and first["gold_index"] == 1
    assert first["prediction"] == first["choices"][expected["predictions"][0]]


def test_cli_rejects_world_overrides(saved_model, tmp_path):
    from obliviate.cli.eval import run_benchmark_eval

    args = eval_parser().parse_args(["--model", str(saved_model), "--out", str(tmp_path / "o"),
                                     "--benchmark", "wmdp_bio", "n_facts=3"])
    with pytest.raises(ConfigError, match="overrides"):
        run_benchmark_eval(args)


def test_cli_real_mmlu_subset(saved_model, tmp_path):
    from obliviate.cli.eval import run_benchmark_eval
    from obliviate.runs.results import read_results

    if not (data_dir() / "mmlu" / "test" / "anatomy_test.csv").exists():
        pytest.skip("MMLU data not present")
    out = tmp_path / "run"
    args = eval_parser().parse_args(["--model", str(saved_model), "--out", str(out), "--benchmark", "mmlu:anatomy",
                                     "--limit", "5"])
    assert run_benchmark_eval(args)
    res = read_results(out)
    m = res["metrics"]["model"]
    assert res["task"]["evals"]["mmlu_anatomy"]["n"] == 5
    assert m["mmlu_anatomy_acc"] in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0) and m["mmlu_anatomy_chance"] == pytest.approx(0.25)
