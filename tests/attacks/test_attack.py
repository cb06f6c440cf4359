import pytest

from obliviate.attacks.attack import read_counts


def test_read_counts_are_two_integers_named_for_the_read():
    assert read_counts("ablate_whitebox", 12) == {"ablate_whitebox_items": 12, "ablate_whitebox_variants": 1}
    counts = read_counts("quantize", 12.0, 3)
    assert counts == {"quantize_items": 12, "quantize_variants": 3}
    assert all(type(v) is int for v in counts.values())  # results.json holds integers, not 12.0


@pytest.mark.parametrize("items,variants", [(-1, 1), (12, 0), (2.5, 1), (12, 1.5)])
def test_a_count_that_is_no_count_is_one_line(items, variants):
    with pytest.raises(ValueError, match=r"^read 'gcg': items must be a whole number >= 0 and variants one >= 1") as e:
        read_counts("gcg", items, variants)
    assert "\n" not in str(e.value)
