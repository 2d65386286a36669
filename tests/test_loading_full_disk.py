"""slice_st.loading.save_slice_model on a full disk: a FileAccessError naming the folder, and nothing half-written."""

from __future__ import annotations

import pytest

from slice_st.errors import FileAccessError


def _full_disk_after_a_partial_write(monkeypatch):
    import os

    from safetensors import SafetensorError
    from sentence_transformers import SentenceTransformer

    def save(self, path, *args, **kwargs):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "model.safetensors"), "wb") as handle:
            handle.write(b"half")
        raise SafetensorError(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
        )

    monkeypatch.setattr(SentenceTransformer, "save", save)


@pytest.mark.parametrize("exists", [False, True])
def test_save_slice_model_on_a_full_disk_leaves_nothing(tiny_model, tmp_path, monkeypatch, exists):
    from slice_st.loading import save_slice_model

    out = tmp_path / "model"
    if exists:
        out.mkdir()  # an empty folder the user made: kept, and empty again
    _full_disk_after_a_partial_write(monkeypatch)
    with pytest.raises(FileAccessError, match="cannot save a model to .*StorageFull"):
        save_slice_model(tiny_model, str(out))
    assert (out.exists() and not list(out.iterdir())) if exists else not out.exists()
