"""The loop owns the device: every tensor handed to the model is on the model's device.

A forward pre-hook checks each tensor argument of every model call made by fine-tuning, unlearning,
evaluation and the attacks. On a CPU-only machine this guards against tensors built on another
device (e.g. a hard-coded "cuda"); the GPU script of docs/bench.md runs the same path on a GPU.
"""

from __future__ import annotations

import torch

from _userdata import save_tiny_model, write_user_files
from obliviate.config import from_dict
from obliviate.eval.suite import evaluate_task
from obliviate.evidence.harness import TaskAttackConfig, run_task_attacks
from obliviate.models.load import load_model, load_tokenizer
from obliviate.tasks.files import task_from_files
from obliviate.train.finetune import FinetuneConfig, finetune, training_data
from obliviate.unlearning.engine import UnlearnConfig, unlearn


def _spy(model, calls: list):
    def hook(module, args, kwargs):
        dev = next(module.parameters()).device
        for v in list(args) + list(kwargs.values()):
            if torch.is_tensor(v):
                assert v.device == dev, f"a {tuple(v.shape)} tensor on {v.device} handed to a model on {dev}"
                calls.append(v.device)

    return model.register_forward_pre_hook(hook, with_kwargs=True)


def test_every_model_input_is_on_the_model_device(tmp_path):
    files = write_user_files(tmp_path / "data", n_forget=4, n_retain=4)
    task = task_from_files([str(files["forget"])], [str(files["retain_qa"]), str(files["retain_docs"])],
                           relearn=[str(files["relearn"])])
    d = save_tiny_model(tmp_path / "m", "qwen2", files["texts"], d_model=32)
    model, tok = load_model(str(d)), load_tokenizer(str(d))
    calls: list = []
    _spy(model, calls)
    model, _ = finetune(model, tok, training_data(task, "both"), FinetuneConfig(epochs=1), prompt=task.prompt,
                        progress=False)
    evaluate_task(model, tok, task)
    cfg = from_dict(UnlearnConfig, {"method": "npo", "train": {"steps": 2, "progress": False}})
    model, _ = unlearn(model, tok, task.forget, task.retain, cfg, prompt=task.prompt)
    attack_cfg = from_dict(TaskAttackConfig, {"relearn": {"steps": 1, "eval_every": 1}})
    run_task_attacks(model, tok, task, attack_cfg)  # attacks a deep copy, which keeps the hook
    assert len(calls) > 50 and set(calls) == {next(model.parameters()).device}
