"""A static test of the OAAX toolchain's Dockerfile (Docker cannot run on these machines)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).parent.parent
DOCKERFILE = REPO / "Dockerfile"

tomllib = pytest.importorskip("tomllib")


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, arguments = line.partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


@pytest.fixture(scope="module")
def instructions() -> list[tuple[str, str]]:
    return _instructions(DOCKERFILE.read_text(encoding="utf-8"))


def test_known_instructions_and_a_base_image_first(instructions):
    known = {"FROM", "LABEL", "ENV", "WORKDIR", "COPY", "RUN", "USER", "ENTRYPOINT", "ARG"}
    assert {keyword for keyword, _ in instructions} <= known
    assert instructions[0][0] == "FROM" and instructions[0][1].startswith("python:3.")


def test_workdir_is_app(instructions):
    assert ("WORKDIR", "/app") in instructions


def test_runs_as_a_non_root_user(instructions):
    users = [arguments for keyword, arguments in instructions if keyword == "USER"]
    assert users, "no USER instruction: the container would run as root"
    assert users[-1].split(":")[0] not in ("root", "0")
    creates = " ".join(arguments for keyword, arguments in instructions if keyword == "RUN")
    assert "useradd" in creates and users[-1] in creates
    position = {keyword: i for i, (keyword, _) in enumerate(instructions)}
    assert position["USER"] < position["ENTRYPOINT"]


def test_entrypoint_is_exec_form_and_the_console_script(instructions):
    [entrypoint] = [arguments for keyword, arguments in instructions if keyword == "ENTRYPOINT"]
    command = json.loads(entrypoint)  # exec form: a JSON array, no shell
    assert isinstance(command, list) and all(isinstance(part, str) for part in command)
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert command == ["omny-oaax-toolchain"] and command[0] in scripts
    assert not any(keyword == "CMD" for keyword, _ in instructions)  # the two args come from run


def test_copied_sources_exist_and_the_context_is_small(instructions):
    for keyword, arguments in instructions:
        if keyword == "COPY":
            *sources, _ = shlex.split(arguments)
            for source in sources:
                assert (REPO / source).exists(), source
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*"  # everything out (.venv, tests, the corpus) ...
    assert "!onnx_ir_multidevice/" in patterns  # ... but the package
    install = [a for k, a in instructions if k == "RUN" and "pip install" in a]
    assert install and "[runtime]" in install[0]  # onnxruntime: validation and verify
