"""Tuning a method for a model and task (``obliviate tune``, ``unlearn --tune``, ``compare --tune``): a
budgeted grid over the method's search space on a validation split under a keep constraint (:mod:`.run`), and
the settings tuned for each method on the world, committed beside the methods (:mod:`.committed`,
``compare --tuned``; docs/methods.md)."""

from obliviate.pipelines.tune.run import (SELECTION_RULE, TuneConfig, choose, grid, keep_shares, meets,
                                          search_space, settings_of, trial_config, tune, validation_split,
                                          write_tuned_settings, write_tune_report)

__all__ = ["SELECTION_RULE", "TuneConfig", "choose", "grid", "keep_shares", "meets", "search_space",
           "settings_of", "trial_config", "tune", "validation_split", "write_tuned_settings", "write_tune_report"]
