"""The lock (requirements/lock.txt) is what `make install` and CI install: it must satisfy every range in
pyproject.toml, pin the CPU torch build named in requirements/lock.in, and name no package index."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "lock.txt"
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==(\S+)$")
ENVIRONMENT = {"python_version": "3.11", "sys_platform": "linux", "platform_machine": "x86_64"}


def _pins() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        match = PIN.match(line.strip())
        if match:
            pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def _read_requirements(path: Path) -> list[Requirement]:
    """The requirements of a requirements file (comments, blank lines and ``-r`` includes left out)."""
    lines = (line.split("#")[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [Requirement(line) for line in lines if line and not line.startswith("-")]


def _requirements() -> list[tuple[str, Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    found = [("dependencies", Requirement(text)) for text in project["dependencies"]]
    for extra, texts in project["optional-dependencies"].items():
        found += [(f"[{extra}]", Requirement(text)) for text in texts]
    found += [
        ("research/requirements.txt", r)
        for r in _read_requirements(ROOT / "research" / "requirements.txt")
    ]
    return [(where, r) for where, r in found if canonicalize_name(r.name) != "slice-st"]


@pytest.mark.parametrize(("where", "requirement"), _requirements(), ids=lambda value: str(value))
def test_the_lock_satisfies_every_range_of_pyproject(where, requirement):
    if requirement.marker is not None and not requirement.marker.evaluate(ENVIRONMENT):
        pytest.skip(f"{requirement} does not apply to the locked platform")
    pins = _pins()
    name = canonicalize_name(requirement.name)
    assert name in pins, f"{requirement} ({where}) is not in the lock: run make lock"
    assert requirement.specifier.contains(pins[name], prereleases=True), (
        f"the lock pins {name}=={pins[name]}, outside {requirement} ({where}): run make lock"
    )


def test_the_lock_pins_the_cpu_torch_of_lock_in():
    torch = next(
        r for r in _read_requirements(ROOT / "requirements" / "lock.in") if r.name == "torch"
    )
    assert _pins()["torch"].endswith("+cpu")
    assert torch.specifier.contains(_pins()["torch"])


def test_no_package_index_is_written_into_the_repository():
    for path in (
        LOCK,
        ROOT / "Makefile",
        ROOT / "requirements" / "lock.in",
        ROOT / "pyproject.toml",
    ):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"--(extra-)?index-url\s+\S|--find-links\s+\S|file:///", text), path
