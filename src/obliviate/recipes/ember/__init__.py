"""``obliviate reproduce ember``: embedding erasure against relearning (seeds 000 and 003).

Paper: Suslik, Shafran, Geva 2026, "Don't Forget Your Embeddings: Robust Knowledge Erasure
via Precise Editing of Embeddings" (docs/methods.md, [paper/code]). Its claim: MLP-only erasure
leaves the concept in the token embeddings, so relearning brings it back; subtracting a few
concept features from a tiny fraction of the input embeddings (EMBER) stops that.

Two parts; every finished piece is stored in ``out/parts/<part>/<piece>.json`` with the
config it was made with, so a rerun into the same ``--out`` resumes (a piece whose config
changed is redone):

1. **world** — the cached tiny base model of :class:`~obliviate.train.pretrain.PretrainConfig`
   and the world's concept (a saga: its characters, artifacts, places and orders;
   ``World.concept``). EMBER alone (delta from the grid, :func:`obliviate.methods.ember.select_delta`),
   RMU, SNMF and CRISP alone and each with EMBER (:func:`obliviate.methods.ember.combine.ember_then`:
   EMBER with the grid's delta first, then the MLP method on top, with the same settings as
   alone; the paper re-tunes the MLP method on top, we do not). Per row:

   - ``concept_acc``: 4-way MCQ accuracy on the concept's facts (chance 0.25; each option
     scored as the full answer sentence, as :func:`obliviate.tasks.world.evaluate_world`);
   - ``similar_acc``: the same on the general domain (people with a birthplace and a
     profession: the closest domain to the saga's characters);
   - ``utility_acc``: the same on biology and medicine facts together;
   - ``coherence``: a proxy for fluent text about the concept. On the concept sentences
     (text the base model was trained on, and the text EMBER and the methods are fit on),
     positions are split by whether they *read or predict* a concept-exclusive token (the
     input token or the target token is part of a term of ``World.concept["exclusive_terms"]``:
     names of characters, artifacts, places, orders; :func:`footprint`). L_other = mean
     next-token loss over the other positions (grammar, function words, shared vocabulary);
     ``coherence = min(1, exp(L_other(base) - L_other))`` = base perplexity / perplexity there,
     1 = as fluent as the base model. The paper asks an LLM judge to rate generations; this
     needs no judge and no sampling;
   - ``loss_exclusive`` / ``loss_other`` / ``loss_neutral`` and their changes from the base
     (``d_loss_*``): loss at the positions that read or predict an exclusive token, at the
     other positions of the concept sentences, and on neutral text (the world's coherence
     prompts and neutral sentences, which contain no exclusive term);
   - ``relearn_concept_acc``: concept accuracy after the relearning attack (docs/methods.md,
     scaled down: a full fine-tune of a copy on the concept's relearning paragraphs, AdamW,
     weight decay 0.01, ``relearn_epochs`` epochs; the tiny model needs lr 1e-3 instead of
     1e-5 and a batch of 4 instead of 1); ``relearn_curve`` is the accuracy after each epoch;
   - ``vocab_fraction_edited`` (0 for rows without EMBER) and ``n_tokens_edited``.

   The delta grid picks the delta with the best HM(efficacy, specificity, coherence) among
   those keeping utility >= 0.9 of the base (efficacy from concept accuracy, specificity =
   HM of the utility and similar-domain fractions; :mod:`obliviate.methods.ember.edit`).

2. **data** — the real EMBER concepts (``<data>/ember/``, :func:`obliviate.tasks.sources.load_ember`;
   ``$OBLIVIATE_DATA`` or ``../shared/data``; the part is skipped with a note when absent).
   Per concept (``ember_data.n_concepts`` of them, or ``ember_data.concepts`` by name): a
   byte-level BPE tokenizer and a tiny Llama trained from scratch on 80% of the concept's
   sentences and of the neutral sentences; perplexity on the other 20% of each, before
   EMBER, after EMBER, and after relearning on the concept's relearning paragraphs (both the
   edited model and, for reference, the unedited one). These models cannot answer the MCQs,
   so delta is chosen on perplexity: efficacy = ``1 - exp(L_c(base) - L_c)`` (0 when
   concept perplexity is unchanged), specificity = coherence = utility =
   ``min(1, exp(L_n(base) - L_n))`` on neutral text, then :func:`~obliviate.methods.ember.select_delta`
   (neutral perplexity may rise by at most ~11%). The judge is the offline one built from
   the sentences (:func:`obliviate.methods.ember.judge_from_sentences`) with a looser keep rule
   (``ember_data.min_confidence`` = 0.5: at the paper's 0.85 it keeps no feature of these
   noisy tiny-model embeddings). Real concepts are the hard case for an offline judge: set
   ``min_confidence=0.85`` to see the paper's rule.

Scaled-down EMBER settings (``world_concept.*``): the world's V' has ~570 tokens (the paper's
thousands), so the winner-takes-all keeps ``sparsity`` = 2% per feature (11-12 tokens, close to
the 20 top tokens the paper's judge reads) instead of 1% (6 tokens); K = 100 and the mass
ratio >= 2 are the paper's. The judge is the offline :class:`~obliviate.methods.ember.LexiconJudge`
over the world's exclusive terms (``judge=lexicon``; ``judge=sentences`` uses the
sentence-statistics judge that needs no ground truth), with the paper's keep rule
(confidence >= 0.85). The report says how often the two judges agree on the candidates.

``results.json``: ``metrics.<row>`` for rows ``base``, ``ember``, ``<m>``, ``<m>+ember``
(m in ``world_concept.methods``) with the fields above; ``delta_grid`` (per delta, the choice,
and EMBER's location: V', candidates, kept features, edited tokens, factorisation, the judges'
agreement); ``real_data.<concept>`` (perplexities, delta, fraction edited); ``notes`` (with the
concepts in the order they ran). That is everything the report shows, so ``obliviate reproduce
ember --render-only DIR`` re-renders it without training (``run.py`` runs the experiments,
``claims.py`` holds the claims, ``report.py`` renders).

Run time: docs/recipes.md, section "ember".
"""

import obliviate.recipes.ember.run  # noqa: F401  (registers the recipe)
from obliviate.recipes.ember.claims import PAPER, claims_of, make_claims
from obliviate.recipes.ember.report import render
from obliviate.recipes.ember.run import EmberRecipeConfig, apply_quick, footprint, term_spans

__all__ = ["PAPER", "EmberRecipeConfig", "apply_quick", "claims_of", "footprint", "make_claims", "render",
           "term_spans"]
