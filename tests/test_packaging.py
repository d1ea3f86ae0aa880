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


def test_environment_yml_names_the_same_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip_names = {_name(r) for r in project["dependencies"]}
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


def test_no_upper_pins():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"] + project["optional-dependencies"]["dev"]:
        assert "<" not in requirement.split(";")[0] and "==" not in requirement, requirement


def test_ci_runs_the_readme_commands():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -e ".[dev]"' in readme and 'pip install -e ".[dev]"' in ci
    assert "```bash\n.venv/bin/python -m pytest -n auto\n```" in readme
    assert '\n"$PY" -m pytest -n auto\n' in ci
