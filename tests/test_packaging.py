"""The wheel users install: built from the tree, it carries the shipped adapter, the card template and the page,
and none of the lab; installed with its ``train`` extra into an empty venv (the ranges, not the lock), it mines and
trains a LoRA adapter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tracked_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [name for name in out.stdout.split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of a copy of the tracked tree (the build leaves build/ and *.egg-info behind: not in the checkout)."""
    source = tmp_path_factory.mktemp("source")
    for name in _tracked_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    command = [
        sys.executable,
        "-m",
        "build",
        "--wheel",
        "--no-isolation",
        "--outdir",
        str(out),
        str(source),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (built,) = out.glob("slice_st-*.whl")
    return built


def test_the_wheel_carries_the_shipped_model_and_none_of_the_lab(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("adapter_model.safetensors", "adapter_config.json", "provenance.json"):
        assert f"slice_st/pretrained/slice_minilm/{needed}" in names
    assert any(n.startswith("slice_st/model_card/") and n.endswith(".md") for n in names)
    assert any(n.startswith("slice_st/serve/static/") for n in names)
    assert (
        "slice_st/integrations/stsb_context_stats.json" in names
    )  # the STSBContext task's descriptive statistics
    assert "slice_st/training/presets/cpu-minilm.json" in names  # slice-st train --preset
    assert "slice_st/py.typed" in names  # the package ships its type hints
    # every file of the package the tree tracks: each shipped model's adapter, re-ranker and calibrator too
    package = {name for name in _tracked_files() if name.startswith("slice_st/")}
    assert package - names == set()
    top = {name.split("/")[0] for name in names}
    assert top <= {
        "slice_st",
        f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info",
    }, top


def test_the_wheel_metadata_states_the_ranges_and_the_command(wheel):
    archive = zipfile.ZipFile(wheel)
    info = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = Parser().parsestr(archive.read(info).decode())
    requires = metadata.get_all("Requires-Dist")
    assert any(
        r.startswith("transformers") and "<5.24" in r and 'extra == "train"' in r for r in requires
    ), requires
    entry_points = archive.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert "slice-st = slice_st.cli:main" in entry_points


LORA_SMOKE = """
import torch, slice_st
from slice_st.training.trainer import _add_lora
model = slice_st.load_model("base")
_add_lora(model, rank=4, alpha=None)
model.train()
out = model(model.tokenize(["a man plays the guitar"]))["token_embeddings"].sum()
out.backward()
torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2).step()
print("lora ok")
"""


@pytest.mark.slow
def test_the_wheel_installs_into_an_empty_venv_then_mines_and_trains_lora(wheel, tmp_path):
    """pip with the machine's own configuration and the wheel's ranges: what a user gets without the lock."""
    import torch

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python, cli = venv / "bin" / "python", venv / "bin" / "slice-st"
    cpu_torch = (
        f"torch=={torch.__version__}"  # the CPU build this suite runs on; the rest from the ranges
    )
    install = [str(python), "-m", "pip", "install", "-q", cpu_torch, f"{wheel}[train]"]
    done = subprocess.run(install, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    corpus = tmp_path / "texts.txt"
    corpus.write_text(
        "Yesterday a man played the guitar badly.\nThe departure got delayed by the storm.\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    mined = subprocess.run(
        [str(cli), "mine", "-q", "plays the guitar", str(corpus), "--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert mined.returncode == 0, mined.stderr
    assert "played the guitar" in mined.stdout
    lora = subprocess.run(
        [str(python), "-c", LORA_SMOKE], capture_output=True, text=True, env=env, check=False
    )
    assert lora.returncode == 0 and "lora ok" in lora.stdout, lora.stderr[-3000:]
