"""What the command-line tests of tests/ share: a small world's overrides, and the one-line error check."""

SMALL_WORLD = ["world.n_forget=3", "world.n_holdout=1", "world.n_retain=3", "world.n_general=3",
               "world.n_concept=2", "world.n_toxic=4"]


def one_error(capsys, max_len: int | None = None) -> str:
    """The one ``obliviate: error:`` line on stderr (progress bars of transformers may precede it), no traceback;
    with ``max_len``, shorter than that."""
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if l.startswith("obliviate:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("obliviate: error: ")
    if max_len is not None:
        assert len(lines[0]) < max_len
    return lines[0]
