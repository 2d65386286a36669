"""Print the package-index options of this machine's pip configuration as uv options.

``make lock``, ``make install`` and ``make test-latest`` resolve with uv, which does not read pip's
configuration files; this passes the indexes the machine is set up with (``pip config list``: files and
``PIP_*`` variables), so that nothing in the repository names a registry. With ``--env`` it prints
``SSL_CERT_FILE=...`` instead, for a machine whose pip trusts a certificate bundle of its own.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

# pip option → uv option; each value may hold several space-separated entries
OPTIONS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
}


def pip_settings() -> dict[str, list[str]]:
    """pip's effective settings by option name, later sources (environment) overriding earlier (files)."""
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    settings: dict[str, list[str]] = {}
    for line in listing.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        name = key.rsplit(".", 1)[-1]
        settings[name] = shlex.split(value)[0].split() if value.strip() else []
    return settings


def main(argv: list[str]) -> int:
    settings = pip_settings()
    if "--env" in argv:
        cert = settings.get("cert")
        print(f"SSL_CERT_FILE={cert[0]}" if cert else "")
        return 0
    words = [
        f"{OPTIONS[name]} {shlex.quote(value)}"
        for name in OPTIONS
        for value in settings.get(name, [])
    ]
    print(" ".join(words))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
