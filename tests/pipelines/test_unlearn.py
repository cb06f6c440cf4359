"""The one unlearn pipeline (issue #43): ``obliviate unlearn`` and ``obliviate.unlearn`` run the same code, so the
same seed and settings give the same results.json metrics and the same weights; the command modules hold none of
it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import obliviate
from obliviate.cli.main import main
from obliviate.config import from_dict
from obliviate.errors import ConfigError
from obliviate.methods import method_defaults
from obliviate.models.load import load_model, load_tokenizer
from obliviate.pipelines.compare.run import CompareConfig, method_config
from obliviate.pipelines.tofu.run import TofuConfig, check_run as tofu_check_run, unlearn_config as tofu_unlearn_config
from obliviate.pipelines.unlearn import unlearn_settings
from obliviate.papers.atwu.run import AtwuRecipeConfig, check_runs as atwu_check_runs
from obliviate.papers.ember.run import EmberRecipeConfig
from obliviate.papers.token_filtering.run import TokenFilteringConfig

CLI = Path(obliviate.__file__).resolve().parent / "cli"


def _weights(model_dir: Path) -> dict:
    out = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def test_the_command_and_the_api_give_the_same_metrics_and_weights(taught, tmp_path):
    assert main(["unlearn", "--out", str(tmp_path / "cli"), "--model", str(taught["dir"]), "--forget",
                 str(taught["forget"]), "--retain", str(taught["retain"]), "--method", "NPO", "--seed", "3",
                 "--no-progress", "unlearn.train.steps=3", "unlearn.train.lr=2e-3", "unlearn.batch_size=4",
                 "unlearn.params.alpha=50"]) == 0
    model, tok = load_model(str(taught["dir"])), load_tokenizer(str(taught["dir"]))
    task = obliviate.load_task(forget=str(taught["forget"]), retain=str(taught["retain"]))
    _, info = obliviate.unlearn(model, tok, task, "npo", seed=3, train={"steps": 3, "lr": 2e-3}, batch_size=4,
                                params={"alpha": 50}, out_dir=tmp_path / "api")
    cli = json.loads((tmp_path / "cli" / "results.json").read_text())
    api = json.loads((tmp_path / "api" / "results.json").read_text())
    assert cli["metrics"] == api["metrics"] and cli["unlearn_outcome"] == api["unlearn_outcome"]
    assert api["metrics"]["npo"] == pytest.approx(info["after"])
    assert cli["config"]["unlearn"] == api["config"]["unlearn"]  # one config, built once
    a, b = _weights(tmp_path / "cli" / "model"), _weights(tmp_path / "api" / "model")
    base = _weights(taught["dir"])
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], base[k]) for k in a)  # the run trained something


@pytest.mark.parametrize("preset,size_known", [("tiny", True), ("paper", True), ("paper", False)])
def test_unlearn_resolves_the_name_once_and_checks_the_config_once(taught, tmp_path, monkeypatch, preset, size_known):
    """``obliviate unlearn --method NPO``: the name is resolved once, the settings built and checked once (at the preset
    of the model's size, read from its config before the model is loaded), and the method built once more to run;
    ``paper``: a model whose size picks the paper preset (the preset's settings, built once too); where its config
    does not tell its size (``size_known`` False), the settings are built again once it is loaded."""
    import obliviate.pipelines.unlearn as pipeline
    import obliviate.unlearning.engine as engine
    from obliviate.unlearning import contract

    calls: dict = {}

    def counted(module, name):
        real = getattr(module, name)

        def count(*a, **kw):
            calls[name] = calls.get(name, 0) + 1
            return real(*a, **kw)

        monkeypatch.setattr(module, name, count)

    counted(pipeline, "resolve_method")
    counted(contract, "resolve_method")  # any other way in
    counted(engine, "check_unlearn_config")
    counted(pipeline, "check_unlearn_config")
    counted(pipeline, "unlearn_settings")
    if preset == "paper":
        monkeypatch.setattr(pipeline, "preset_name", lambda model: "paper")
    if not size_known:
        monkeypatch.setattr("obliviate.cli.inputs.parameter_count", lambda path: None)
    assert main(["unlearn", "--out", str(tmp_path / "out"), "--model", str(taught["dir"]), "--forget",
                 str(taught["forget"]), "--retain", str(taught["retain"]), "--method", "NPO", "--no-progress",
                 "unlearn.train.steps=2"]) == 0
    assert calls["resolve_method"] == 1
    assert calls["check_unlearn_config"] == calls["unlearn_settings"] == (1 if size_known else 2)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["config"]["unlearn"]["method"] == "npo" and results["preset"] == preset


def test_a_model_size_is_read_from_its_config_before_its_weights(taught):
    """The preset of ``unlearn`` is chosen before the model loads: the parameter count of a model directory, read
    from its config.json alone, is the loaded model's; a hub id has none here (the loaded model's size decides)."""
    from obliviate.models.load import parameter_count

    assert parameter_count(taught["dir"]) == sum(p.numel() for p in load_model(str(taught["dir"])).parameters())
    assert parameter_count("org/not-here") is None


def test_the_settings_are_built_once_from_either_schema():
    by_flags = unlearn_settings("NPO", "tiny", seed=2, overrides=["unlearn.train.lr=5e-4", "unlearn.params.beta=0.2",
                                                                  "unlearn.lora=true"])
    by_keywords = unlearn_settings("npo", "tiny", seed=2, run={"train": {"lr": 5e-4}, "params": {"beta": 0.2},
                                                                         "lora": True},
                                   prefix="")
    assert by_flags == by_keywords and by_flags.unlearn.method == "npo" and by_flags.unlearn.seed == 2
    assert by_flags.unlearn.params["alpha"] == unlearn_settings("npo", "tiny").unlearn.params["alpha"]  # the preset's
    with pytest.raises(ConfigError, match=r"^unknown config key 'stpes'"):
        unlearn_settings("npo", "tiny", run={"stpes": 1}, prefix="")
    with pytest.raises(ConfigError, match=r"^config key 'lr' is 'train.lr': a method run takes the keys of `unlearn`"):
        unlearn_settings("npo", "tiny", run={"lr": 1e-4}, prefix="")
    with pytest.raises(ConfigError, match=r"^unknown method 'npp' \(did you mean 'npo'\?\)"):
        unlearn_settings("npp", "tiny")
    # one seed: unlearn.seed may repeat the run's seed, not contradict it; seed=... in the config seeds it too
    assert unlearn_settings("npo", "tiny", seed=2, overrides=["unlearn.seed=2"]).unlearn.seed == 2
    assert unlearn_settings("npo", "tiny", seed=0, overrides=["seed=5"]).unlearn.seed == 5
    with pytest.raises(ConfigError, match=r"^config key 'unlearn.seed' \(3\) contradicts the run's seed 2"):
        unlearn_settings("npo", "tiny", seed=2, overrides=["unlearn.seed=3"])


@pytest.mark.parametrize("method,keys", [
    ("npo", {"train": {"lr": 5e-4, "grad_clip": 0.5}, "max_len": 64, "batch_size": 4, "params": {"beta": 0.2}}),
    ("rmu", {"train": {"steps": 7}, "lora": True, "lora_r": 4, "allow_overlap": True}),
    ("snmf", {"params": {"delta": 2.0}}),
])
def test_a_method_run_has_one_settings_schema(method, keys, tmp_path):
    """``unlearn.*`` (command and API), ``compare``'s ``runs.<name>`` and TOFU's ``unlearn`` take the same keys and
    give the same run."""
    def dotted(d, prefix):
        return [x for k, v in d.items() for x in (dotted(v, f"{prefix}.{k}") if isinstance(v, dict)
                                                   else [f"{prefix}.{k}={str(v).lower()}"])]

    by_flags = unlearn_settings(method, "tiny", seed=4, overrides=dotted(keys, "unlearn")).unlearn
    by_keywords = unlearn_settings(method, "tiny", seed=4, run=keys, prefix="").unlearn
    in_compare = method_config(from_dict(CompareConfig, {"seed": 4, "methods": [method], "runs": {method: keys}}),
                               method, "tiny")[0]
    in_tofu = tofu_unlearn_config(from_dict(TofuConfig, {"seed": 4, "method": method, "unlearn": keys}))
    assert by_flags == by_keywords == in_compare == in_tofu
    assert by_flags.params == {**method_defaults(method, "tiny")["params"], **keys.get("params", {})}
    with pytest.raises(ConfigError, match=r"^config key 'runs.npo.lr' is 'runs.npo.train.lr'"):  # the old flat key
        method_config(from_dict(CompareConfig, {"methods": ["npo"], "runs": {"npo": {"lr": 1e-4}}}), "npo", "tiny")
    with pytest.raises(ConfigError, match=r"^config key 'unlearn.seed' is set by the run itself"):
        tofu_unlearn_config(from_dict(TofuConfig, {"method": "npo", "unlearn": {"seed": 3}}))
    for empty in (None, 0, []):  # not silently the preset's params
        with pytest.raises(ConfigError, match=r"^config key 'runs.npo.params': expected a mapping"):
            method_config(from_dict(CompareConfig, {"methods": ["npo"], "runs": {"npo": {"params": empty}}}),
                          "npo", "tiny")


@pytest.mark.parametrize("bad,named", [({"params": {"nope": 1}}, "params.nope"),
                                       ({"train": {"trainable": ["x"]}}, "train.trainable")])
def test_every_method_run_checks_its_settings_before_any_model(bad, named):
    """What only the built method can refuse (an unknown method parameter, the trained parameters) fails where any
    run's settings are built, named as the user typed it: unlearn, compare, TOFU and the papers' runs alike."""
    def refused(prefix, build):
        with pytest.raises(ConfigError, match=rf"'{prefix}\.{named}'"):
            build()

    refused("unlearn", lambda: unlearn_settings("rmu", "tiny", overrides=[
        f"unlearn.{named}={'[x]' if 'trainable' in named else 1}"]))
    refused("runs.rmu", lambda: method_config(from_dict(CompareConfig, {"methods": ["rmu"], "runs": {"rmu": bad}}),
                                              "rmu", "tiny"))
    refused("unlearn", lambda: tofu_check_run(from_dict(TofuConfig, {"method": "rmu", "unlearn": bad})))
    refused("runs.rmu", lambda: atwu_check_runs(from_dict(AtwuRecipeConfig, {"methods": ["rmu"], "runs": {"rmu": bad}}),
                                                ["rmu"], ["world"]))
    refused("world_concept.runs.rmu", lambda: from_dict(EmberRecipeConfig, {"world_concept": {"runs": {"rmu": bad}}}))
    refused("rmu", lambda: TokenFilteringConfig(rmu=bad))


@pytest.mark.parametrize("command", ["unlearn.py", "tune.py", "finetune.py"])
def test_the_command_modules_hold_no_pipeline_code(command):
    """They parse arguments, call their pipeline (:mod:`obliviate.pipelines.unlearn`,
    :mod:`obliviate.pipelines.finetune`) and print: nothing of the run is theirs."""
    tree = ast.parse((CLI / command).read_text())
    imported = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    run_parts = {"evaluate_task", "unlearn", "score_against", "unlearn_outcome", "write_results", "write_model_card",
                 "save_trained", "seed_everything", "tune", "same_run", "prepare_out_dir", "finetune",
                 "plot_loss_curve"}
    assert not {name for _, name in imported} & run_parts
    assert not {m for m, _ in imported if m and m.startswith(("obliviate.unlearning", "obliviate.train"))}
