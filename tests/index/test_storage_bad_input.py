"""slice_st.index.storage on bad input: a full disk at the first write of a save (no data folder left, one clear error),
manifests nested too deeply or with a generation too large to be a file name."""

from __future__ import annotations

import errno
import json
import os

import pytest

from slice_st.cli import main
from slice_st.errors import FileAccessError, SpanInputError
from slice_st.index import storage
from slice_st.index.span_index import SpanIndex
from slice_st.index.storage import MANIFEST

DOCS = [
    "a cat sleeps on the sofa",
    "the dog barks at the door",
    "my bag was lost",
    "the train never came",
]


@pytest.fixture()
def saved(tiny_model, tmp_path):
    path = tmp_path / "ix"
    SpanIndex.build(DOCS, tiny_model, [f"d{number}" for number in range(4)], max_span=4).save(path)
    return path


def _data_folders(path) -> list[str]:
    return sorted(name for name in os.listdir(path) if name.startswith("data-"))


def _full_disk_at_the_marker(monkeypatch):
    real = storage.write_bytes

    def write_bytes(path, data):
        if path.endswith(storage.DATA_MARKER):  # the first file a save writes
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data)

    monkeypatch.setattr(storage, "write_bytes", write_bytes)


def test_a_save_on_a_full_disk_is_a_file_access_error_and_leaves_no_data_folder(
    saved, tiny_model, monkeypatch
):
    before = _data_folders(saved)
    index = SpanIndex.load(saved, tiny_model)
    index.remove(["d0"])
    _full_disk_at_the_marker(monkeypatch)
    for _ in range(3):
        with pytest.raises(
            FileAccessError, match="cannot save the index to .*No space left on device"
        ):
            index.save(saved)
    assert _data_folders(saved) == before


def test_index_remove_on_a_full_disk_names_the_index_not_standard_output(
    saved, tiny_model_dir, capsys, monkeypatch
):
    before = _data_folders(saved)
    _full_disk_at_the_marker(monkeypatch)
    for _ in range(2):
        with pytest.raises(SystemExit) as exit_info:
            main(["index", "remove", str(saved), "d0", "--no-progress"])
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert exit_info.value.code == 2 and error.startswith(
            "slice-st: error: cannot save the index to"
        ), error
        assert "standard output" not in error
    assert _data_folders(saved) == before
    monkeypatch.undo()
    assert len(SpanIndex.load(saved)) == 4


def _rewrite_manifest(path, text: str) -> None:
    (path / MANIFEST).write_text(text)


def test_a_manifest_nested_too_deeply_is_a_clear_error(saved, tiny_model):
    _rewrite_manifest(saved, "[" * 100_000)
    with pytest.raises(SpanInputError, match="nested too deeply"):
        SpanIndex.load(saved, tiny_model)


@pytest.mark.parametrize("generation", [10**400, 10**13])
def test_a_manifest_generation_too_large_is_a_clear_error(saved, tiny_model, generation):
    manifest = json.loads((saved / MANIFEST).read_text())
    _rewrite_manifest(saved, json.dumps(manifest | {"generation": generation}))
    with pytest.raises(SpanInputError, match="generation .* is past"):
        SpanIndex.load(saved, tiny_model)
    with (
        pytest.raises(SpanInputError, match="generation .* is past"),
        SpanIndex.open_for_update(saved, tiny_model) as index,  # as `slice-st index add`
    ):
        index.add(["one more"], ["d9"])
