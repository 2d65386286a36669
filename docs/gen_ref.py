"""Writes the API reference page (reference.md) at build time from the package's own lists of public names.

``slice_st._EXPORTS`` (name → defining module) gives the top-level names; each sub-package's ``__all__`` gives its
own. Nothing is listed by hand, so a name added, moved or removed in the code shows up here on the next build.
"""

from __future__ import annotations

import importlib
from collections import defaultdict

import mkdocs_gen_files

SUBPACKAGES = (
    "encode",
    "search",
    "confidence",
    "config",
    "loading",
    "multi_vector",
    "errors",
    "models",
    "losses",
    "data",
    "evaluation",
    "index",
    "cache",
    "training",
)

package = importlib.import_module("slice_st")
exports = getattr(package, "_EXPORTS", {})
by_module: dict[str, list[str]] = defaultdict(list)
for name in package.__all__:
    by_module[exports.get(name, "slice_st")].append(name)

lines = [
    "# API reference",
    "",
    "Generated from the docstrings. Every name below is importable from `slice_st` (e.g. `from slice_st import "
    "SpanIndex`); the heading says where it is defined.",
    "",
    "## The `slice_st` package",
    "",
]
for module in sorted(by_module):
    lines += [f"### `{module}`", ""]
    for name in sorted(by_module[module], key=str.lower):
        lines += [
            f"::: {module}.{name}",
            "    options:",
            "      show_root_heading: true",
            "      heading_level: 4",
            "",
        ]

lines += [
    "## Sub-packages",
    "",
    "Further public names of the sub-packages (import them from the sub-package).",
    "",
]
facade = set(package.__all__)
for sub in SUBPACKAGES:
    module = importlib.import_module(f"slice_st.{sub}")
    names = [n for n in getattr(module, "__all__", []) if n not in facade and not n.isupper()]
    if names:
        lines += (
            [
                f"### `slice_st.{sub}`",
                "",
                f"::: slice_st.{sub}",
                "    options:",
                "      show_root_heading: false",
                "      members:",
            ]
            + [f"        - {n}" for n in names]
            + [""]
        )

with mkdocs_gen_files.open("reference.md", "w") as page:
    page.write("\n".join(lines))
