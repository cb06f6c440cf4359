"""Sequential unlearning (issue #31, item 5): ``obliviate unlearn --requests A,B,C`` applies the requests in order
on the same model, evaluates every metric and the cheap attacks after each, reports the curve, and resumes at a
request boundary after a kill with the same numbers as an uninterrupted run."""

import json

import pytest

import obliviate.cli.inputs as unlearn_cli  # checked_run loads the model there
from _cli_errors import one_error
from obliviate.cli.main import main
from obliviate.pipelines import sequential
from obliviate.pipelines import unlearn as unlearn_pipeline
from obliviate.runs.card import read_model_card
from tasks._userdata import save_tiny_model, write_user_files


class Killed(Exception):
    """Raised by a patched unlearning run: the process was killed there."""


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    root = tmp_path_factory.mktemp("sequential")
    paths = write_user_files(root / "data", n_forget=12, n_retain=8)
    save_tiny_model(root / "model", "llama", paths["texts"], d_model=32)
    lines = paths["forget"].read_text().splitlines()
    reqs = []
    for k in range(3):  # three requests of four facts each
        p = root / "data" / f"request_{'ABC'[k]}.jsonl"
        p.write_text("\n".join(lines[4 * k:4 * k + 4]) + "\n")
        reqs.append(p)
    return {**paths, "model": root / "model", "requests": reqs, "root": root}


def _run(user, out, *extra, requests=None):
    reqs = ",".join(str(p) for p in (requests or user["requests"]))
    return main(["unlearn", "--out", str(out), "--base", str(user["model"]), "--method", "graddiff",
                 "--no-progress", "--requests", reqs, "--retain", str(user["retain_qa"]),
                 "unlearn.train.steps=3", "eval.batch_size=16", *extra])


def _numbers(out):
    res = json.loads((out / "results.json").read_text())
    return [{k: v for k, v in row.items() if isinstance(v, (int, float))} for row in res["sequential"]["after_each"]]


@pytest.fixture(scope="module")
def whole(user, tmp_path_factory):
    """An uninterrupted run over the three requests."""
    out = tmp_path_factory.mktemp("whole") / "run"
    assert _run(user, out) == 0
    return out


def test_three_requests_report_a_curve(whole, user):
    res = json.loads((whole / "results.json").read_text())
    seq = res["sequential"]
    assert [r["file"] for r in seq["requests"]] == ["request_A.jsonl", "request_B.jsonl", "request_C.jsonl"]
    points = seq["curve"]
    assert [p["request"] for p in points] == [0, 1, 2, 3]  # the base model, then after each request
    for k in (1, 2, 3):  # each request's own forget set is scored at every point, so are the task's role scores
        assert all(isinstance(p[f"request{k}_qa_em"], float) for p in points)
    assert all(isinstance(p["forget_score"], float) and isinstance(p["retain_score"], float) for p in points)
    rows = seq["after_each"]
    assert [r["forget_items"] for r in rows] == [4, 4, 4]
    for r in rows:  # the cheap attacks ran after each request, on this task's data
        assert {"quantize", "logit_lens", "in_context"} <= set(r["attacks_run"]), r["attacks_run"]
    # the model moved at each request: the answer probability of request 1's facts differs between points
    probs = [p.get("request1_qa_prob", r.get("request1_qa_prob")) for p, r in zip(points[1:], rows)]
    assert len({round(x, 9) for x in probs}) == 3, probs
    assert res["metrics"]["graddiff"]["forget_score"] == rows[-1]["forget_score"]
    report = (whole / "report.md").read_text()
    assert "# Sequential unlearning: graddiff" in report and "![metrics after each request](sequential.png)" in report
    assert "| request | file | forget_score |" in report.replace("\\_", "_")
    assert (whole / "sequential.png").stat().st_size > 0 and (whole / "model" / "config.json").exists()


def test_the_sequential_run_records_its_cost_as_unlearn_does(whole):
    cost = json.loads((whole / "results.json").read_text())["cost"]
    assert set(cost["stages"]) == {"evaluate:before", *[f"{s}:request{k}" for k in (1, 2, 3)
                                                        for s in ("unlearn", "evaluate")]}
    unlearned = [cost["stages"][f"unlearn:request{k}"] for k in (1, 2, 3)]
    assert all(u["backwards"] > 0 and u["tokens"] > 0 for u in unlearned)
    assert len({u["backwards"] for u in unlearned}) == 1  # the same steps on each request
    assert all(cost["stages"][f"evaluate:request{k}"]["forwards"] > 0 for k in (1, 2, 3))
    assert cost["total"]["tokens"] == sum(s["tokens"] for s in cost["stages"].values())
    assert cost["controls"] is None and cost["wall_seconds"] >= cost["total"]["seconds"] > 0
    card = read_model_card(whole / "model")["obliviate"]["cost"]
    assert card["tokens"] == cost["total"]["tokens"] and "## Cost" in (whole / "model" / "README.md").read_text()


def test_resumes_at_a_request_boundary_with_the_same_numbers(whole, user, tmp_path, monkeypatch, capsys):
    out = tmp_path / "killed"
    calls, real = [], sequential.unlearn

    def kill_at_third(m, t, forget, *a, **k):
        calls.append(list(forget.qa))
        if len(calls) == 3:
            raise Killed
        return real(m, t, forget, *a, **k)

    monkeypatch.setattr(sequential, "unlearn", kill_at_third)
    with pytest.raises(Killed):
        _run(user, out)
    assert (out / "sequential" / "request_2.json").exists() and not (out / "results.json").exists()
    assert not (out / "sequential" / "request_3.json").exists()
    kept = (out / "sequential" / "request_2.json").stat().st_mtime_ns
    calls.clear()
    capsys.readouterr()
    assert _run(user, out) == 0
    assert len(calls) == 1 and calls[0] == [tuple(json.loads(l).values()) for l in  # request 3 only
                                            user["requests"][2].read_text().splitlines()]
    printed = capsys.readouterr()
    assert "resuming after request 2 of 3" in printed.err
    lines = printed.out.strip().splitlines()
    assert lines[-2].startswith("cost: ") and lines[-1].startswith("outcome: ")  # as unlearn's: the outcome last
    spent = json.loads((out / "results.json").read_text())["cost"]["stages"]
    assert "unlearn:request3" in spent and "unlearn:request1" not in spent  # what this run spent: request 3 only
    assert (out / "sequential" / "request_2.json").stat().st_mtime_ns == kept
    assert _numbers(out) == _numbers(whole)  # exactly: same floats after the JSON round trip


def test_other_requests_start_afresh_with_one_line(whole, user, tmp_path, monkeypatch, capsys):
    out = tmp_path / "again"
    import shutil

    shutil.copytree(whole, out)
    calls, real = [], sequential.unlearn
    monkeypatch.setattr(sequential, "unlearn", lambda m, t, f, *a, **k: calls.append(1) or real(m, t, f, *a, **k))
    capsys.readouterr()
    assert _run(user, out, requests=user["requests"][:2]) == 0
    err = [l for l in capsys.readouterr().err.splitlines() if "starting afresh" in l]
    assert len(err) == 1 and "other request files" in err[0], err
    assert len(calls) == 2
    calls.clear()
    assert _run(user, out, "unlearn.train.steps=2", requests=user["requests"][:2]) == 0
    err = [l for l in capsys.readouterr().err.splitlines() if "starting afresh" in l]
    assert len(err) == 1 and "other settings (config" in err[0], err
    assert len(calls) == 2


@pytest.fixture
def no_model(monkeypatch):
    def refuse(*a, **kw):
        raise AssertionError("the model was loaded before the error")

    monkeypatch.setattr(unlearn_cli, "load_model_args", refuse)
    monkeypatch.setattr(sequential, "prepare_out_dir", refuse)
    monkeypatch.setattr(unlearn_pipeline, "prepare_out_dir", refuse)


def test_bad_requests_are_one_line_before_the_model(user, tmp_path, capsys, no_model):
    a, b, _ = user["requests"]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    copy = tmp_path / "copy_of_A.jsonl"
    copy.write_bytes(a.read_bytes())
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"foo": "Who?", "bar": "me"}\n')
    cases = [([a, tmp_path / "missing.jsonl"], [], "request file not found: "),
             ([a, empty], [], "request 2 ("),
             ([a, b, a], [], "is named twice"),
             ([a, copy], [], "holds the same data as"),
             ([a, b], ["--forget", str(user["forget"])], "conflicts with --requests"),
             ([a, b], ["--tune"], "--tune and --requests"),
             ([a, odd], [], "--requests: odd.jsonl line 1: cannot tell whether it holds QA pairs, MCQs or texts "
                            "from its fields (foo, bar); name them with "
                            "--mapping odd.jsonl=question=FIELD,answer=FIELD"),
             ([a, odd], ["--mapping", "odd.jsonl=question=foo,answer=bar", "--mapping", "x.jsonl=question=q"],
              "'x.jsonl' is neither a file given")]
    for reqs, extra, want in cases:
        assert _run(user, tmp_path / "o", *extra, requests=reqs) == 2
        line = one_error(capsys)
        assert want in line, line
    assert "no records" in _err_of(user, tmp_path, [a, empty], capsys)
    assert main(["unlearn", "--out", str(tmp_path / "o"), "--base", str(user["model"]), "--method", "graddiff",
                 "--requests", f"{a},,{b}", "--retain", str(user["retain_qa"])]) == 2
    assert "an empty entry between commas" in one_error(capsys)
    assert not (tmp_path / "o").exists()


def _err_of(user, tmp_path, reqs, capsys):
    assert _run(user, tmp_path / "o", requests=reqs) == 2
    return one_error(capsys)


def test_finished_requests_resume_from_the_last_saved_model():
    """The resume point MUSE's sustainability folds and unlearn --requests share: the longest run of kept parts,
    cut back to the last request whose model was saved; only that model is loaded."""
    from obliviate.pipelines.sequential import finished_requests

    folds = [{"fold": k, "docs": [k]} for k in (1, 2, 3, 4)]
    parts = {1: {"m": 1}, 2: {"m": 2}, 4: {"m": 4}}  # request 3's part is missing: 4 cannot be used
    loads = []
    done = finished_requests(folds, parts.get, lambda k: k in (1, 2), lambda k: loads.append(k) or f"model{k}")
    assert done == {1: (None, {"m": 1}), 2: ("model2", {"m": 2})} and loads == [2]
    done = finished_requests(folds, parts.get, lambda k: k == 1, lambda k: f"model{k}")
    assert done == {1: ("model1", {"m": 1})}  # 2's model was not saved: the run restarts after request 1
    assert finished_requests(folds, {}.get, lambda k: True, str, done={1: ("m1", {})}) == {1: ("m1", {})}


def test_a_named_task_keeps_its_evaluation_sets_and_retain_data(user):
    """With --task T, the requests' union becomes the forget data; T's own sets and retain data stay, and each
    request's set is added with role extra (in no role score)."""
    from obliviate.tasks.files import task_from_files

    task = task_from_files([str(user["forget"])], [str(user["retain_qa"])], name="own")
    reqs = sequential.read_requests(user["requests"][:2])
    t = sequential.with_requests(task, reqs)
    assert t.forget.qa == reqs[0].data.qa + reqs[1].data.qa and len(t.forget.qa) == 8
    assert t.retain.qa == task.retain.qa
    assert [es.name for es in t.evals] == [*(es.name for es in task.evals), "request1_qa", "request2_qa"]
    assert [es.role for es in t.evals[-2:]] == ["extra", "extra"]
    assert [x["question"] for x in t.evals[-1].items] == [q for q, _ in reqs[1].data.qa]
    shorthand = task_from_files([str(p) for p in user["requests"][:2]], [str(user["retain_qa"])])
    same = sequential.with_requests(shorthand, reqs)  # the forget data already the requests': kept as they are
    assert same.forget is shorthand.forget and same.evals[-1].name == "request2_qa"


def test_over_requests_sequential_and_fresh():
    """Scalability starts each fold from the model given; sustainability from the previous fold's model."""
    calls = []

    def unlearn_fn(model, docs, k):
        calls.append((model, k))
        return model + [k]

    def evaluate_fn(model, k):
        return {"seen": list(model)}

    folds = [{"fold": 1, "docs": ["a"]}, {"fold": 2, "docs": ["a", "b"]}, {"fold": 3, "docs": ["c"]}]
    sust = sequential.over_requests([], folds, unlearn_fn, evaluate_fn, sequential=True)
    assert [r["seen"] for r in sust] == [[1], [1, 2], [1, 2, 3]]
    scal = sequential.over_requests([], folds, unlearn_fn, evaluate_fn, sequential=False, copy_fn=list)
    assert [r["seen"] for r in scal] == [[1], [2], [3]] and [r["forget_docs"] for r in scal] == [1, 2, 1]
    calls.clear()
    resumed = sequential.over_requests([], folds, unlearn_fn, evaluate_fn, sequential=True,
                            done={1: (None, {"seen": [1]}), 2: ([1, 2], {"seen": [1, 2]})})
    assert [k for _, k in calls] == [3] and resumed[-1]["seen"] == [1, 2, 3]  # only the missing request ran
