"""The TOFU protocol, ``obliviate tofu``: the ``tofu:<forget>`` task unlearned on tiny models trained here (or
on two given ones) and scored with the TOFU metric set (:mod:`.run`; docs/tofu.md)."""

from obliviate.pipelines.tofu.run import (EVAL_SPLITS, FORGET_SPLITS, REQUIRED_FILES, TOKENIZER_SPLITS,
                                          GivenModels,
                                        TofuBases, TofuConfig, check_run, check_tofu_data, eval_splits,
                                        given_bases,
                                        prepare_bases, protocol_task, required_files, run_tofu, tofu_config,
                                        tofu_model_config, unlearn_and_evaluate, unlearn_config)

__all__ = ["EVAL_SPLITS", "FORGET_SPLITS", "REQUIRED_FILES", "TOKENIZER_SPLITS", "GivenModels", "TofuBases",
           "TofuConfig", "check_run", "check_tofu_data", "eval_splits", "given_bases", "prepare_bases",
           "protocol_task", "required_files", "run_tofu", "tofu_config", "tofu_model_config",
           "unlearn_and_evaluate", "unlearn_config"]
