"""The method contract: :class:`Method`, the base class of every registered method, documented once, here.

A method is one file: a config dataclass and a :class:`Method` subclass registered with
:func:`obliviate.methods.register`. The engine (:mod:`obliviate.methods.engine`) calls every hook;
the defaults do nothing, so a method writes only what it changes. :func:`check_method_class` runs at
registration and refuses a class that breaks the contract.
"""

from __future__ import annotations

from typing import ClassVar

from obliviate.errors import ConfigError


class Method:
    """A training method (``kind = "train"``) or an edit method (``kind = "edit"``).

    A training method writes ``trainable`` and ``loss``; the training loop sums its named terms and
    logs each one. An edit method writes ``edit`` and runs without the training loop. The
    declarations below are class attributes; where one depends on the config, set it in
    ``__init__`` or make it a property.
    """

    kind: ClassVar[str] = "train"
    """``"train"`` (``trainable`` + ``loss``, through the training loop) or ``"edit"`` (``edit``)."""
    config_cls: ClassVar[type]
    """The config dataclass (defaults documented there)."""
    needs_reference: bool = False
    """It reads a frozen reference ``ref``; without it ``ref`` is a :class:`NoReference`, whose every
    use is a one-line error naming the method."""
    needs_idk: bool = False
    """Its batches carry ``idk``: the forget questions with preferred answers (refusals, unless :meth:`winners`
    chooses others)."""
    preferred: ClassVar[str] = "refusal answers"
    """What its preferred answers are, for the methods table (where ``needs_idk``)."""
    needs_preference_data: ClassVar[bool] = False
    """It runs only on a task whose ``idk`` is preference data (:class:`~obliviate.tasks.base.PreferredAnswers`):
    a comparison leaves it out elsewhere."""
    compare_needs: ClassVar[dict[str, str]] = {}
    """Config keys that must be set (non-empty) for a comparison to run it, each with what it is: without them the
    method would run on a stand-in (``probe_unlearn`` would fit its probes on one training batch), so ``compare``
    lists it as skipped, with the reason, rather than run it so."""
    multiprocess_unsupported: str | None = None
    """Why it cannot run in several processes (None: it can; :func:`obliviate.train.distributed.check_method`,
    docs/distributed.md)."""
    sharding_unsupported: str | None = None
    """Why it cannot run on a sharded model (None: it can)."""

    # Set by :func:`obliviate.methods.register`: name, paper, equation, trains, presets.
    name: ClassVar[str]
    paper: ClassVar[str]
    equation: ClassVar[str]
    trains: ClassVar[str]
    presets: ClassVar[dict]

    def __init__(self, cfg):
        self.cfg = cfg

    # ------------------------------------------------------------------ what a method writes

    def trainable(self, model) -> list[str]:
        """fnmatch patterns of the parameters it trains (a training method writes it)."""
        raise NotImplementedError

    def loss(self, model, batch: dict, ref) -> dict:
        """The named, already weighted loss terms ``{name: scalar tensor}`` of one paired batch
        ``{"forget": ..., "retain": ..., ["idk": ...]}``; each sub-batch has ``input_ids``,
        ``attention_mask``, ``labels`` and ``index`` (example numbers). A training method writes it."""
        raise NotImplementedError

    def edit(self, model, tokenizer, data) -> dict:
        """Edit ``model`` in place from ``data`` (``concept_sentences``, ``neutral_sentences``); returns a
        JSON-serialisable summary. An edit method writes it."""
        raise NotImplementedError

    # ------------------------------------------------------------------ hooks (no-ops by default)

    def cached_reference_keys(self) -> tuple[str, ...]:
        """Sub-batches ("forget", "idk") whose reference term is a fixed per-sequence log-probability,
        computed once before training (:func:`obliviate.methods.engine.make_reference`); needs
        ``needs_reference``. Default: none."""
        return ()

    def cached_token_reference_keys(self) -> tuple[str, ...]:
        """Sub-batches ("forget") whose reference term is built from fixed per-token log-probabilities, such as
        ATWU's weighted ``sum_t z_t log p_ref(y_t)`` with weights that change every step: the token log-probabilities
        are computed once before training (``ref.token_logprobs``); needs ``needs_reference``. Default: none."""
        return ()

    def check(self, model) -> None:
        """Refuse, in one line, settings that do not fit ``model`` and need no forward pass to tell (a layer
        index out of range): run before the output directory is prepared
        (:func:`obliviate.methods.engine.check_unlearn_model`). A training method's :meth:`trainable` is
        checked there too, so only what it does not cover goes here. Default: nothing more."""

    def fit(self, model, tokenizer) -> None:
        """Fitted on the frozen model before training (e.g. probe directions, SAEs)."""

    def winners(self, model, tokenizer, forget, idk: list[str] | None, prompt) -> list[str] | None:
        """The preferred answers of a method with ``needs_idk``, paired with the forget QA pairs (answer ``i % n``
        with pair ``i``), chosen before any step from the model as it is (the reference), the forget
        :class:`~obliviate.tasks.Data`, the task's ``idk`` and its prompt format. Default None: the task's ``idk``,
        else :data:`~obliviate.tasks.base.IDK_ANSWERS` (IdkDPO's refusals)."""
        return None

    def on_data(self, sizes: dict) -> None:
        """The encoded data's sizes before step 0: ``{"forget", "retain", "steps_per_epoch", "steps"}`` (sequences;
        the steps of one pass over the forget set; the run's steps), for a method that counts epochs or splits the
        run into phases. Default: nothing."""

    def reference_depth(self) -> int | None:
        """The deepest decoder layer whose hidden states the method reads of the reference, when that is all it
        reads of it (``ref.hidden`` only): the engine then keeps a frozen copy of the layers up to it alone
        (:func:`obliviate.models.layers.prefix_copy`). Asked after :meth:`trainable`. Default None: it may read
        anything, and a whole copy is kept."""
        return None

    def cached_hidden_layers(self) -> dict[str, tuple[int, ...]]:
        """Sub-sets ("retain") and layers whose frozen hidden states are all the method's loss reads of the
        reference (``ref.hidden(batch, layer, key)``, with the padding masked out): the engine computes them once
        for the examples of the run's steps and holds no model (:mod:`obliviate.methods.reference`); ``setup``
        still sees the model as its reference. Asked after :meth:`trainable`. Default: none."""
        return {}

    def cached_logit_keys(self) -> tuple[str, ...]:
        """Sub-sets ("forget") whose frozen logits at the labelled positions are all the method's loss reads of the
        reference (``ref.labelled_logits(batch, key)``): the engine computes them once for the examples of the run's
        steps and holds no model, unless they would take more memory than the whole copy. Default: none."""
        return ()

    def setup(self, model, ref, batch: dict) -> None:
        """One-off state before step 0, from the step-0 batch (``{"forget", "retain", ["idk"]}``); ``model`` has
        not been trained yet, and ``ref`` still answers on any input."""

    def scorer_state(self) -> dict:
        """Learned state beside the weights, kept in checkpoints; ``{}`` (the default): none."""
        return {}

    def load_scorer_state(self, state: dict) -> None:
        """Restore what :meth:`scorer_state` returned (a resumed run)."""

    # A method that learns per-token importance (ATWU) also has ``token_scores(model, batch)``, read by
    # reports (:mod:`obliviate.eval.token_scores`), never by the engine.


class NoReference:
    """What ``ref`` is for a method that did not declare ``needs_reference``: any use is a clear error."""

    def __init__(self, method: str):
        self._method = method

    def __getattr__(self, name):
        raise ConfigError(f"method {self._method!r} uses the reference model (ref.{name}) but does not declare "
                          "needs_reference = True")

    def __bool__(self) -> bool:
        return False


def check_method_class(name: str, cls: type) -> None:
    """Refuse a class that breaks the contract (at registration, i.e. at import time)."""
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise ConfigError(f"method {name!r}: must subclass obliviate.methods.contract.Method")
    if cls.kind not in ("train", "edit"):
        raise ConfigError(f"method {name!r}: kind must be 'train' or 'edit', got {cls.kind!r}")
    need = ("edit",) if cls.kind == "edit" else ("trainable", "loss")
    missing = [h for h in need if getattr(cls, h) is getattr(Method, h)]
    if not hasattr(cls, "config_cls"):
        missing.append("config_cls")
    if missing:
        raise ConfigError(f"method {name!r} ({cls.kind}) lacks {', '.join(missing)}")
    for hook in ("cached_reference_keys", "cached_token_reference_keys", "cached_logit_keys"):
        if _overrides(cls, hook) and not cls.needs_reference:
            raise ConfigError(f"method {name!r} has {hook} but needs_reference is False")
    if _overrides(cls, "scorer_state") != _overrides(cls, "load_scorer_state"):
        raise ConfigError(f"method {name!r}: scorer_state and load_scorer_state go together")


def _overrides(cls: type, hook: str) -> bool:
    return getattr(cls, hook) is not getattr(Method, hook)
