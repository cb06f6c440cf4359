"""Every command honours ``--device`` and ``--dtype`` or refuses them in one line, before ``--out`` is touched:
float16 training on the CPU is refused, a device that is not here is refused, ``eval --data`` evaluates
on the device and in the dtype it was given."""

from __future__ import annotations

import json

import pytest
import torch

import obliviate.pipelines.evaluate as eval_pipeline
from obliviate.cli.main import main
from tests._cli_errors import one_error
from tests.tasks._userdata import save_tiny_model, write_user_files


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    root = tmp_path_factory.mktemp("user")
    files = write_user_files(root / "data", n_forget=4, n_retain=4)
    model = save_tiny_model(root / "model", "llama", files["texts"], d_model=16, n_layer=2)
    qa = root / "qa.jsonl"
    qa.write_text("".join(json.dumps({"question": f"q{i}?", "answer": f"a{i}"}) + "\n" for i in range(4)))
    return {"model": str(model), "qa": str(qa), **{k: str(v) for k, v in files.items() if k != "texts"}}


def _command(name, user):
    files = ["--forget", user["forget"], "--retain", user["retain_qa"], "--no-progress"]
    return {
        "unlearn": ["unlearn", "--model", user["model"], "--method", "npo", *files],
        "finetune": ["finetune", "--model", user["model"], *files],
        "attack": ["attack", "--model", user["model"], *files],
        "compare": ["compare", "--model", user["model"], *files],
        "eval": ["eval", "--model", user["model"], *files],
        "eval --data": ["eval", "--model", user["model"], "--data", user["qa"], "--kind", "qa"],
    }[name]


@pytest.mark.parametrize("command", ["unlearn", "finetune", "attack", "compare"])
@pytest.mark.parametrize("dtype", ["float16", "fp16", "half"])
def test_float16_training_on_the_cpu_is_refused_up_front(command, dtype, user, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*_command(command, user), "--out", str(out), "--device", "cpu", "--dtype", dtype]) == 2
    line = one_error(capsys)
    assert f"--dtype {dtype} on the CPU: training in float16 is not supported there" in line
    assert not out.exists()


@pytest.mark.parametrize("command", ["unlearn", "finetune", "attack", "compare", "eval", "eval --data"])
@pytest.mark.parametrize("device,why", [("cuda:7", "CUDA"), ("meta", "not meta"), ("nonsense", "is not a device"),
                                        ("xla", "not xla")])
def test_a_device_that_is_not_here_is_one_line(command, device, why, user, tmp_path, capsys):
    if device.startswith("cuda") and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    out = tmp_path / "out"
    assert main([*_command(command, user), "--out", str(out), "--device", device]) == 2
    line = one_error(capsys)
    assert f"--device {device}" in line.replace(repr(device), device) and why in line, line
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_eval_data_refuses_cuda_on_a_machine_without_it(user, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*_command("eval --data", user), "--out", str(out), "--device", "cuda"]) == 2
    assert "--device cuda: no CUDA device is available here" in one_error(capsys) and not out.exists()


@pytest.mark.parametrize("command", ["eval", "eval --data"])
@pytest.mark.parametrize("dtype,expected", [("float16", torch.float16), ("bfloat16", torch.bfloat16),
                                            ("float32", torch.float32)])
def test_eval_evaluates_in_the_dtype_and_on_the_device_given(command, dtype, expected, user, tmp_path, monkeypatch):
    seen = []
    real = eval_pipeline.evaluate_task

    def spy(model, *a, **k):
        p = next(model.parameters())
        seen.append((p.dtype, p.device.type))
        return real(model, *a, **k)

    monkeypatch.setattr(eval_pipeline, "evaluate_task", spy)
    assert main([*_command(command, user), "--out", str(tmp_path / "o"), "--device", "cpu", "--dtype", dtype]) == 0
    assert seen == [(expected, "cpu")]


def test_compare_refuses_device_and_dtype_without_a_model(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compare", "--out", str(out), "--dtype", "bfloat16", "--device", "cpu"]) == 2
    assert "--device and --dtype apply to --model; without one, compare pretrains its own" in one_error(capsys)
    assert not out.exists()
