"""The run of ``obliviate world`` (:mod:`obliviate.cli.world`): generate the synthetic world and save it, with
its sizes and fingerprint in ``results.json``."""

from __future__ import annotations

from obliviate.runs.results import prepare_out_dir, write_results
from obliviate.tasks.world import DOCUMENTS_FILE, WORLD_FILE, WorldConfig, generate_world
from obliviate.utils import run_write_path

SPLITS = ("forget", "holdout", "retain", "general", "concept")


def write_world(cfg: WorldConfig, out) -> tuple[dict, list[str]]:
    """The world of ``cfg`` written to ``out/world``; returns its sizes (facts per split, documents,
    characters, relearning paragraphs, fingerprint) and the line to print."""
    out = prepare_out_dir(out)
    world = generate_world(cfg)
    for name in (WORLD_FILE, DOCUMENTS_FILE):
        run_write_path(out / "world" / name)  # no link followed: World.save writes the files in place
    world.save(out / "world")
    metrics = {f"n_facts_{s}": len(world.facts_by_split(s)) for s in SPLITS}
    docs = world.documents()
    metrics.update(n_documents=len(docs), n_chars=sum(len(d["text"]) for d in docs),
                   n_relearn_paragraphs=len(world.relearn_paragraphs), fingerprint=world.fingerprint())
    write_results(out, seed=cfg.seed, config=cfg, metrics=metrics)
    return metrics, [f"world written to {out / 'world'} ({metrics['n_documents']} documents)"]
