"""``obliviate world``: generate the synthetic world and save it."""

from __future__ import annotations

from obliviate.cli.args import add_common
from obliviate.cli.inputs import check_out_dir
from obliviate.config import build_config
from obliviate.runs.results import prepare_out_dir, write_results
from obliviate.tasks.world import DOCUMENTS_FILE, WORLD_FILE, WorldConfig, generate_world
from obliviate.utils import run_write_path


def cmd_world(args) -> None:
    check_out_dir(args.out, [])
    cfg = build_config(WorldConfig, args.config, args.overrides, base={"seed": args.seed})
    out = prepare_out_dir(args.out)
    world = generate_world(cfg)
    for name in (WORLD_FILE, DOCUMENTS_FILE):
        run_write_path(out / "world" / name)  # no link followed: World.save writes the files in place
    world.save(out / "world")
    splits = ("forget", "holdout", "retain", "general", "concept")
    metrics = {f"n_facts_{s}": len(world.facts_by_split(s)) for s in splits}
    docs = world.documents()
    metrics.update(n_documents=len(docs), n_chars=sum(len(d["text"]) for d in docs),
                   n_relearn_paragraphs=len(world.relearn_paragraphs), fingerprint=world.fingerprint())
    write_results(out, seed=cfg.seed, config=cfg, metrics=metrics)
    print(f"world written to {out / 'world'} ({metrics['n_documents']} documents)")


def register(sub) -> None:
    s = sub.add_parser("world", help="generate the synthetic world and save it")
    add_common(s)
    s.set_defaults(fn=cmd_world)
