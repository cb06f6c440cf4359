"""The REINFORCE-learned retain weight alpha of the function-specific reproduction (Atil, Gupta, Passonneau
2026), a reconstruction from the paper's summary: :func:`reinforce_alpha` is the generic loop,
:func:`learn_alpha_unlearn` runs it with RMU / cosine RMU through the one training loop (the loop and its
settings: docs/recipes.md).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from obliviate.config import to_dict
from obliviate.errors import ConfigError, DataError
from obliviate.eval import qa_accuracy, s_unlearning
from obliviate.unlearning.engine import UnlearnConfig
from obliviate.unlearning.paired import PairedData
from obliviate.unlearning.reference import Reference
from obliviate.train.distributed import to_device
from obliviate.methods import build_method
from obliviate.runs.report import _plt, save_figure
from obliviate.runs.results import atomic_write_json
from obliviate.train import TrainConfig, train as train_loop

META_METHODS = ("rmu", "cosine_rmu")
"""Methods whose retain weight ``alpha`` :func:`learn_alpha_unlearn` can learn."""


def reinforce_update(mu: float, log_alphas: Sequence[float], rewards: Sequence[float], sigma: float,
                     eta: float) -> float:
    """mu + eta * mean_i (R_i - mean R) * (log alpha_i - mu) / sigma^2."""
    la = np.asarray(log_alphas, dtype=np.float64)
    r = np.asarray(rewards, dtype=np.float64)
    if la.shape != r.shape or la.size == 0:
        raise ConfigError(f"need as many rewards as samples (got {la.size} samples, {r.size} rewards)")
    if sigma <= 0:
        raise ConfigError(f"sigma must be > 0, got {sigma}")
    return float(mu + eta * np.mean((r - r.mean()) * (la - mu)) / sigma**2)


def reinforce_alpha(state: Any, branch_fn: Callable[[Any, float], tuple[Any, float]], mu0: float,
                    outer_steps: int, K: int = 4, sigma: float = 0.5, eta: float = 0.05, seed: int = 0,
                    callback: Callable[[dict], None] | None = None) -> tuple[Any, dict]:
    """Run the REINFORCE outer loop; return (state of the last chosen branch, trajectory).

    ``trajectory = {"mu0", "sigma", "eta", "K", "steps": [...], "final_mu", "final_alpha"}``;
    each step records ``mu`` (before the update), ``log_alphas``, ``alphas``, ``rewards``,
    ``chosen`` (index of the best branch), ``chosen_alpha``, ``chosen_reward`` and
    ``mu_next``. Only the best branch's state is kept in memory at any time.
    """
    if outer_steps < 1 or K < 1:
        raise ConfigError(f"outer_steps and K must be >= 1, got outer_steps={outer_steps}, K={K}")
    rng = np.random.default_rng(seed)
    mu = float(mu0)
    steps = []
    for t in range(outer_steps):
        log_alphas = mu + sigma * rng.standard_normal(K)
        rewards, best_state, best = [], None, -1
        for i, la in enumerate(log_alphas):
            new_state, reward = branch_fn(state, float(math.exp(la)))
            reward = float(reward)
            if not math.isfinite(reward):
                raise ConfigError(f"reward of branch {i} at outer step {t} is {reward}")
            rewards.append(reward)
            if best < 0 or reward > rewards[best]:
                best, best_state = i, new_state
        mu_next = reinforce_update(mu, log_alphas, rewards, sigma, eta)
        rec = {"step": t, "mu": mu, "log_alphas": [float(x) for x in log_alphas],
               "alphas": [float(math.exp(x)) for x in log_alphas], "rewards": rewards, "chosen": best,
               "chosen_alpha": float(math.exp(log_alphas[best])), "chosen_reward": rewards[best],
               "mu_next": mu_next}
        steps.append(rec)
        if callback is not None:
            callback(rec)
        state, mu = best_state, mu_next
    traj = {"mu0": float(mu0), "sigma": sigma, "eta": eta, "K": K, "steps": steps, "final_mu": mu,
            "final_alpha": float(math.exp(mu))}
    return state, traj


# ------------------------------------------------------------------ held-out splits and rewards


def split_holdout(items: Sequence, frac: float = 0.25, seed: int = 0) -> tuple[list, list]:
    """A seeded ``frac`` share of ``items`` (at least one when there are >= 2) and the rest."""
    if not 0 < frac < 1:
        raise ConfigError(f"holdout fraction must be in (0, 1), got {frac}")
    n = len(items)
    if n < 2:
        raise DataError(f"need at least 2 items to split off a held-out share, got {n}")
    k = min(n - 1, max(1, int(round(frac * n))))
    perm = np.random.default_rng(seed).permutation(n)
    meta = sorted(perm[:k].tolist())
    rest = sorted(perm[k:].tolist())
    return [items[i] for i in meta], [items[i] for i in rest]


def world_meta_splits(world, frac: float = 0.25, seed: int = 0) -> dict[str, list[dict]]:
    """Disjoint reward ("meta") and final-evaluation splits of the world's facts.

    Returns ``{"meta_forget", "final_forget", "meta_retain", "final_retain"}``: a seeded
    ``frac`` of the forget facts and of the retain facts for the REINFORCE reward, and the
    remaining ``1 - frac`` for the final evaluation. Unlearning still trains on every
    forget fact; only the evaluation questions are split.
    """
    mf, ff = split_holdout(world.facts_by_split("forget"), frac, seed)
    mr, fr = split_holdout(world.facts_by_split("retain"), frac, seed + 1)
    return {"meta_forget": mf, "final_forget": ff, "meta_retain": mr, "final_retain": fr}


def qa_s_reward(base_model, tokenizer, meta_forget: list[dict], meta_retain: list[dict],
                metric: str = "exact_match", max_new_tokens: int = 24) -> Callable[[Any], float]:
    """Reward ``fn(model) -> S`` = S-unlearning of greedy QA on the meta splits (chance 0).

    A0 and M0 (the base model's forget and retain QA scores, ``metric`` = "exact_match"
    or "rouge_l") are measured once, here.
    """

    if metric not in ("exact_match", "rouge_l"):
        raise ConfigError(f"reward metric {metric!r} is not one of 'exact_match', 'rouge_l'")

    def score(model, facts):
        return qa_accuracy(model, tokenizer, [f["question"] for f in facts], [f["answer"] for f in facts],
                           max_new_tokens=max_new_tokens)[metric]

    a0, m0 = score(base_model, meta_forget), score(base_model, meta_retain)

    def reward(model) -> float:
        return s_unlearning(a0, score(model, meta_forget), m0, score(model, meta_retain), chance=0.0)["s"]

    reward.base = {"forget": a0, "retain": m0}
    return reward


# ------------------------------------------------------------------ unlearning with a learned alpha


def learn_alpha_unlearn(model, tokenizer, method_name: str, forget: list[tuple[str, str]],
                        retain: list[tuple[str, str]], meta_eval_fn: Callable[[Any], float],
                        outer_steps: int = 5,
                        K: int = 4, M: int = 10, *, sigma: float = 0.5, eta: float = 0.05,
                        alpha0: float | None = None, params: dict | None = None, train=None,
                        batch_size: int = 16, seed: int = 0, out_dir: str | Path | None = None):
    """Unlearn with ``method_name`` ("rmu" or "cosine_rmu") while learning its alpha by REINFORCE.

    ``forget``/``retain`` are (prompt, answer) pairs as for :func:`obliviate.unlearning.engine.unlearn`;
    ``meta_eval_fn(model) -> reward`` scores a branch on the held-out meta splits (e.g.
    :func:`qa_s_reward` on :func:`world_meta_splits`). ``params`` override the method's
    config (``alpha`` is set per branch); ``alpha0`` defaults to the config's alpha;
    ``train`` is the :class:`~obliviate.train.TrainConfig` of each branch (its ``steps``
    is replaced by M). Total unlearning steps = outer_steps * M (plus K - 1 discarded
    branches per outer step). With ``out_dir``, writes ``alpha_trajectory.json`` and
    ``alpha_trajectory.png`` there. Returns (final model, trajectory).
    """
    import torch

    if method_name not in META_METHODS:
        raise ConfigError(f"learned alpha supports methods {', '.join(META_METHODS)}, got {method_name!r}")
    params = dict(params or {})
    params.pop("alpha", None)
    if alpha0 is None:
        alpha0 = build_method(method_name, params).cfg.alpha
    if alpha0 <= 0:
        raise ConfigError(f"alpha0 must be > 0 (the policy is over log alpha), got {alpha0}")
    tcfg = train if train is not None else UnlearnConfig().train
    data = PairedData(tokenizer, forget, retain, batch_size, seed)
    device = next(model.parameters()).device
    ref = Reference(model, shared=False)  # the original model, frozen for the whole run

    def branch(state: dict, alpha: float):
        m = copy.deepcopy(state["model"])
        start = state["step"]
        method = build_method(method_name, {**params, "alpha": alpha})
        patterns = method.trainable(m)
        method.setup(m, ref, to_device(data(start), device))
        cfg = TrainConfig(**{**to_dict(tcfg), "steps": M, "trainable": patterns, "progress": False})
        train_loop(m, lambda mm, b, s: method.loss(mm, to_device(b, device), ref), lambda s: data(start + s),
                   cfg)
        for p in m.parameters():
            p.requires_grad_(True)
        m.eval()
        with torch.no_grad():
            reward = float(meta_eval_fn(m))
        return {"model": m, "step": start + M}, reward

    state, traj = reinforce_alpha({"model": model, "step": 0}, branch, math.log(alpha0), outer_steps, K=K,
                                  sigma=sigma, eta=eta, seed=seed)
    traj.update(method=method_name, M=M, alpha0=float(alpha0))
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(out / "alpha_trajectory.json", traj)
        plot_alpha_trajectory(traj, out / "alpha_trajectory.png")
    return state["model"], traj


def plot_alpha_trajectory(traj: dict, png: str | Path, title: str | None = None) -> Path:
    """Sampled alphas (coloured by reward), exp(mu) and the chosen alpha per outer step; rewards below."""

    plt = _plt()
    steps = traj["steps"]
    x = [s["step"] + 1 for s in steps]
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(6.5, 5.5), sharex=True, layout="constrained")
    xs = [s["step"] + 1 for s in steps for _ in s["alphas"]]
    sc = ax.scatter(xs, [a for s in steps for a in s["alphas"]], c=[r for s in steps for r in s["rewards"]],
                    cmap="viridis", s=22, label="sampled alpha")
    fig.colorbar(sc, ax=[ax, bx], label="reward")
    ax.plot([0] + x, [math.exp(steps[0]["mu"])] + [math.exp(s["mu_next"]) for s in steps], "k-", lw=1.5,
            label="exp(mu) after step")
    ax.plot(x, [s["chosen_alpha"] for s in steps], "rx", ms=8, label="chosen alpha")
    ax.set_yscale("log")
    ax.set_ylabel("alpha")
    ax.set_title(title or f"learned retain weight ({traj.get('method', 'REINFORCE')})")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    bx.plot(x, [float(np.mean(s["rewards"])) for s in steps], "o-", label="mean reward")
    bx.plot(x, [s["chosen_reward"] for s in steps], "s--", label="best reward")
    bx.set_xlabel("outer step")
    bx.set_ylabel("reward (S)")
    bx.legend(fontsize=8)
    bx.grid(alpha=0.3)
    return save_figure(fig, png)
