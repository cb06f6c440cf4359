"""The machinery every unlearning method runs on: the contract and registry (:mod:`.contract`), the shared
objectives (:mod:`.objectives`), the paired batches (:mod:`.paired`), the frozen reference (:mod:`.reference`)
and the one executor (:mod:`.engine`). The methods themselves are files of :mod:`obliviate.methods`.

Not to be confused with :func:`obliviate.unlearn`, the API call that runs this machinery on a model.
"""
