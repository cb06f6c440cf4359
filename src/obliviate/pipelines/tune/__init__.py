"""Tuning a method for a model and task (``obliviate tune``, ``unlearn --tune``, ``compare --tune``): a
budgeted grid on a validation split under a retain constraint (:mod:`.run`; docs/methods.md)."""

from obliviate.pipelines.tune.run import (TUNED_PARAM, TuneConfig, choose, grid, settings_of, trial_config,
                                          tune,
                                        validation_split, write_tuned_settings, write_tune_report)

__all__ = ["TUNED_PARAM", "TuneConfig", "choose", "grid", "settings_of", "trial_config", "tune",
           "validation_split",
           "write_tuned_settings", "write_tune_report"]
