"""The attack table (issue #58): one row per attack of the package gives where it runs, its place in the
harness's order and its reads' rank; the demo, compare and the harness's defaults all read it, and an attack
in no row (one a user adds in one file) runs on request only, after the listed ones."""

from pathlib import Path

import pytest

from obliviate.attacks.attack import ATTACKS, AttackRead, register_attack
from obliviate.config import to_dict
from obliviate.evidence.attack_table import (ATTACK_TABLE, RUNS, WHERE, enabled_in, in_order, on_by_default,
                                             read_rank)
from obliviate.evidence.harness import TaskAttackConfig, attack_names
from obliviate.evidence.verdict import reads
from obliviate.pipelines.compare.run import DEMO, compare_attacks, compare_settings


def test_every_attack_of_the_package_has_one_row_and_every_row_an_attack():
    ours = {n for n, a in ATTACKS.items() if a.run.__module__.startswith("obliviate.attacks.")}
    assert ours == set(ATTACK_TABLE)
    assert all(d.runs in WHERE for d in ATTACK_TABLE.values())


def test_each_row_ranks_exactly_the_reads_its_attack_declares_and_no_two_alike():
    for name, d in ATTACK_TABLE.items():
        assert set(d.ranks) == {r.name for r in ATTACKS[name].reads}, name
    ranks = [r for d in ATTACK_TABLE.values() for r in d.ranks.values()]
    assert len(ranks) == len(set(ranks))
    assert list(reads()) == sorted(reads(), key=read_rank)  # the verdict reads them in the table's rank


def test_the_harness_runs_the_rows_in_order_and_each_run_turns_on_its_rows():
    assert list(in_order()) == list(ATTACK_TABLE)
    assert attack_names("prune, relearn") == ["relearn", "prune"]  # the table's order, not the order given
    # widest first: what the harness turns on by default runs in the demo, and every demo attack in compare
    assert set(enabled_in("attack")) <= set(enabled_in("demo")) <= set(enabled_in("compare"))
    assert [n for n in ATTACK_TABLE if on_by_default(n)] == enabled_in("attack") == \
        [n for n, d in ATTACK_TABLE.items() if d.runs == "default"]
    assert RUNS["compare"] == WHERE[:3]  # all but "request"
    on = lambda cfg: [n for n, v in cfg.enabled.items() if v]  # noqa: E731
    assert on(TaskAttackConfig()) == enabled_in("attack")
    assert on(compare_attacks()) == enabled_in("compare")
    demo = compare_settings(0, defaults=DEMO)
    assert on(demo.attacks) == enabled_in("demo") and on(compare_settings(0).attacks) == enabled_in("compare")
    assert to_dict(demo.attacks)["lora"] is False  # the demo's other attack settings are its own


@pytest.fixture
def unlisted():
    """An attack in no row, named to sort first by name: its place comes from the table, not the alphabet."""

    @register_attack("aa_unlisted", applies=lambda task: True, needs="nothing",
                     reads=AttackRead("aa_unlisted_start_acc", "aa_unlisted_acc", label="in no row"))
    def run(r, cfg) -> dict:
        return {}

    yield ATTACKS["aa_unlisted"]
    ATTACKS.remove("aa_unlisted")


def test_an_attack_in_no_row_runs_on_request_after_the_listed_ones(unlisted):
    assert list(in_order())[-1] == "aa_unlisted" and list(in_order())[:-1] == list(ATTACK_TABLE)
    assert not on_by_default("aa_unlisted") and not TaskAttackConfig().on("aa_unlisted")
    assert not compare_attacks().on("aa_unlisted")
    assert not compare_settings(0, defaults=DEMO).attacks.on("aa_unlisted")
    assert TaskAttackConfig(select=["aa_unlisted"]).on("aa_unlisted")  # on request
    assert TaskAttackConfig.from_config({"aa_unlisted": True}).on("aa_unlisted")
    assert list(reads())[-1] == "aa_unlisted" and read_rank("aa_unlisted") > max(
        r for d in ATTACK_TABLE.values() for r in d.ranks.values())


def test_the_table_in_the_docs_is_the_table_in_the_code():
    text = (Path(__file__).parents[2] / "docs" / "evaluation.md").read_text()
    section = text.split("**The attack table.**", 1)[1].split("\n\n")[1]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()[2:]]
    shown = {name.strip("`"): (runs, ranks) for name, runs, ranks in rows}
    assert list(shown) == list(ATTACK_TABLE)
    for name, d in ATTACK_TABLE.items():
        ranks = ", ".join(f"{r}: {k}" for r, k in d.ranks.items()) or "(read against the oracle alone)"
        assert shown[name] == (d.runs, ranks), name
