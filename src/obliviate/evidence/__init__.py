"""The evidence around the attacks: the harness that runs them (:mod:`~obliviate.evidence.harness`) with
each attack's defaults (:mod:`~obliviate.evidence.attack_table`), the controls it calibrates them on, the
verdict and its own error rates, and the metric trust table (docs/evaluation.md). It sits above
:mod:`obliviate.attacks`, which never imports it: an attack is one file that knows nothing of the verdict.
"""
