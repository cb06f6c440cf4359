"""Settings checked before a run (issue #27, items 5, 8, 9, 11, 13, 14, 15): the method named once, settings
that leave nothing to train, nonsense method values, settings that do not apply, contradictory data, text
longer than the context, and the Python API's options. Each refusal is one line naming the bad input, given
before ``--out`` is touched and, where no model is needed, before one is loaded."""

import json

import pytest

import obliviate
import obliviate.cli.inputs as unlearn_cli  # checked_run loads the model there
import obliviate.pipelines.sequential as sequential_pipeline
import obliviate.pipelines.unlearn as unlearn_pipeline
from _cli_errors import one_error
from obliviate.cli.main import main
from obliviate.errors import ConfigError, DataError
from obliviate.eval.suite import text_loss
from obliviate.methods import build_method
from obliviate.unlearning.engine import check_lora_rank, check_overlap, check_unused_runs, method_run_config
from obliviate.models.builders import tiny_random
from obliviate.tasks import Data
from obliviate.train.finetune import training_data
from tasks._userdata import make_facts, save_tiny_model, write_jsonl, write_user_files


class Reached(Exception):
    """Raised by a patched step: the run got that far."""


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    root = tmp_path_factory.mktemp("settings")
    paths = write_user_files(root / "data")
    save_tiny_model(root / "model", "llama", paths["texts"], d_model=32)
    return {**paths, "model": root / "model", "root": root}


def _unlearn(user, out, *extra, method="npo", forget=None, retain=None):
    return main(["unlearn", "--out", str(out), "--base", str(user["model"]), "--method", method, "--no-progress",
                 "--forget", str(forget or user["forget"]), "--retain", str(retain or user["retain_qa"]), *extra])


@pytest.fixture
def no_model(monkeypatch):
    """Loading the model, or preparing --out, fails the test: the error must come before either."""
    def refuse(*a, **kw):
        raise AssertionError("the model was loaded before the error")

    def no_out(*a, **kw):
        raise AssertionError("--out was prepared before the error")

    monkeypatch.setattr(unlearn_cli, "load_model_args", refuse)
    monkeypatch.setattr(unlearn_pipeline, "prepare_out_dir", no_out)
    monkeypatch.setattr(sequential_pipeline, "prepare_out_dir", no_out)


# --------------------------------------------------------------------------- item 5: the method named once


@pytest.mark.parametrize("given", [["unlearn.method=rmu"], ["unlearn.method=GradDiff"], "file"])
def test_a_second_method_name_is_refused(given, user, tmp_path, capsys, no_model):
    if given == "file":
        (tmp_path / "c.yaml").write_text("unlearn:\n  method: simnpo\n")
        given = ["--config", str(tmp_path / "c.yaml")]
    out = tmp_path / "o"
    assert _unlearn(user, out, *given) == 2
    line = one_error(capsys)
    assert "config key 'unlearn.method'" in line and "contradicts --method npo" in line
    assert not out.exists()


@pytest.mark.parametrize("flags,override,key", [(["--method", "npo"], "method=rmu", "method"),
                                                (["--forget", "forget05"], "forget=forget10", "forget")])
def test_tofu_refuses_a_flag_contradicted_by_the_config(flags, override, key, tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["tofu", "--out", str(out), *flags, override]) == 2
    assert f"config key '{key}'" in (line := one_error(capsys)) and f"contradicts --{key} {flags[1]}" in line
    assert not out.exists()


def test_the_same_method_spelt_otherwise_is_one_name(user, tmp_path, monkeypatch):
    seen = {}

    def capture(tok, forget, retain, cfg, **kw):
        seen["method"] = cfg.method
        raise Reached

    monkeypatch.setattr(unlearn_pipeline, "check_unlearn_data", capture)
    with pytest.raises(Reached):
        _unlearn(user, tmp_path / "o", "unlearn.method=NPO")
    assert seen["method"] == "npo"


# --------------------------------------------------------------------------- item 9: nothing left to train


@pytest.mark.parametrize("override,method,message", [
    ("unlearn.train.steps=0", "npo", "config key 'unlearn.train.steps': must be >= 1 to unlearn"),
    ("unlearn.lora_alpha=0", "graddiff", "config key 'unlearn.lora_alpha': must be > 0"),
    ("unlearn.lora_alpha=-4", "graddiff", "config key 'unlearn.lora_alpha': must be > 0"),
    ("unlearn.lora_r=0", "npo", "config key 'unlearn.lora_r': must be >= 1, got 0"),
    ("unlearn.params.beta=0", "npo", "config key 'unlearn.params.beta': must be > 0, got 0.0"),
    ("unlearn.params.beta=0", "simnpo", "config key 'unlearn.params.beta': must be > 0, got 0.0"),
    ("unlearn.params.gamma=0", "gradascent", "config key 'unlearn.params.gamma': must be > 0"),
    ("unlearn.params.layer=-1", "rmu", "config key 'unlearn.params.layer': must be a layer index >= 0, got -1"),
    ("unlearn.params.alpha=-1", "rmu", "config key 'unlearn.params.alpha': must be >= 0"),
])
def test_settings_that_train_nothing_fail_before_the_model(override, method, message, user, tmp_path, capsys,
                                                           no_model):
    out = tmp_path / "o"
    assert _unlearn(user, out, override, method=method) == 2
    assert message in one_error(capsys)
    assert not out.exists()


@pytest.mark.parametrize("max_len", [2, 3])
def test_a_max_len_that_cuts_every_answer_fails_with_the_tokenizer_alone(max_len, user, tmp_path, capsys, no_model):
    out = tmp_path / "o"
    assert _unlearn(user, out, f"unlearn.max_len={max_len}") == 2
    line = one_error(capsys)
    assert f"config key 'max_len' ({max_len}) leaves no forget token to train on" in line
    assert not out.exists()


@pytest.mark.parametrize("r", [33, 100000])
def test_a_lora_rank_wider_than_the_layers_fails_before_out(r, user, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(unlearn_pipeline, "prepare_out_dir", lambda *a: (_ for _ in ()).throw(AssertionError("--out")))
    out = tmp_path / "o"
    assert _unlearn(user, out, "unlearn.lora=true", f"unlearn.lora_r={r}") == 2
    assert f"config key 'lora_r': must be at most the width of the layers it adapts (16), got {r}" in \
        one_error(capsys)  # d_model 32, its key and value projections 16 wide
    assert not out.exists()


def test_lora_rank_bound_is_the_narrowest_adapted_layer():
    model = tiny_random("llama", d_model=32, d_ff=48)  # 4 heads of 8, 2 of them for keys and values
    check_lora_rank(model, ["*"], 16)  # k_proj, v_proj: 32 -> 16
    with pytest.raises(ConfigError, match=r"\(16\), got 17"):
        check_lora_rank(model, ["*"], 17)
    check_lora_rank(model, ["*mlp.down_proj*"], 32)  # 48 -> 32
    with pytest.raises(ConfigError, match=r"\(32\), got 33"):
        check_lora_rank(model, ["*mlp.down_proj*"], 33)


# --------------------------------------------------------------------------- item 13: nonsense method values


@pytest.mark.parametrize("method,params,key", [
    ("npo", {"beta": 0}, "beta"), ("simnpo", {"beta": -1}, "beta"), ("idkdpo", {"beta": 0}, "beta"),
    ("npo", {"alpha": -0.5}, "alpha"), ("graddiff", {"gamma": 0}, "gamma"), ("wga", {"beta2": -1}, "beta2"),
    ("atwu", {"tau": -1}, "tau"), ("atwu_npo", {"beta": 0}, "beta"), ("atwu_ga", {"alpha": -1}, "alpha"),
    ("rmu", {"layer_frac": 1.5}, "layer_frac"), ("cosine_rmu", {"layer": -2}, "layer"),
    ("adaptive_rmu", {"beta": 0}, "beta"), ("probe_unlearn", {"layers": [0, -1]}, "layers"),
    ("crisp", {"sae_lr": 0}, "sae_lr"), ("crisp", {"layers": [-3]}, "layers"),
    ("snmf", {"sparsity": 1.5}, "sparsity"), ("snmf", {"sparsity": 0}, "sparsity"),
    ("ember", {"min_confidence": 2}, "min_confidence"), ("ember", {"patience": 0}, "patience"),
])
def test_nonsense_method_values_are_one_line_naming_the_key(method, params, key):
    with pytest.raises(ConfigError, match=rf"^config key 'method\.{method}\.{key}': must be "):
        build_method(method, params)


def test_non_finite_values_given_in_python_are_refused():
    from obliviate.methods.npo import NPOConfig

    with pytest.raises(ConfigError, match="config key 'beta': must be a finite number, got nan"):
        NPOConfig(beta=float("nan"))
    with pytest.raises(ConfigError, match="config key 'alpha': must be a finite number, got inf"):
        NPOConfig(alpha=float("inf"))


@pytest.mark.parametrize("run,message", [
    ({"train": {"lr": 0}}, "config key 'runs.npo.train.lr': must be > 0, got 0"),  # was silently the preset's lr
    ({"train": {"lr": -1e-3}}, "config key 'runs.npo.train.lr': must be > 0"),
    ({"train": {"steps": 0}}, "config key 'runs.npo.train.steps': must be >= 1 to unlearn"),
    ({"batch_size": 0}, "config key 'runs.npo.batch_size': must be >= 1"),
])
def test_a_method_run_that_trains_nothing_is_refused(run, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        method_run_config("npo", run, "tiny", 0)


# --------------------------------------------------------------------------- item 14: settings that do not apply


@pytest.mark.parametrize("method", ["snmf", "ember"])
@pytest.mark.parametrize("override,key", [("unlearn.train.lr=0.01", "train.lr"), ("unlearn.lora=true", "lora"),
                                          ("unlearn.batch_size=4", "batch_size"), ("unlearn.max_len=64", "max_len"),
                                          ("unlearn.lora_r=4", "lora_r"), ("unlearn.train.steps=5", "train.steps")])
def test_training_settings_given_to_an_edit_method_are_refused(method, override, key, user, tmp_path, capsys,
                                                               no_model):
    out = tmp_path / "o"
    assert _unlearn(user, out, override, method=method) == 2
    assert f"config key 'unlearn.{key}'" in (line := one_error(capsys)) and f"does not apply to '{method}'" in line
    assert not out.exists()


def test_runs_of_an_edit_method_take_only_params():
    with pytest.raises(ConfigError, match="config key 'runs.snmf.train' does not apply to 'snmf'"):
        method_run_config("snmf", {"train": {"lr": 1e-3}, "params": {"delta": 2.0}}, "tiny", 0)
    ucfg, used = method_run_config("snmf", {"params": {"delta": 2.0}}, "tiny", 0)
    assert ucfg.params == {"delta": 2.0} and used == {"params": {"delta": 2.0}}


def test_runs_of_a_method_not_run_are_refused(user, tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"config key 'runs\.rmu' sets a method this run does not run"):
        check_unused_runs({"npo": {"train": {"lr": 1e-4}}, "rmu": {"train": {"lr": 1e-3}}}, ["npo", "graddiff"])
    check_unused_runs({"npo": {"train": {"lr": 1e-4}}}, ["npo"])
    out = tmp_path / "o"
    assert main(["compare", "--out", str(out), "--no-progress", "--forget", str(user["forget"]), "--retain",
                 str(user["retain_qa"]), "methods=[npo]", "runs.rmu.train.lr=0.001"]) == 2
    assert "config key 'runs.rmu' sets a method this run does not run (methods: npo)" in one_error(capsys)
    assert not out.exists()


# --------------------------------------------------------------------------- item 11: contradictory data


def _retain_sharing(user, tmp_path, n_shared: int):
    forget = [json.loads(l) for l in user["forget"].read_text().splitlines()]
    retain = [{"question": f["question"], "answer": f["answer"]} for f in make_facts(32, seed=0)[16:]]
    rows = retain[n_shared:] + [{"question": f["prompt"], "answer": f["response"]} for f in forget[:n_shared]]
    write_jsonl(tmp_path / "retain_shared.jsonl", rows)
    return tmp_path / "retain_shared.jsonl"


@pytest.mark.parametrize("n_shared", [5, 16, 1])
def test_forget_and_retain_sharing_pairs_is_an_error_naming_the_count(n_shared, user, tmp_path, capsys, no_model):
    retain = user["forget"] if n_shared == 16 else _retain_sharing(user, tmp_path, n_shared)
    out = tmp_path / "o"
    assert _unlearn(user, out, retain=retain) == 2
    line = one_error(capsys)
    assert f"{n_shared} of 16 forget QA pairs are also in the retain data" in line and "allow_overlap" in line
    assert not out.exists()


def test_allow_overlap_runs_on_with_a_warning_naming_the_count(user, tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(unlearn_cli, "load_model_args", lambda *a, **kw: (_ for _ in ()).throw(Reached()))
    with pytest.raises(Reached):  # the checks pass: the run goes on to load the model
        _unlearn(user, tmp_path / "o", "unlearn.allow_overlap=true", retain=_retain_sharing(user, tmp_path, 5))
    f = Data(qa=[("q1", "a1"), ("q2", "a2")], docs=["a text.", "another."])
    r = Data(qa=[("q1", "a1"), ("q2", "other")], docs=["another."])
    with caplog.at_level("WARNING", logger="obliviate"):  # the library logs it; the command line shows it on stderr
        assert check_overlap(f, r, allow=True, warn=True) == 2
    assert "1 of 2 forget QA pairs and 1 of 2 forget documents are also in the retain data" in caplog.text
    with pytest.raises(DataError, match="1 of 2 forget QA pairs and 1 of 2 forget documents"):
        check_overlap(f, r)


# --------------------------------------------------------------------------- item 8: text longer than the context


def test_text_longer_than_the_context_is_split_into_windows(tiny_tokenizer):
    model = tiny_random("gpt2", vocab_size=len(tiny_tokenizer), max_len=16, n_layer=2).eval()
    long = " ".join(["Doctors treat Morvexia with zalpradine."] * 12)
    n = len(tiny_tokenizer(long, add_special_tokens=False)["input_ids"])
    assert n > 16
    r = text_loss(model, tiny_tokenizer, [long, "The glimmerfin eats moss."])
    assert r["loss"] > 0 and r["tokens"] > n - 16  # every window of the long text is scored
    cont = text_loss(model, tiny_tokenizer, [long], prompts=["Question: " * 40])  # a prompt past the context too
    assert cont["tokens"] > 0 and cont["loss"] > 0  # its continuation is scored (issue #42)


# --------------------------------------------------------------------------- items 13, 15: files and the API


@pytest.mark.parametrize("entry,message", [
    ({"mapping": ["question=prompt"]}, "'mapping' must be a string such as 'question=q,answer=a' or a mapping"),
    ({"mapping": 3}, "'mapping' must be a string"),
    ({"mapping": {"question": 5}}, "'mapping' must be a string"),
    ({"kind": 7}, "'kind' must be one of qa, mcq, text, got 7"),
    ({"kind": "essay"}, "'kind' must be one of qa, mcq, text, got 'essay'"),
    ({"split_by": "sideways"}, "'split_by' must be one of line, blank"),
    ({"path": 12}, "'path' must be a file path, got 12"),
])
def test_a_spec_entry_of_the_wrong_shape_is_one_line(entry, message, user, tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    forget = {"path": str(user["forget"]), **entry}
    spec.write_text(json.dumps({"forget": [forget], "retain": [str(user["retain_qa"])]}))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        obliviate.load_task(f"file:{spec}")
    out = tmp_path / "o"
    assert main(["eval", "--out", str(out), "--model", str(user["model"]), "--task", f"file:{spec}"]) == 2
    assert message in one_error(capsys)
    assert not out.exists()


def test_load_task_applies_chat_and_template_to_a_named_task(user, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({"forget": [str(user["forget"])], "retain": [str(user["retain_qa"])]}))
    assert obliviate.load_task(f"file:{spec}", chat=True).prompt.chat is True
    assert obliviate.load_task(f"file:{spec}", template="Q: {question}\nA:").prompt.template == "Q: {question}\nA:"
    assert obliviate.load_task(f"file:{spec}").prompt.chat is False
    with pytest.raises(ConfigError, match="mapping applies to forget/retain files"):
        obliviate.load_task(f"file:{spec}", mapping="question=q")
    with pytest.raises(ConfigError, match=r"option\(s\) seed apply to a named task"):
        obliviate.load_task(forget=user["forget"], retain=user["retain_qa"], seed=3)


def test_load_task_mapping_per_file(user, tmp_path):
    facts = make_facts(6, seed=3)
    write_jsonl(tmp_path / "f.jsonl", [{"question": f["question"], "true_answer": f["answer"]} for f in facts[:3]])
    write_jsonl(tmp_path / "r.jsonl", [{"question": f["question"], "answer": f["answer"]} for f in facts[3:]])
    f, r = tmp_path / "f.jsonl", tmp_path / "r.jsonl"
    with pytest.raises(DataError, match="true_answer"):  # one mapping for every file: the retain file lacks it
        obliviate.load_task(forget=f, retain=r, mapping="answer=true_answer")
    for mapping in ({"forget": "answer=true_answer"}, {str(f): "answer=true_answer"},
                    {"forget": {"answer": "true_answer"}}):
        task = obliviate.load_task(forget=f, retain=r, mapping=mapping)
        assert task.forget.qa == [(x["question"], x["answer"]) for x in facts[:3]]
        # the retain pairs trained on and the seeded share held out for the retain evaluation (issue #42)
        assert sorted(training_data(task, "retain").qa) == sorted((x["question"], x["answer"]) for x in facts[3:])
    task = obliviate.load_task(forget={"path": str(f), "mapping": "answer=true_answer"}, retain=r)
    assert task.forget.qa[0] == (facts[0]["question"], facts[0]["answer"])
    with pytest.raises(ConfigError, match="mapping: 'utility' is neither a set"):
        obliviate.load_task(forget=f, retain=r, mapping={"utility": "answer=x"})
