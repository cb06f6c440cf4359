"""What an attack spent (:mod:`obliviate.attacks.cost`), across a checkpoint."""

from obliviate.attacks.cost import counting, resumable_cost_hooks


def test_a_resumed_attack_counts_what_it_spent_before_its_checkpoint():
    """The relearning loop saves each open counter's growth with its checkpoints and adds it back on resume."""
    with counting() as first:
        first.forwards += 3  # spent before the attack began: not the attack's
        get, _ = resumable_cost_hooks()
        first.forwards += 5
        first.backwards += 2
        saved = get()  # what a checkpoint keeps
    assert saved == {"attack_cost": [{"forwards": 5, "backwards": 2, "tokens": 0}]}
    with counting() as resumed:
        _, put = resumable_cost_hooks()
        put(saved)
        resumed.forwards += 1  # the steps after the checkpoint
    assert (resumed.forwards, resumed.backwards) == (6, 2)
