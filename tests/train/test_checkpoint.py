"""Resuming falls back to the newest checkpoint that loads (issue #27): a truncated weights file, a truncated
state.pt or a bad trainer_state.json in the last checkpoint is skipped, with one line on stderr naming it and
why, and the run resumes from the one before, finishing as an uninterrupted run does."""

import torch
import pytest

from obliviate.train import TrainConfig, train


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))


def _batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(5, 3, generator=g)


def _loss(m, b, s):
    return {"mse": ((m(b) - b.sum(1, keepdim=True)) ** 2).mean()}


CFG = TrainConfig(steps=6, lr=1e-2, checkpoint_every=2, keep_checkpoints=3, log_every=1, progress=False)


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


CORRUPTIONS = {
    "truncated weights": (lambda d: _truncate(d / "trainable.safetensors"), "trainable.safetensors does not load"),
    "truncated state.pt": (lambda d: _truncate(d / "state.pt"), "state.pt does not load"),
    "trainer_state.json not JSON": (lambda d: (d / "trainer_state.json").write_text('{"step": 4'),
                                    "trainer_state.json does not load"),
    "trainer_state.json without a step": (lambda d: (d / "trainer_state.json").write_text('{"step": "four"}'),
                                          "trainer_state.json holds no step"),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_resume_skips_a_corrupt_last_checkpoint_for_the_one_before(tmp_path, caplog, corruption):
    ref = _model()
    train(ref, _loss, _batch, CFG, tmp_path / "ref")

    model = _model()
    run = tmp_path / "run"

    class Killed(Exception):
        pass

    def killing(m, b, s):
        if s == 5:
            raise Killed
        return _loss(m, b, s)

    with pytest.raises(Killed):
        train(model, killing, _batch, CFG, run)
    ckpts = sorted((run / "checkpoints").glob("step_*"))
    assert [p.name for p in ckpts] == ["step_00000002", "step_00000004"]
    corrupt, why = CORRUPTIONS[corruption]
    corrupt(ckpts[-1])
    caplog.clear()

    resumed = _model()
    summary = train(resumed, _loss, _batch, CFG, run)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("obliviate")]  # a warning, logged
    assert len(lines) == 1
    assert "skipping checkpoint" in lines[0] and "step_00000004" in lines[0] and why in lines[0]
    assert "resuming from step_00000002 instead" in lines[0]
    assert summary["resumed_from"] == 2
    for a, b in zip(ref.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def test_resume_with_no_checkpoint_that_loads_starts_from_step_0(tmp_path, caplog):
    run = tmp_path / "run"

    class Killed(Exception):
        pass

    def killing(m, b, s):
        if s == 3:
            raise Killed
        return _loss(m, b, s)

    with pytest.raises(Killed):
        train(_model(), killing, _batch, CFG, run)
    _truncate(run / "checkpoints" / "step_00000002" / "state.pt")
    caplog.clear()
    summary = train(_model(), _loss, _batch, CFG, run)
    assert "starting from step 0" in caplog.text
    assert summary["resumed_from"] == 0
