"""Sizes a world config implies (shared by the world tests)."""


def n_lookalikes(cfg) -> int:
    """Look-alike diseases a world has: min(n_lookalike, n_forget) near the forget diseases, and the same
    proportion of the holdout diseases."""
    twins = min(cfg.n_lookalike, cfg.n_forget)
    return twins + (round(cfg.n_holdout * twins / cfg.n_forget) if cfg.n_forget else 0)
