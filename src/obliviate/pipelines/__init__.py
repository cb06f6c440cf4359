"""The pipelines: one run per job, called alike by the command line (``obliviate unlearn``, ``compare``,
``attack``, ``tune``, ``tofu``, ``bench``) and the Python API (:mod:`obliviate.api`). A command module parses
its arguments and calls one of these; the paper reproductions (:mod:`obliviate.papers`) are built on them."""
