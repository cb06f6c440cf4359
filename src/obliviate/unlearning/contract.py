"""The method contract: :class:`Method`, the base class every method subclasses, and its registration.

A method is one file of :mod:`obliviate.methods`: a config dataclass and a :class:`Method` subclass registered
with :func:`register` (its paper, objective and presets). :data:`METHODS` finds it by name; the engine
(:mod:`obliviate.unlearning.engine`) calls every hook, and the defaults here are what a method does not write.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
from typing import ClassVar

from obliviate.config import from_dict
from obliviate.errors import ConfigError
from obliviate.registry import Registry

class Method:
    """A training method (``kind = "train"``) or an edit method (``kind = "edit"``).

    A training method writes ``loss`` (and ``trainable``, unless it trains every parameter); the training loop
    sums its named terms and logs each one. An edit method writes ``edit`` and runs without the training loop.
    The declarations below are class attributes; where one depends on the config, set it in ``__init__`` after
    ``super().__init__(cfg)``.
    """

    kind: ClassVar[str] = "train"
    """``"train"`` (``trainable`` + ``loss``, through the training loop) or ``"edit"`` (``edit``)."""
    config_cls: ClassVar[type]
    """The config dataclass (defaults documented there)."""
    needs_reference: bool = False
    """It reads a frozen reference ``ref``; without it ``ref`` is a :class:`NoReference`, whose every use is a
    one-line error naming the method. Default: False, and True where the config's ``retain`` is ``"kl"`` (a KL
    to the frozen model: :meth:`__init__` sets it); a method whose forget term reads the reference declares it
    True."""
    needs_idk: bool = False
    """Its batches carry ``idk``: the forget questions with preferred answers (refusals, unless
    :meth:`winners` chooses others)."""
    preferred: ClassVar[str] = "refusal answers"
    """What its preferred answers are, for the methods table (where ``needs_idk``)."""
    needs_preference_data: ClassVar[bool] = False
    """It runs only on a task whose ``idk`` is preference data
    (:class:`~obliviate.tasks.base.PreferredAnswers`): a comparison leaves it out elsewhere."""
    compare_needs: ClassVar[dict[str, str]] = {}
    """Config keys that must be set (non-empty) for a comparison to run it, each with what it is: without them
    the method would run on a stand-in (``probe_unlearn`` would fit its probes on one training batch), so
    ``compare`` lists it as skipped, with the reason, rather than run it so."""
    multiprocess_unsupported: str | None = None
    """Why it cannot run in several processes (None: it can; :func:`obliviate.train.distributed.check_method`,
    docs/distributed.md)."""
    sharding_unsupported: str | None = None
    """Why it cannot run on a sharded model (None: it can)."""

    # Set by :func:`register`: name, paper, equation, trains, presets, search.
    name: ClassVar[str]
    paper: ClassVar[str]
    equation: ClassVar[str]
    trains: ClassVar[str]
    presets: ClassVar[dict]
    search: ClassVar[dict | None] = None
    """The search space ``tune`` reads (:func:`check_search`); None: the method documents none."""

    counts_calls: ClassVar[bool] = False
    """True: ``self.calls`` holds how many times ``loss`` has run (the method counts it, e.g. to seed per-step
    sampling), kept in checkpoints by the default :meth:`scorer_state`."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.calls = 0
        if getattr(cfg, "retain", None) == "kl":  # the retain term is a KL to the frozen model
            self.needs_reference = True

    # ------------------------------------------------------------------ what a method writes

    def trainable(self, model) -> list[str]:
        """fnmatch patterns of the parameters it trains. Default: all of them (``["*"]``; ``trains="all
        parameters"`` at :func:`register`); a method that trains some layers writes it."""
        return ["*"]

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
        computed once before training (:func:`obliviate.unlearning.reference.make_reference`); needs
        ``needs_reference``. Default: none."""
        return ()

    def cached_token_reference_keys(self) -> tuple[str, ...]:
        """Sub-batches ("forget") whose reference term is built from fixed per-token log-probabilities, such
        as ATWU's weighted ``sum_t z_t log p_ref(y_t)`` with weights that change every step: the token
        log-probabilities are computed once before training (``ref.token_logprobs``); needs
        ``needs_reference``. Default: none."""
        return ()

    def check(self, model) -> None:
        """Refuse, in one line, settings that do not fit ``model`` and need no forward pass to tell (a layer
        index out of range): run before the output directory is prepared
        (:func:`obliviate.unlearning.engine.check_unlearn_run`). A training method's :meth:`trainable` is
        checked there too, so only what it does not cover goes here. Default: nothing more."""

    def fit(self, model, tokenizer) -> None:
        """Fitted on the frozen model before training (e.g. probe directions, SAEs)."""

    def winners(self, model, tokenizer, forget, idk: list[str] | None, prompt) -> list[str] | None:
        """The preferred answers of a method with ``needs_idk``, paired with the forget QA pairs (answer ``i %
        n`` with pair ``i``), chosen before any step from the model as it is (the reference), the forget
        :class:`~obliviate.tasks.Data`, the task's ``idk`` and its prompt format. Default None: the task's
        ``idk``, else :data:`~obliviate.tasks.base.IDK_ANSWERS` (IdkDPO's refusals)."""
        return None

    def on_data(self, sizes: dict) -> None:
        """The encoded data's sizes before step 0: ``{"forget", "retain", "steps_per_epoch", "steps"}``
        (sequences; the steps of one pass over the forget set; the run's steps), for a method that counts
        epochs or splits the run into phases. Default: nothing."""

    def reference_depth(self) -> int | None:
        """The deepest decoder layer whose hidden states the method reads of the reference, when that is all
        it reads of it (``ref.hidden`` only): the engine then keeps a frozen copy of the layers up to it alone
        (:func:`obliviate.models.layers.prefix_copy`). Asked after :meth:`trainable`. Default None: it may
        read anything, and a whole copy is kept."""
        return None

    def cached_hidden_layers(self) -> dict[str, tuple[int, ...]]:
        """Sub-sets ("retain") and layers whose frozen hidden states are all the method's loss reads of the
        reference (``ref.hidden(batch, layer, key)``, with the padding masked out): the engine computes them
        once for the examples of the run's steps and holds no model (:mod:`obliviate.unlearning.reference`);
        ``setup`` still sees the model as its reference. Asked after :meth:`trainable`. Default: none."""
        return {}

    def cached_logit_keys(self) -> tuple[str, ...]:
        """Sub-sets ("forget") whose frozen logits at the labelled positions are all the method's loss reads
        of the reference (``ref.labelled_logits(batch, key)``): the engine computes them once for the examples
        of the run's steps and holds no model, unless they would take more memory than the whole copy.
        Default: none."""
        return ()

    def setup(self, model, ref, batch: dict) -> None:
        """One-off state before step 0, from the step-0 batch (``{"forget", "retain", ["idk"]}``); ``model``
        has not been trained yet, and ``ref`` still answers on any input."""

    def scorer_state(self) -> dict:
        """Learned state beside the weights, kept in checkpoints; the default: ``{"calls": n}`` for a method
        that :attr:`counts_calls`, else ``{}``."""
        return {"calls": self.calls} if self.counts_calls else {}

    def load_scorer_state(self, state: dict) -> None:
        """Restore what :meth:`scorer_state` returned (a resumed run)."""
        if self.counts_calls:
            self.calls = int(state.get("calls", 0))

    # A method that learns per-token importance (ATWU) also has ``token_scores(model, batch)``, read by
    # reports (:mod:`obliviate.eval.token_scores`), never by the engine.


class NoReference:
    """What ``ref`` is for a method that did not declare ``needs_reference``: any use is a clear error."""

    def __init__(self, method: str):
        self._method = method

    def __getattr__(self, name):
        raise ConfigError(f"method {self._method!r} uses the reference model (ref.{name}) but does not "
                          "declare needs_reference = True")

    def __bool__(self) -> bool:
        return False


def check_method_class(name: str, cls: type) -> None:
    """Refuse a class that breaks the contract (at registration, i.e. at import time)."""
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise ConfigError(f"method {name!r}: must subclass obliviate.unlearning.contract.Method")
    if cls.kind not in ("train", "edit"):
        raise ConfigError(f"method {name!r}: kind must be 'train' or 'edit', got {cls.kind!r}")
    need = ("edit",) if cls.kind == "edit" else ("loss",)
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


METHODS = Registry("method", package="obliviate.methods")
"""``name -> Method subclass``."""

PRESETS = ("tiny", "paper")
"""Every method has these two presets (:func:`method_defaults`):

- ``"tiny"``: for the models obliviate trains itself (the world and TOFU models, under ~100M
  parameters); tuned on world seed 0 (docs/results.md);
- ``"paper"``: the paper's settings, for billion-parameter models.
"""

DEFAULT_PRESETS: dict[str, dict] = {
    "tiny": {"lr": 1e-3, "steps": 50, "params": {}},
    "paper": {"lr": 1e-5, "steps": 125, "params": {}},
}
"""What :func:`register` gives a method for a preset it does not name (and for a key a preset
leaves out). ``paper``: lr 1e-5 for 125 steps, the usual TOFU fine-tuning setting (10 epochs of
the 400 forget10 pairs at batch 32, as in open-unlearning)."""

PRESET_THRESHOLD = 100_000_000
"""Models with fewer parameters than this get the ``"tiny"`` preset (:func:`preset_name`)."""


def _check_presets(name: str, cls: type, presets: dict | None) -> dict[str, dict]:
    """``presets`` completed from :data:`DEFAULT_PRESETS` and checked against ``cls.config_cls``."""
    presets = copy.deepcopy(presets or {})
    where = f"method {name!r}"
    unknown = sorted(set(presets) - set(PRESETS))
    if unknown:
        raise ConfigError(f"{where}: unknown preset {unknown[0]!r} (valid: {', '.join(PRESETS)})")
    config_cls = getattr(cls, "config_cls", None)
    if config_cls is None or not dataclasses.is_dataclass(config_cls):
        raise ConfigError(f"{where}: config_cls must be a dataclass, got {config_cls!r}")
    fields = {f.name for f in dataclasses.fields(config_cls)}
    out = {}
    for preset in PRESETS:
        p = presets.get(preset, {})
        if not isinstance(p, dict):
            raise ConfigError(f"{where}, preset {preset!r}: must be a dict of lr, steps, params, got {p!r}")
        bad = sorted(set(p) - {"lr", "steps", "params"})
        if bad:
            raise ConfigError(f"{where}, preset {preset!r}: unknown key "
                              f"{bad[0]!r} (valid: lr, steps, params)")
        full = {**copy.deepcopy(DEFAULT_PRESETS[preset]), **p}
        lr, steps, params = full["lr"], full["steps"], full["params"]
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
            raise ConfigError(f"{where}, preset {preset!r}: lr must be a number > 0, got {lr!r}")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigError(f"{where}, preset {preset!r}: steps must be an integer >= 1, got {steps!r}")
        if not isinstance(params, dict):
            raise ConfigError(f"{where}, preset {preset!r}: params must be a dict, got {params!r}")
        extra = sorted(set(params) - fields)
        if extra:
            raise ConfigError(f"{where}, preset {preset!r}: {extra[0]!r} is not a field of "
                              f"{config_cls.__name__} (fields: {', '.join(sorted(fields))})")
        out[preset] = {"lr": float(lr), "steps": steps, "params": params}
    return out


def register(name: str, *, paper: str = "", equation: str = "", trains: str = "all parameters",
             presets: dict | None = None, search: dict | None = None):
    """Class decorator: make a method available as ``name``.

    ``paper``: the method's source (shown by ``obliviate methods -v``). ``equation``: its objective in
    one line (forget term; retain term), and ``trains``: which parameters it changes, both shown in
    the generated table of docs/methods.md (:mod:`obliviate.unlearning.docs`). ``presets`` maps a
    preset name (:data:`PRESETS`) to ``{"lr": float, "steps": int, "params": {...}}``, where
    ``params`` override fields of the method's config dataclass. A preset (or a key of one)
    that is not given comes from :data:`DEFAULT_PRESETS`, so a new method needs nothing but
    its own file. Presets are checked here, at import time: a ``params`` key that is not a
    field of ``config_cls`` raises :class:`~obliviate.errors.ConfigError`. ``search``: the method's search
    space for ``tune`` (:func:`check_search`), also checked here.
    """

    def deco(cls):
        if METHODS.registered(name) not in (None, cls):
            raise RuntimeError(f"method {name!r} registered twice")
        check_method_class(name, cls)
        cls.name = name
        cls.paper = paper
        cls.equation = equation
        cls.trains = trains
        cls.presets = _check_presets(name, cls, presets)
        cls.search = None if search is None else check_search(name, cls, search)
        return METHODS.add(name, cls)

    return deco


def method_names() -> list[str]:
    return METHODS.names()


def resolve_method(name: str) -> str:
    """A registered method name, case-insensitively (``NPO`` -> ``npo``, ``grad-diff`` -> ``grad_diff``); a
    one-line error with the closest name otherwise. The one place a user's method name is read."""
    names = method_names()
    key = str(name).strip().lower().replace("-", "_")
    if key in names:
        return key
    close = difflib.get_close_matches(key, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"unknown method {name!r}{hint}; known methods: {', '.join(names)}")


def get_method(name: str) -> type[Method]:
    """The method class called ``name``, or one error line naming it and the known methods."""
    return METHODS.lookup(name)


def method_defaults(name: str, preset: str) -> dict:
    """A copy of method ``name``'s run defaults for ``preset``: ``{"lr", "steps", "params"}``."""
    cls = get_method(name)
    if preset not in cls.presets:
        raise ConfigError(f"unknown preset {preset!r} of method {name!r} (valid: {', '.join(cls.presets)})")
    return copy.deepcopy(cls.presets[preset])


def preset_name(model_or_param_count) -> str:
    """``"tiny"`` for a model (or a parameter count) under :data:`PRESET_THRESHOLD` (100M), else ``"paper"``.

    A model's count is its total number of parameters, embeddings included and tied weights
    counted once (``model.parameters()``). Every model obliviate trains itself is far below
    100M (the world's are a few million); the papers' models are 1B and up.
    """
    n = model_or_param_count
    if not isinstance(n, int) or isinstance(n, bool):
        if not hasattr(n, "parameters"):
            raise ConfigError(f"preset_name: expected a model or a parameter count, got {n!r}")
        n = sum(p.numel() for p in n.parameters())
    if n < 0:
        raise ConfigError(f"preset_name: parameter count must be >= 0, got {n}")
    return "tiny" if n < PRESET_THRESHOLD else "paper"


def build_method(name: str, overrides: dict | None = None, prefix: str | None = None) -> Method:
    """Instantiate method ``name`` with its config from defaults plus ``overrides``; a bad key is named under
    ``prefix``, where the user gave ``overrides`` (``"unlearn.params"``; default ``method.<name>``)."""
    cls = get_method(name)
    cfg = from_dict(cls.config_cls, overrides or {}, prefix=f"method.{name}" if prefix is None else prefix)
    return cls(cfg)


def weighted_search(param: str, factors=(0.3, 1, 3)) -> dict[str, list[float]]:
    """The search space of a method with one weight that trades forgetting against keeping (its retain term's
    weight, most often ``alpha``): lr x 0.3 / 1 / 3, steps x 0.5 / 1 / 2 and ``param`` x ``factors``, 27
    settings, so that a budget of 24 trials takes all but the three farthest corners."""
    return {"lr": [0.3, 1.0, 3.0], "steps": [0.5, 1.0, 2.0], param: [float(x) for x in factors]}


LR_STEPS_SEARCH: dict[str, list[float]] = {"lr": [0.1, 0.3, 1.0, 3.0, 10.0], "steps": [0.25, 0.5, 1.0, 2.0, 4.0]}
"""The search space of a method with no such weight (no retain term, or one whose preset weight is 0): lr and
steps alone, on a wider grid of 25 settings, so that it gets the same budget as the others."""

SEARCH_AXES = ("lr", "steps")
"""The axes of every training method's run that a search space may scale besides its config's numbers."""


def check_search(name: str, cls: type, search) -> dict[str, list[float]]:
    """A method's search space for ``tune`` (docs/methods.md, "Tuning a method for your model"), checked at
    import time: ``{axis: [factor, ...]}``, where an axis is ``lr``, ``steps`` or a numeric field of the
    config, and each factor (> 0) multiplies the run's value (its preset, or what the user set). Every axis
    holds the factor 1, so the run as given is one of the trials. An edit method has no search space (no lr or
    steps to scale). Returns the space with float factors, in the order given."""
    where = f"method {name!r}: search"
    if getattr(cls, "kind", "train") == "edit":
        raise ConfigError(f"{where}: an edit method has no lr or steps to search over")
    if not isinstance(search, dict) or not search:
        raise ConfigError(f"{where} must be a non-empty dict of axis -> list of factors, got {search!r:.80}")
    defaults = cls.config_cls()
    numeric = {f.name for f in dataclasses.fields(cls.config_cls)
               if isinstance(getattr(defaults, f.name), (int, float))
               and not isinstance(getattr(defaults, f.name), bool)}
    out = {}
    for axis, factors in search.items():
        if axis not in SEARCH_AXES and axis not in numeric:
            raise ConfigError(f"{where}: {axis!r} is neither lr, steps nor a numeric field of "
                              f"{cls.config_cls.__name__} (numeric fields: {', '.join(sorted(numeric))})")
        if (not isinstance(factors, (list, tuple)) or not factors
                or any(isinstance(x, bool) or not isinstance(x, (int, float)) or not x > 0 for x in factors)):
            raise ConfigError(f"{where}[{axis!r}] must be a non-empty list of numbers > 0, got {factors!r:.80}")
        if len(set(factors)) != len(factors) or 1 not in factors:
            raise ConfigError(f"{where}[{axis!r}] must hold the factor 1 (the run as given) and no factor twice, "
                              f"got {list(factors)!r}")
        out[axis] = [float(x) for x in factors]
    return out
