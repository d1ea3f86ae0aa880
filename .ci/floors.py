"""The course's declared floors as a constraints file: what CI's lowest environment installs.

    python .ci/floors.py CONSTRAINTS [--as-intel-mac]

Writes ``name==floor`` for every requirement of pyproject.toml (its
dependencies and the dev extra) whose environment marker holds on this
machine, and the upper bounds of those that have one (``pyarrow<26``).
``--as-intel-mac`` evaluates the markers as an Intel Mac would (torch 2.2.2
with NumPy 1, see pyproject.toml), so that pair can be installed and tested
on Linux too. Every requirement needs a floor (``>=``) or an upper bound:
"the oldest release" of an unbounded requirement would be a release from
years ago, so one without fails here, naming it.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
INTEL_MAC = {"sys_platform": "darwin", "platform_machine": "x86_64", "platform_system": "Darwin", "os_name": "posix"}


def requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]]


def pins(environment: dict[str, str]) -> tuple[list[str], list[str]]:
    """The constraint lines for ``environment``, and the requirements that have no bound at all."""
    lines, unbounded = [], []
    for requirement in requirements():
        operators = {spec.operator for spec in requirement.specifier}
        if not operators & {">=", "<", "<="}:
            unbounded.append(str(requirement))
            continue
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        for spec in requirement.specifier:
            lines.append(f"{requirement.name}=={spec.version}" if spec.operator == ">=" else f"{requirement.name}{spec}")
    return lines, unbounded


def main(argv: list[str]) -> None:
    environment = dict(default_environment())
    if "--as-intel-mac" in argv:
        environment.update(INTEL_MAC)
    lines, unbounded = pins(environment)
    if unbounded:
        sys.exit(f"floors: no floor (>=) declared for: {', '.join(unbounded)}")
    Path(argv[0]).write_text("".join(f"{line}\n" for line in lines))
    where = "as an Intel Mac" if "--as-intel-mac" in argv else f"{platform.system()} {platform.machine()}"
    print(f"floors ({where}): {', '.join(lines)}")


if __name__ == "__main__":
    main(sys.argv[1:])
