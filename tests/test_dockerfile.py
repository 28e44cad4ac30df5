"""Tests of the OAAX toolchain's Dockerfile.

The image cannot be built here: the machines that run the tests have a Docker client but no
daemon (``docker info``: cannot connect), and no network for pip. What can be checked without
Docker is checked for real: the build context that ``.dockerignore`` leaves is computed from
the repository's files, the files the ``COPY`` instructions put in ``/app`` are copied into a
folder of their own and the image's entry point converts the bundled example from there alone
(as an unprivileged user would, offline); the base image's Python satisfies
``requires-python``; the ``RUN`` installs an extra the project has; the commands in
``docs/interop.md`` are the Dockerfile's own.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from packaging.specifiers import SpecifierSet

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


def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether ``.dockerignore`` leaves ``path`` (relative, ``/``-separated) out of the build
    context: the last pattern that matches the path or a folder above it decides; ``!``
    brings back; ``**/`` matches any number of folders."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        keep = pattern.startswith("!")
        glob = pattern.lstrip("!").rstrip("/")
        candidates = list(prefixes)
        if glob.startswith("**/"):  # any depth: match from every folder down
            glob = glob[3:]
            candidates += [
                "/".join(parts[i : j + 1]) for i in range(len(parts)) for j in range(i, len(parts))
            ]
        if any(fnmatch.fnmatchcase(c, glob) for c in candidates):
            ignored = not keep
    return ignored


@pytest.fixture(scope="module")
def context() -> set[str]:
    """The files of a fresh clone that ``docker build .`` sends (``.dockerignore`` applied)."""
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return {p for p in _tracked() if not _ignored(p, patterns)}


def _image_files(instructions: list[tuple[str, str]], context: set[str]) -> dict[str, str]:
    """``{path in /app: path in the repository}`` of the files the COPY instructions add."""
    files: dict[str, str] = {}
    for keyword, arguments in instructions:
        if keyword != "COPY":
            continue
        *sources, target = shlex.split(arguments)
        for source in sources:
            inside = sorted(p for p in context if p == source or p.startswith(source + "/"))
            assert inside, f"COPY {source}: nothing of it is in the build context"
            for path in inside:
                if target.endswith("/") or len(sources) > 1:  # into a folder, as its name
                    dest = os.path.normpath(os.path.join(target, os.path.basename(source)))
                    dest = (
                        os.path.join(dest, os.path.relpath(path, source))
                        if path != source
                        else dest
                    )
                else:  # COPY folder ./name: its content under name
                    dest = os.path.join(os.path.normpath(target), os.path.relpath(path, source))
                files[os.path.normpath(dest)] = path
    return files


def test_the_build_context_holds_what_the_build_needs(instructions, context):
    """``pip install .`` in the image needs the readme, the version file and every
    package-data file of pyproject.toml; nothing of tests/, .venv or caches is sent."""
    files = set(_image_files(instructions, context).values())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["readme"] in files and "pyproject.toml" in files
    version_module = project["tool"]["setuptools"]["dynamic"]["version"]["attr"].rsplit(".", 1)[0]
    assert version_module.replace(".", "/") + ".py" in files
    shipped = []
    for package, globs in project["tool"]["setuptools"]["package-data"].items():
        for glob in globs:  # each tracked file a pattern names is sent
            tracked = fnmatch.filter(_tracked(), f"{package}/{glob}")
            assert set(tracked) <= files, glob
            shipped += tracked
    assert "onnx_ir_multidevice/examples/bert_tiny.omny" in shipped
    assert not any(p.startswith(("tests/", ".venv/", "notebooks/")) for p in context)
    assert not any("__pycache__" in p or p.endswith(".pyc") for p in context)
    assert _ignored(
        "onnx_ir_multidevice/x/__pycache__/y.pyc", ["*", "!onnx_ir_multidevice/", "**/__pycache__"]
    )


def _tracked() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return [p for p in listed.stdout.decode().split("\0") if p]


def test_base_image_python_satisfies_requires_python_and_the_extra_exists(instructions):
    image = instructions[0][1]
    match = re.fullmatch(r"python:(\d+)\.(\d+)(?:[.\d]*)(?:-\w+)?", image)
    assert match, image
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert SpecifierSet(project["requires-python"]).contains(f"{match[1]}.{match[2]}.0")
    [install] = [a for k, a in instructions if k == "RUN" and "pip install" in a]
    extras = re.findall(r"\.\[([\w,-]+)\]", install)
    assert extras and set(extras[0].split(",")) <= set(project["optional-dependencies"])


def _docker_commands(lines: list[str]) -> list[str]:
    """The ``docker ...`` commands of ``lines``, continuation lines joined, spaces normalised."""
    commands: list[str] = []
    joined = "\n".join(lines).replace("\\\n", " ")
    for line in joined.splitlines():
        if line.strip().startswith("docker "):
            commands.append(" ".join(line.split()))
    return commands


def test_the_docs_give_the_dockerfiles_commands_with_the_package_version():
    """docs/interop.md tells users how to build and run the image: the same commands as the
    Dockerfile's header, tagged with the package's version."""
    from onnx_ir_multidevice._version import __version__

    header = [line.lstrip("#")[1:] for line in DOCKERFILE.read_text().splitlines()]
    ours = _docker_commands(header)
    docs = _docker_commands((REPO / "docs" / "interop.md").read_text().splitlines())
    assert [c.split()[:2] for c in ours] == [["docker", "build"], ["docker", "run"]]
    assert ours == docs
    assert f"-t oaax-omny-toolchain:{__version__} ." in ours[0]
    assert "--network none" in ours[1] and ours[1].count("/app/run") == 3  # volume, IN, OUT


def test_the_image_files_alone_run_the_toolchain_offline(instructions, context, tmp_path):
    """The files COPY puts in /app, and nothing else of the repository, convert the bundled
    example through the ENTRYPOINT's console script (what `docker run IMAGE IN OUT` runs);
    the installed dependencies stand for the image's `pip install`."""
    app = tmp_path / "app"
    for dest, source in _image_files(instructions, context).items():
        (app / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / source, app / dest)
    (app / "run").mkdir()
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    [entrypoint] = [json.loads(a) for k, a in instructions if k == "ENTRYPOINT"]
    module, function = scripts[entrypoint[0]].split(":")
    # The user's model in the mounted folder (the docs' /app/run/model.onnx): the bundled
    # BERT without its plan, which the toolchain makes.
    proto = onnx.load(str(app / "onnx_ir_multidevice/examples/bert_tiny.omny"))
    kept = [p for p in proto.metadata_props if not p.key.startswith("omnynet_")]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    onnx.save(proto, str(app / "run" / "model.onnx"))
    code = (
        f"import sys, {module} as m; "
        "assert m.__file__.startswith(sys.argv[1]), m.__file__; "
        f"sys.exit(m.{function}(sys.argv[2:]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(app)
    done = subprocess.run(
        [sys.executable, "-c", code, str(app), str(app / "run/model.onnx"), str(app / "run/build")],
        cwd=app,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    built = sorted(p.name for p in (app / "run" / "build").iterdir())
    assert any(name.endswith(".omny") for name in built), built
