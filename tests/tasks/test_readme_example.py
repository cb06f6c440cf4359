"""The README's "Your own model and data" example runs as written (with ``$MODEL`` set to a saved model)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_block(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split(f"## {title}", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow  # 75 s, the default suite's longest (make test-all runs it); the default suite runs the same steps
# on a user's model and file through the API (tests/tasks/test_provider_runs.py) and the CLI (tests/cli/)
def test_own_model_and_data_example_runs_as_written(user_models, tmp_path):
    block = readme_block("Your own model and data")
    assert "obliviate finetune" in block and "obliviate attack" in block
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {**os.environ, "MODEL": str(user_models["qwen2"]),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    script = "set -euo pipefail\n" + block
    r = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    ft = json.loads((tmp_path / "runs/own/finetuned/results.json").read_text())["metrics"]["finetuned"]
    assert ft["forget_qa_em"] >= 0.8
    npo = json.loads((tmp_path / "runs/own/npo/results.json").read_text())["metrics"]
    assert npo["npo"]["forget_qa_em"] < npo["base"]["forget_qa_em"]
    assert {"forget_score", "retain_score"} <= set(npo["npo"])
    res = json.loads((tmp_path / "runs/own/attack/results.json").read_text())
    att = res["metrics"]
    assert att["relearn_curve"] and att["relearn_disjoint_curve"]
    # finetune's card names $MODEL: the negative control is built by default, and attack --base ends with the verdict
    assert res["negative_control_kind"] == "retain-finetune" and res["verdict"]["line"].startswith("verdict: ")
    assert r.stdout.strip().splitlines()[-1] == res["verdict"]["line"]  # results on stdout, the verdict last
