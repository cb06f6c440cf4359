"""Every method the comparison runs documents its search space for tune, and a bad one is refused at import."""

import dataclasses

import pytest

from obliviate.errors import ConfigError
from obliviate.methods import METHODS, method_names
from obliviate.pipelines.tune.run import TuneConfig, grid, search_space
from obliviate.unlearning.contract import Method, check_search
from obliviate.unlearning.engine import method_run_config


@pytest.mark.parametrize("name", method_names())  # compare's default: every registered method
def test_every_training_method_documents_a_search_space_that_fills_the_budget(name):
    cls = METHODS[name]
    if cls.kind == "edit":  # no lr or steps: compare runs it untuned, and tune refuses it in one line
        with pytest.raises(ConfigError, match="edit method"):
            search_space(name, TuneConfig())
        return
    assert cls.search, f"method {name!r} documents no search space (`search=` at its @register)"
    budget = TuneConfig().budget
    for preset in ("tiny", "paper"):
        run = method_run_config(name, None, preset, 0)[0]
        trials = grid(run, TuneConfig())
        # the same number of distinct trials for every method, the run as given first
        assert len(trials) == budget, (name, preset, len(trials))
        assert trials[0]["lr"] == run.train.lr and trials[0]["steps"] == run.train.steps
        assert all(t["lr"] > 0 and t["steps"] >= 1 and all(v > 0 for v in t["params"].values()) for t in trials)
        # each trial's settings make a valid run of the method
        for t in (trials[0], trials[-1]):
            method_run_config(name, {"train": {"lr": t["lr"], "steps": t["steps"]}, "params": t["params"]},
                              preset, 0)


@dataclasses.dataclass
class _Cfg:
    alpha: float = 1.0
    mode: str = "a"
    flag: bool = False


class _M(Method):
    config_cls = _Cfg

    def loss(self, model, batch, ref):
        return {}


@pytest.mark.parametrize("search,needle", [
    ({"beta": [0.5, 1]}, "'beta' is neither lr, steps nor a numeric field"),
    ({"mode": [1, 2]}, "'mode' is neither"),
    ({"flag": [1, 2]}, "'flag' is neither"),
    ({"lr": [0.5, 2]}, "must hold the factor 1"),
    ({"lr": [1, 1]}, "no factor twice"),
    ({"lr": []}, "non-empty list of numbers > 0"),
    ({"alpha": [0, 1]}, "numbers > 0"),
    ({}, "non-empty dict"),
])
def test_a_bad_search_space_is_refused_in_one_line(search, needle):
    with pytest.raises(ConfigError, match="method 'x': search") as e:
        check_search("x", _M, search)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_search_space_is_read_in_order_with_float_factors_and_tune_space_overrides_it():
    assert check_search("x", _M, {"lr": [0.5, 1], "alpha": [1, 2]}) == {"lr": [0.5, 1.0], "alpha": [1.0, 2.0]}
    space = search_space("npo", TuneConfig(space={"steps": [1], "beta": [0.5, 1]}))
    assert list(space) == ["lr", "steps", "alpha", "beta"] and space["steps"] == [1.0]
    with pytest.raises(ConfigError, match="tune.space.retain"):  # a non-numeric setting of the method
        search_space("npo", TuneConfig(space={"retain": [1, 2]}))


def test_a_method_without_a_space_or_a_setting_that_cannot_be_scaled_is_one_line(monkeypatch):
    monkeypatch.setattr(METHODS["npo"], "search", None)
    with pytest.raises(ConfigError, match="'npo' documents no search space"):
        search_space("npo", TuneConfig())
    assert list(search_space("npo", TuneConfig(space={"lr": [1, 2]}))) == ["lr", "steps"]  # tune.space suffices
    paper_rmu = method_run_config("rmu", None, "paper", 0)[0]  # its coef_norm is 0 there: nothing to scale
    with pytest.raises(ConfigError, match="'rmu''s coef_norm is 0.0: a search axis scales a number > 0"):
        grid(paper_rmu, TuneConfig(space={"coef_norm": [1, 2]}))
    with pytest.raises(ConfigError, match="tune.space.alpha"):
        TuneConfig(space={"alpha": [0, 1]})
