"""compare: an edited task file rerun into the same --out is one line saying the data changed (#28, item 8)."""

import json

from obliviate.pipelines.compare.run import data_fingerprint, note_data_change
from obliviate.tasks.base import Data, Task


def _task(answer: str) -> Task:
    return Task(name="t", forget=Data(qa=[("Where was Ana born?", answer)]), retain=Data(qa=[("Q?", "A.")]))


def _part(out, name, data):
    d = out / "methods" / name
    d.mkdir(parents=True)
    (d / "result.json").write_text(json.dumps({"key": {"method": name, "data": data}, "result": {}}))


def test_an_edited_file_of_the_same_size_is_one_line_and_the_same_data_is_silent(tmp_path, caplog):
    before, after = _task("in Lima."), _task("in Oslo.")
    assert data_fingerprint(before) != data_fingerprint(after)  # same sizes, other content
    assert before.summary() == after.summary()
    _part(tmp_path, "npo", data_fingerprint(before))
    assert not note_data_change(tmp_path, data_fingerprint(before))
    assert caplog.records == []
    assert note_data_change(tmp_path, data_fingerprint(after))
    err = [r.getMessage() for r in caplog.records]  # a warning, logged (the command line shows it)
    assert len(err) == 1 and "data changed" in err[0] and "starting afresh" in err[0]
    assert not note_data_change(tmp_path / "empty", data_fingerprint(after))  # nothing there: nothing to say
