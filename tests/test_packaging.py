"""The install files agree with each other and with the README."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
# conda-forge names that differ from the PyPI names
CONDA_TO_PIP = {"pytorch": "torch"}


def _name(requirement: str) -> str:
    """The bare, normalised project name of a requirement string."""
    name = re.split(r"[\s<>=!~;\[]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


# The marker of the lines that apply to Intel Macs only (torch 2.2.2 with NumPy 1); conda-forge
# pairs torch and NumPy builds itself, so environment.yml needs none of them.
INTEL_MAC = "sys_platform == 'darwin' and platform_machine == 'x86_64'"


def _floors(requirements: list[str]) -> dict[str, str]:
    """Name -> the version of its ``>=``, for the requirements that apply outside Intel Macs."""
    floors = {}
    for requirement in requirements:
        if INTEL_MAC in requirement:
            continue
        found = re.search(r">=\s*([\w.]+)", requirement.split(";")[0])
        if found:
            floors[_name(requirement)] = found.group(1)
    return floors


def test_environment_yml_names_the_same_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip_names = {_name(r) for r in project["dependencies"] if INTEL_MAC not in r}
    pip_names |= {_name(r) for r in project["optional-dependencies"]["dev"] if "python_version" not in r}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda_names = {
        CONDA_TO_PIP.get(_name(d), _name(d))
        for d in env["dependencies"]
        if isinstance(d, str) and _name(d) not in {"python", "pip"}
    }
    assert conda_names == pip_names, (
        f"only in environment.yml: {sorted(conda_names - pip_names)}; "
        f"only in pyproject.toml: {sorted(pip_names - conda_names)}"
    )


def test_environment_yml_declares_the_same_floors_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip_floors = _floors(project["dependencies"] + project["optional-dependencies"]["dev"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda_floors = _floors([d for d in env["dependencies"] if isinstance(d, str)])
    conda_floors = {CONDA_TO_PIP.get(name, name): version for name, version in conda_floors.items()}
    pip_floors.pop("tomli", None)  # Python 3.10's, from pip; conda's Python ships its own TOML reader from 3.11
    conda_floors.pop("python", None)
    assert conda_floors == pip_floors


def test_every_requirement_has_a_floor_and_no_upper_pin_but_intel_macs():
    """Every requirement names the oldest release tested (CI's floor environment installs exactly those: an
    unbounded one would mean a release from years ago). Upper pins only where Intel Macs need NumPy 1."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"] + project["optional-dependencies"]["dev"]:
        spec = requirement.split(";")[0]
        assert "==" not in spec, requirement
        assert "<" not in spec or INTEL_MAC in requirement, requirement
        assert ">=" in spec or INTEL_MAC in requirement, f"{requirement}: no floor (>=)"


def test_ci_runs_the_readme_commands():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -e ".[dev]"' in readme and 'pip install -e ".[dev]"' in ci
    assert "```bash\n.venv/bin/python -m pytest -n auto\n```" in readme
    assert '\n"$PY" -m pytest -n auto\n' in ci
