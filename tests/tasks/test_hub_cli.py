"""``--allow-hub`` end to end through the real ``datasets`` / ``huggingface_hub`` code, against a stand-in hub on
the loopback address (tests/_hub.py): ``obliviate eval --task tofu:forget10`` and ``--task muse:news`` with an empty
data directory download, cache and run; the second run reads the cache with the network off and scores the same."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from obliviate.cli.main import main
from tests._hub import StandInHub
from tests._run_dirs import tiny_model_dir
from tests.tasks._hub_repos import muse_repo, tofu_repo

REPO = Path(__file__).resolve().parents[2]
TASKS = ("tofu:forget10", "muse:news")

DRIVER = """
import sys
from obliviate.cli.main import main
out, model = sys.argv[1], sys.argv[2]
for task in sys.argv[3:]:
    rc = main(["eval", "--task", task, "--allow-hub", "--model", model, "--out", out + "/" + task.replace(":", "_"),
               "--limit", "2", "--max-new-tokens", "4", "--no-progress"])
    if rc:
        sys.exit(rc)
"""


def run_cli(env: dict, out: Path, model: Path) -> subprocess.CompletedProcess:
    """Both evaluations in one fresh process (the hub's settings are read when ``huggingface_hub`` is imported)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env = {**base, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]), "OMP_NUM_THREADS": "1", **env}
    return subprocess.run([sys.executable, "-c", DRIVER, str(out), str(model), *TASKS], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def metrics(out: Path, task: str) -> dict:
    return json.loads((out / task.replace(":", "_") / "results.json").read_text())["metrics"]


@pytest.mark.heavy(12)
def test_eval_reads_tofu_and_muse_from_a_stand_in_hub_then_from_the_cache_offline(tmp_path):
    model = tiny_model_dir(tmp_path)
    hf = {"HF_HOME": str(tmp_path / "hf"), "OBLIVIATE_DATA": str(tmp_path / "no-data"),
          "OBLIVIATE_CACHE": str(tmp_path / "cache"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    with StandInHub({"locuslab/TOFU": tofu_repo(), "muse-bench/MUSE-News": muse_repo()}) as hub:
        first = run_cli({**hf, "HF_ENDPOINT": hub.url}, tmp_path / "online", model)
        assert first.returncode == 0, first.stderr[-3000:]
        fetched = {r.rsplit("/", 1)[-1] for r in hub.requests if r.startswith("GET /datasets/")}
    # every part each task reads came through the hub: TOFU's nine configs (holdout10 for the MIAs), MUSE's six parts
    assert {"forget10.json", "retain90.json", "holdout10.json", "forget10_perturbed.json", "retain_perturbed.json",
            "real_authors.json", "world_facts_perturbed.json"} <= fetched
    assert {"forget-00000-of-00001.parquet", "forget_qa_icl-00000-of-00001.parquet",
            "forget_4-00000-of-00001.parquet"} <= fetched
    lines = [x for x in first.stderr.splitlines() if "not found: reading" in x]
    assert any(f"reading locuslab/TOFU (holdout10, split train) from {hub.url} into {tmp_path / 'hf'}" in x
               for x in lines), lines
    assert any("reading muse-bench/MUSE-News (privleak, split holdout)" in x for x in lines), lines
    # the hub is gone: the same commands read the datasets cache, offline, and score the same
    second = run_cli({**hf, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}, tmp_path / "offline", model)
    assert second.returncode == 0, second.stderr[-3000:]
    assert any("(offline)" in x for x in second.stderr.splitlines())
    for task in TASKS:
        online, offline = metrics(tmp_path / "online", task), metrics(tmp_path / "offline", task)
        assert online == offline
    tofu = metrics(tmp_path / "online", "tofu:forget10")["model"]
    assert any(k.startswith("forget_qa") for k in tofu), sorted(tofu)


def test_without_the_switch_a_missing_benchmark_names_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OBLIVIATE_DATA", str(tmp_path))
    model = tiny_model_dir(tmp_path)
    capsys.readouterr()
    rc = main(["eval", "--task", "tofu:forget10", "--model", str(model), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--allow-hub" in err[0] and "forget10.json" in err[0], err
