"""The Hub round trip over HTTP, against the test Hub (tests/hub_server.py) with the real ``huggingface_hub`` client.

Every Hub client runs in a new process, as a user's would: ``HF_ENDPOINT`` points at the test Hub, ``HF_HOME`` is a
new empty folder (an empty cache), ``HF_HUB_OFFLINE=0`` (the test suite is otherwise offline) and
``HF_HUB_DISABLE_XET=1`` (the test Hub stores large files over LFS; it offers no Xet storage).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from helpers import HUB_TOKEN as TOKEN
from helpers import hub_env, hub_file

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["A man plays the guitar on stage.", "Don't stop — café au lait!", "x"]
QUERIES = ["plays the guitar", "coffee with milk"]


def run_python(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a new Python process; fails the test (with its output) if it fails."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "slice_st.cli", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


# What a process that downloads a model writes for the test to compare: the spans and vectors of encode_spans, the
# best spans of best_spans, the module classes and span settings of the loaded model.
ENCODE = """
import json, sys
import numpy as np
import torch
torch.set_num_threads(1)
import slice_st
from sentence_transformers import SentenceTransformer

how, name, out = sys.argv[1], sys.argv[2], sys.argv[3]
kwargs = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
model = SentenceTransformer(name, **kwargs) if how == "st" else slice_st.load_model(name, **kwargs)
texts, queries = json.loads(sys.argv[5]), json.loads(sys.argv[6])
results = model.encode_spans(texts)
best = model.best_spans(queries, texts)
np.savez(out, *[r.embeddings for r in results])
with open(out + ".json", "w") as handle:
    json.dump({
        "units": [r.units.tolist() for r in results],
        "offsets": [r.offsets.tolist() for r in results],
        "best": [[[m.span, m.start, m.end, m.score] for m in row[:3]] for row in best[0]],
        "modules": [type(module).__module__ + "." + type(module).__name__ for module in model],
        "span_config": slice_st.get_span_config(model).to_dict(),
    }, handle)
"""


def encode_downloaded(env, how: str, name: str, out: Path, **kwargs) -> dict:
    run_python(
        ENCODE, env, how, name, str(out), json.dumps(kwargs), json.dumps(TEXTS), json.dumps(QUERIES)
    )
    found = json.loads(Path(f"{out}.json").read_text())
    with np.load(f"{out}.npz") as arrays:
        found["embeddings"] = [arrays[f"arr_{index}"] for index in range(len(TEXTS))]
    return found


def assert_same_spans(model, found: dict) -> None:
    """The downloaded model's spans and best spans are the local model's: same spans, vectors within 1e-6."""
    local = model.encode_spans(TEXTS)
    assert found["units"] == [r.units.tolist() for r in local]
    assert found["offsets"] == [r.offsets.tolist() for r in local]
    for vectors, result in zip(found["embeddings"], local):
        np.testing.assert_allclose(vectors, result.embeddings, atol=1e-6, rtol=0)
    best = model.best_spans(QUERIES, TEXTS)
    expected = [[[m.span, m.start, m.end, m.score] for m in row[:3]] for row in best[0]]
    assert [[m[:3] for m in row] for row in found["best"]] == [
        [m[:3] for m in row] for row in expected
    ]
    np.testing.assert_allclose(
        [m[3] for row in found["best"] for m in row],
        [m[3] for row in expected for m in row],
        atol=1e-6,
    )


def test_the_test_hub_runs_on_its_own(tmp_path):
    """``python tests/hub_server.py --port P --data D`` prints one line once it answers, ``GET /`` is 200, and a push
    (creating a repository) without a token is refused with 401, as on the Hub."""
    import socket

    with socket.socket() as probe:  # a free port, given back before the server binds it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "hub_server.py"),
            "--port",
            str(port),
            "--data",
            str(tmp_path / "d"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ready = server.stdout.readline()  # nothing is printed before the server answers
        assert ready.startswith(f"test Hub at http://127.0.0.1:{port} ")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as response:
            assert response.status == 200
        create = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/repos/create",
            data=json.dumps({"name": "x", "organization": "org"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(create, timeout=30)
        assert (tmp_path / "d" / "repos").is_dir() and not list(
            (tmp_path / "d" / "repos").iterdir()
        )
    finally:
        server.terminate()
        server.wait(timeout=30)


# -------------------------------------------------------------------------------------------- the fast case
PUSH_TINY = """
import json, sys
import torch
torch.set_num_threads(1)
from huggingface_hub import HfApi
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Transformer
from sentence_transformers.sentence_transformer.modules import Pooling
from slice_st import SpanPooling

folder, repo_id = sys.argv[1], sys.argv[2]
model = SentenceTransformer(modules=[Transformer(folder), Pooling(32, "mean")], device="cpu")
SpanPooling.attach(model, max_span=4)  # attached for training: what is pushed must load anywhere all the same
print(json.dumps({"url": model.push_to_hub(repo_id), "commits": [c.title for c in HfApi().list_repo_commits(repo_id)]}))
"""


def test_a_model_with_span_pooling_pushed_then_loaded_by_plain_sentence_transformers(
    hub, tmp_path, tiny_model_dir, make_tiny_model
):
    """Push with ``SpanPooling`` attached; a new process with an empty cache loads it by its id with plain
    ``SentenceTransformer`` (no trust flag) after ``import slice_st``, and its spans are the local model's."""
    from slice_st import SpanPooling

    pushed = json.loads(
        run_python(
            PUSH_TINY, hub_env(hub, tmp_path / "home-push"), tiny_model_dir, "org/slice-tiny-span"
        ).stdout
    )
    assert pushed["url"].startswith(f"{hub}/org/slice-tiny-span/commit/")
    assert pushed["commits"] == ["Add new SentenceTransformer model", "initial commit"]
    modules = json.loads(hub_file(hub, "org/slice-tiny-span", "modules.json"))
    assert all(entry["type"].startswith("sentence_transformers.") for entry in modules)
    card = hub_file(hub, "org/slice-tiny-span", "README.md").decode()
    assert 'SentenceTransformer("org/slice-tiny-span")' in card and "\n\n\n" not in card

    found = encode_downloaded(
        hub_env(hub, tmp_path / "home-load"), "st", "org/slice-tiny-span", tmp_path / "st"
    )
    assert (
        found["modules"][-1] == "sentence_transformers.sentence_transformer.modules.pooling.Pooling"
    )
    assert found["span_config"] == {"min_span": 1, "max_span": 4, "unit": "word"}
    local = SpanPooling.attach(make_tiny_model(), max_span=4)
    assert_same_spans(local, found)


# ------------------------------------------------------------------------------------ the shipped model (slow)
PUSH_SHIPPED = """
import json, sys
import torch
torch.set_num_threads(1)
import slice_st
from huggingface_hub import HfApi

repo_id = sys.argv[1]
model = slice_st.load_model()  # slice-minilm
first = model.push_to_hub(repo_id)
slice_st.set_span_config(model, max_span=5)
second = model.push_to_hub(repo_id, commit_message="Spans of up to 5 words", exist_ok=True)
commits = [[commit.commit_id, commit.title] for commit in HfApi().list_repo_commits(repo_id)]
print(json.dumps({"first": first, "second": second, "commits": commits}))
"""


@pytest.mark.slow
def test_the_shipped_model_round_trip(hub, tmp_path):
    """slice-minilm pushed with sentence-transformers' own ``push_to_hub`` (twice: the second commit changes only the
    span settings, so the weights are not uploaded again), then downloaded in a new process with an empty cache by
    ``SentenceTransformer``, ``slice_st.load_model`` and ``slice-st mine``; then offline from the cache, and a pinned
    revision loads that commit."""
    import slice_st

    pushed = json.loads(
        run_python(PUSH_SHIPPED, hub_env(hub, tmp_path / "home-push"), "org/slice-bert").stdout
    )
    titles = [title for _, title in pushed["commits"]]
    # sentence-transformers names the class that pushes: load_model gives a SpanEncoder
    assert titles == ["Spans of up to 5 words", "Add new SpanEncoder model", "initial commit"]
    first = pushed["commits"][1][0]
    assert pushed["first"].endswith(first) and pushed["second"].endswith(pushed["commits"][0][0])
    card = hub_file(hub, "org/slice-bert", "README.md").decode()
    assert "## SLICE: span embeddings for phrase mining" in card and "\n\n\n" not in card
    assert (
        'SentenceTransformer("org/slice-bert")' in card
        and 'SentenceTransformer("slice-minilm")' not in card
    )
    assert "slice-st mine --model org/slice-bert" in card

    local = slice_st.load_model()
    slice_st.set_span_config(local, max_span=5)
    home = tmp_path / "home-load"
    assert_same_spans(
        local, encode_downloaded(hub_env(hub, home), "st", "org/slice-bert", tmp_path / "st")
    )
    assert_same_spans(
        local, encode_downloaded(hub_env(hub, home), "slice", "org/slice-bert", tmp_path / "ls")
    )
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS) + "\n")
    mined = run_cli(
        hub_env(hub, home),
        "mine",
        "--model",
        "org/slice-bert",
        "-q",
        QUERIES[0],
        str(corpus),
        "-f",
        "jsonl",
    )
    assert mined.returncode == 0, mined.stderr
    folder = slice_st.save_slice_model(local, str(tmp_path / "local-copy"))
    expected = subprocess.run(
        [
            sys.executable,
            "-m",
            "slice_st.cli",
            "mine",
            "--model",
            folder,
            "-q",
            QUERIES[0],
            str(corpus),
            "-f",
            "jsonl",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert [json.loads(line)["span"] for line in mined.stdout.splitlines()] == [
        json.loads(line)["span"] for line in expected.stdout.splitlines()
    ] and mined.stdout.strip()

    # Offline, with the Hub gone: the same loads come from the cache; the first commit is the shipped settings.
    offline = hub_env("http://127.0.0.1:9", home, offline=True)
    assert_same_spans(local, encode_downloaded(offline, "st", "org/slice-bert", tmp_path / "off"))
    assert_same_spans(
        local, encode_downloaded(offline, "slice", "org/slice-bert", tmp_path / "off2")
    )
    pinned = encode_downloaded(
        hub_env(hub, home), "st", "org/slice-bert", tmp_path / "pin", revision=first
    )
    assert pinned["span_config"]["max_span"] == 20
    assert_same_spans(slice_st.load_model(), pinned)


# ---------------------------------------------------------------------------------------- errors (slow)
ERRORS = """
import json, sys
import slice_st
from sentence_transformers import SentenceTransformer

found = {}
for key, name in (("missing", "org/no-such-model"), ("private", "org/secret")):
    try:
        slice_st.load_model(name)
    except slice_st.ModelLoadError as error:
        found[key] = str(error)
    try:
        SentenceTransformer(name)
    except OSError as error:
        found[key + "-st"] = [base.__name__ for base in type(error).__mro__]
if sys.argv[1] == "push":
    try:
        slice_st.load_model("base").push_to_hub("org/no-token")
    except OSError as error:
        found["push"] = [base.__name__ for base in type(error).__mro__]
print(json.dumps(found))
"""


@pytest.mark.slow
def test_hub_errors_are_one_clear_line(hub, tmp_path, tiny_model_dir):
    """A repository that does not exist, a private one without a token, a push without a token, the Hub unreachable:
    a documented exception from Python, one line from the command line."""
    request = urllib.request.Request(
        f"{hub}/api/repos/create",
        data=json.dumps(
            {"name": "secret", "organization": "org", "visibility": "private"}
        ).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=30).read()

    no_token = hub_env(hub, tmp_path / "home", token=None)
    found = json.loads(run_python(ERRORS, no_token, "push").stdout)
    assert "no such repository on " + hub in found["missing"]
    assert "private and no token" in found["private"]
    assert (
        "RepositoryNotFoundError" in found["missing-st"]
        and "RepositoryNotFoundError" in found["private-st"]
    )
    assert "HfHubHTTPError" in found["push"]  # huggingface_hub's documented error: 401, no token
    unreachable = json.loads(
        run_python(ERRORS, hub_env("http://127.0.0.1:9", tmp_path / "home"), "load").stdout
    )
    assert "cannot be reached" in unreachable["missing"] and "OSError" in unreachable["missing-st"]

    corpus = tmp_path / "notes.txt"
    corpus.write_text("A man plays the guitar.\n")
    for env, args, expected in (
        (
            no_token,
            ["mine", "--model", "org/no-such-model", "-q", "guitar", str(corpus)],
            "no such repository",
        ),
        (no_token, ["mine", "--model", "org/secret", "-q", "guitar", str(corpus)], "HF_TOKEN"),
        (
            no_token,
            [
                "train",
                "-o",
                str(tmp_path / "run"),
                "-m",
                tiny_model_dir,
                "--train-data",
                str(tmp_path),
                "--push-to-hub",
                "--hub-model-id",
                "org/x",
            ],
            "no Hugging Face token",
        ),
        (
            hub_env("http://127.0.0.1:9", tmp_path / "home"),
            ["mine", "--model", "org/slice-bert", "-q", "guitar", str(corpus)],
            "cannot be reached",
        ),
    ):
        done = run_cli(env, *args)
        errors = [line for line in done.stderr.splitlines() if line.startswith("slice-st: error: ")]
        assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, (
            done.stderr
        )
        assert expected in errors[0]
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------- the docs' round trip
HUB_MARKER = "tests/training/test_hub.py runs this block"


def hub_blocks(path: Path) -> list[tuple[str, list[str]]]:
    """``(language, lines)`` of each block of a Markdown file that is marked as run here against the test Hub."""
    lines, blocks, index = path.read_text(encoding="utf-8").splitlines(), [], 0
    while index < len(lines):
        if HUB_MARKER in lines[index] and lines[index + 1].startswith("```"):
            language, end = lines[index + 1].strip("`").strip(), lines.index("```", index + 2)
            blocks.append((language, lines[index + 2 : end]))
            index = end
        index += 1
    return blocks


def matches(expected: str, line: str) -> bool:
    """``line`` is ``expected``, where ``...`` in ``expected`` stands for anything (the docs tests' rule)."""
    return (
        re.fullmatch(".*".join(re.escape(part) for part in expected.split("...")), line) is not None
    )


@pytest.mark.slow
@pytest.mark.parametrize("document", ["README.md", "docs/guides/training.md"])
def test_the_docs_hub_round_trip_runs(hub, tmp_path, document):
    """The Hub blocks of the README and the training guide run as written (each Python block in a new process, as on
    another machine), against the test Hub, and print what they show."""
    blocks = hub_blocks(ROOT / document)
    assert blocks and any(language == "python" for language, _ in blocks)
    env = hub_env(hub, tmp_path / "home")
    for language, lines in blocks:
        if language == "python":
            expected = [line.removeprefix("# → ") for line in lines if line.startswith("# → ")]
            shown = run_python("\n".join(lines), env).stdout.splitlines()
        else:
            assert language == "console" and lines[0].startswith("$ slice-st ")
            done = run_cli(env, *shlex.split(lines[0])[2:])
            assert done.returncode == 0, done.stderr
            expected, shown = lines[1:], done.stdout.splitlines()
        assert len(shown) == len(expected) and all(map(matches, expected, shown)), (expected, shown)
