"""The course's declared floors as a constraints file: what CI's lowest environment installs.

    python .ci/floors.py CONSTRAINTS [--as-intel-mac OVERRIDES]

Writes ``name==floor`` for every requirement of pyproject.toml (its
dependencies and the dev extra) whose environment marker holds on this
machine, and the upper bounds of those that have one (``pyarrow<26``).
``--as-intel-mac`` evaluates the markers as an Intel Mac would (torch 2.2.2
with NumPy 1, see pyproject.toml), so that set can be installed and tested on
Linux too: the requirements whose marker names a platform go to OVERRIDES
(uv's --override, which replaces this platform's torch and NumPy lines), the
rest stay constraints, so that floors which contradict each other still fail. Every requirement needs a floor (``>=``) or an upper bound:
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


def pins(environment: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """The lines for ``environment``: those of requirements without a platform marker, those with one, and the
    requirements that have no bound at all. A floor becomes ``==floor``; an upper bound alone stays as it is."""
    plain, platform_bound, unbounded = [], [], []
    for requirement in requirements():
        operators = {spec.operator for spec in requirement.specifier}
        if not operators & {">=", "<", "<="}:
            unbounded.append(str(requirement))
            continue
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        floor = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        line = f"{requirement.name}=={floor[0]}" if floor else f"{requirement.name}{requirement.specifier}"
        (platform_bound if "sys_platform" in str(requirement.marker) else plain).append(line)
    return plain, platform_bound, unbounded


def main(argv: list[str]) -> None:
    environment = dict(default_environment())
    intel_mac = "--as-intel-mac" in argv
    if intel_mac:
        environment.update(INTEL_MAC)
    plain, platform_bound, unbounded = pins(environment)
    if unbounded:
        sys.exit(f"floors: no floor (>=) declared for: {', '.join(unbounded)}")
    constraints, overrides = (plain, platform_bound) if intel_mac else (plain + platform_bound, [])
    Path(argv[0]).write_text("".join(f"{line}\n" for line in constraints))
    if intel_mac:
        Path(argv[argv.index("--as-intel-mac") + 1]).write_text("".join(f"{line}\n" for line in overrides))
    where = "as an Intel Mac" if intel_mac else f"{platform.system()} {platform.machine()}"
    print(f"floors ({where}): {', '.join(overrides + constraints)}")


if __name__ == "__main__":
    main(sys.argv[1:])
