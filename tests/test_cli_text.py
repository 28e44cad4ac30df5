"""What the command line prints and accepts: the same --shards everywhere, plain text for
people (no Python syntax, no reST backticks, plural forms right), Ctrl-C without a traceback,
and docs that show only options that exist (issue 9, item 6)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from plain_text import assert_plain
from test_bad_input import _chain, _planned

from onnx_ir_multidevice._cli import build_parser, main
from onnx_ir_multidevice._proto.files import save

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    save(_planned(), tmp_path / "good.omny")
    save(_chain(), tmp_path / "plain.onnx")
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ---------------------------------------------------------------------------------------------
# --shards: one helper, the same forms everywhere


@pytest.mark.parametrize(
    "forms",
    [["--shards", "2", "4"], ["--shards", "2,4"], ["--shards", "2", "--shards", "4"]],
    ids=["spaces", "commas", "repeated"],
)
def test_several_shard_counts_are_read_alike(forms):
    parser = build_parser()
    for argv in (
        ["annotate", "in.omny", "out.onnx"],
        ["verify", "in.omny"],
        ["plan", "in.onnx", "-o", "out.omny"],
    ):
        assert parser.parse_args([*argv, *forms]).shards == [2, 4], argv


@pytest.mark.parametrize(
    "argv",
    [
        ["split", "good.omny", "stages"],
        ["run", "good.omny"],
        ["export", "--format", "split", "good.omny", "out"],
    ],
    ids=["split", "run", "export"],
)
def test_one_shard_count_where_one_is_meant(files, capsys, argv):
    assert build_parser().parse_args([*argv, "--shards", "2"]).shards == 2
    assert main([*argv, "--shards", "2,4"]) == 2
    err = capsys.readouterr().err
    assert "one shard count, got 2, 4" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("bad", ["0", "x", "2,", ",2", "2,,4", "-1"])
def test_bad_shard_counts_are_usage_errors(files, capsys, bad):
    assert main(["annotate", "good.omny", "out.onnx", f"--shards={bad}"]) == 2
    assert "--shards" in capsys.readouterr().err


def test_annotate_and_verify_take_comma_lists(files, capsys):
    """Issue 9: `--shards 2,4` worked for plan, but annotate/verify wanted `--shards 2 4`."""
    pytest.importorskip("onnxruntime")
    assert main(["annotate", "good.omny", "a.onnx", "--shards", "2,4"]) == 0
    out = capsys.readouterr().out
    assert "omny/2-shards" in out and "omny/4-shards" in out
    assert main(["verify", "good.omny", "--shards", "2,4"]) == 0
    out = capsys.readouterr().out
    assert "OK: 2 stages" in out and "OK: 4 stages" in out


def test_run_names_a_missing_path(files, capsys):
    """Issue 9: `omny run nosuchdir/` said `--shards N is required`."""
    assert main(["run", "nosuchdir/"]) == 2
    err = capsys.readouterr().err
    assert "nosuchdir" in err and "no such" in err and "--shards" not in err


def test_verify_prints_one_error_line_for_all_failing_shard_counts(files, capsys):
    """Issue 10 item 15: one `omny: error:` line per failing shard count."""
    pytest.importorskip("onnxruntime")
    assert main(["verify", "good.omny", "--shards", "3", "5"]) == 1
    out, err = capsys.readouterr()
    assert err.count("omny: error:") == 1 and "3 and 5 stages" in err
    assert "3 stages: FAILED" in out and "5 stages: FAILED" in out


# ---------------------------------------------------------------------------------------------
# Plain text


def test_help_of_every_subcommand_is_plain_text(capsys):
    parser = build_parser()
    for name in parser._subparsers._group_actions[0].choices:  # type: ignore[union-attr]
        assert main([name, "--help"]) == 0
        assert_plain(capsys.readouterr().out)


def test_the_whole_job_prints_plain_text(files, capsys):
    pytest.importorskip("onnxruntime")
    for argv in (
        ["plan", "plain.onnx", "-o", "p.omny", "--shards", "2,3"],
        ["check", "p.omny"],
        ["inspect", "p.omny"],
        ["annotate", "p.omny", "a.onnx"],
        ["check", "a.onnx"],
        ["split", "a.onnx", "stages", "--shards", "2"],
        ["verify", "a.onnx"],
        ["run", "a.onnx", "--shards", "2", "--requests", "2"],
        ["split", "a.onnx", "stages", "--shards", "2"],  # not empty: --force
        ["verify", "plain.onnx", "--shards", "1", "2"],
    ):
        main(argv)
        out, err = capsys.readouterr()
        assert_plain(out + err)


def test_inspect_says_mib(files, capsys):
    """Issue 9: inspect said MB where everything else says MiB."""
    assert main(["inspect", "good.omny"]) == 0
    out = capsys.readouterr().out
    assert "MiB" in out and not re.search(r"\bMB\b", out)


def test_a_stage_that_fits_never_reads_bigger_than_its_device(files, capsys):
    """Issue 9: "needs 1 MiB / device 512.0 KiB" for a stage that fits (rounded for display)."""
    from onnx_ir_multidevice.planner.devices import parse_size

    assert main(["plan", "plain.onnx", "-o", "p.omny", "--devices", "512KiB,512KiB"]) == 0
    out = capsys.readouterr().out
    pairs = re.findall(r"needs ([\d.]+ [KMG]?i?B) / device ([\d.]+ [KMG]?i?B)", out)
    assert pairs, out
    for needs, device in pairs:
        assert parse_size(needs.replace(" ", "")) <= parse_size(device.replace(" ", "")), out


# ---------------------------------------------------------------------------------------------
# Ctrl-C


def _python(code: str, *, argv0: str = "omny") -> subprocess.CompletedProcess[str]:
    # Ctrl-C as in a terminal, even where this test runs with SIGINT ignored (a background job).
    prelude = (
        f"import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        f"sys.argv[0] = {argv0!r}\n"
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=120,
    )


def test_ctrl_c_during_start_up_is_one_line_and_130():
    """Issue 9: Ctrl-C in the first second printed a traceback from the imports."""
    result = _python(
        "import os, signal\n"
        "import onnx_ir_multidevice._cli\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "import onnx_ir_multidevice.checker.core  # heavy imports: onnx, onnx-ir\n"
        "print('not reached')\n"
    )
    assert (result.returncode, result.stdout, result.stderr) == (130, "", "omny: interrupted\n")


def test_ctrl_c_in_a_subcommand_raises_keyboard_interrupt_again():
    """Once a subcommand runs, Ctrl-C is a KeyboardInterrupt (what pipelines clean up on)."""
    result = _python(
        "import signal\n"
        "from onnx_ir_multidevice._cli import main\n"
        "from onnx_ir_multidevice.examples import EXAMPLE\n"
        "main(['inspect', str(EXAMPLE)])\n"
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n"
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("True"), result.stderr


def test_importing_the_cli_elsewhere_leaves_ctrl_c_alone():
    result = _python(
        "import signal\n"
        "import onnx_ir_multidevice._cli\n"
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n",
        argv0="notebook",
    )
    assert result.stdout.strip() == "True", result.stderr


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="POSIX signals")
def test_version_is_fast_and_imports_nothing_heavy():
    result = _python(
        "from onnx_ir_multidevice._cli import main\n"
        "main(['--version'])\n"
        "print(sorted({'onnx', 'onnx_ir', 'numpy', 'onnxruntime'} & set(sys.modules)))\n"
    )
    assert result.stdout.splitlines()[-1] == "[]", result.stdout


@pytest.mark.parametrize("argv", [["--help"], ["split", "--help"]])
def test_help_imports_nothing_heavy_and_no_exporter(argv):
    result = _python(
        "from onnx_ir_multidevice._cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = {'onnx', 'onnx_ir', 'numpy', 'onnxruntime'} & set(sys.modules)\n"
        "print(sorted(heavy | {n for n in sys.modules if '.exporters' in n}))\n"
    )
    assert result.stdout.splitlines()[-1] == "[]", result.stdout + result.stderr


def test_split_and_the_exporters_read_a_configuration_id_the_same_way():
    """One parser of a configuration ID (index or IR v11 name) for ``omny split`` and exporters."""
    from onnx_ir_multidevice._cli import split as split_cli
    from onnx_ir_multidevice.exporters import ark, split_directory, tvm_mlf
    from onnx_ir_multidevice.omny._schema import parse_configuration

    assert not hasattr(split_cli, "_configuration")
    for module in (ark, split_directory, tvm_mlf):
        assert module.parse_configuration is parse_configuration, module.__name__
    assert [parse_configuration(v) for v in (None, 2, "2", "pipeline_a", "")] == [
        None, 2, 2, "pipeline_a", "",
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The docs show only options that exist

_COMMAND = re.compile(r"\bomny ([a-z]+)((?: [^`|\n#]*)?)")


def _documented_commands() -> list[tuple[str, str, str]]:
    """``(where, subcommand, rest of the line)`` for each ``omny <sub> ...`` in the docs."""
    found = []
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for path in paths:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in _COMMAND.finditer(line):
                found.append((f"{path.name}:{number}", match[1], match[2]))
    return found


def test_documented_options_exist():
    """Issue 9: docs/cli.md showed `omny annotate FILE -o OUT`, planning.md `--relaxed-cuts`."""
    parser = build_parser()
    subparsers = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    checked = 0
    for where, name, rest in _documented_commands():
        if name not in subparsers:
            continue  # prose such as "omny plan's table"
        options = set(subparsers[name]._option_string_actions)
        try:
            words = shlex.split(rest.replace("[", " ").replace("]", " "))
        except ValueError:
            words = rest.split()
        for word in words:
            if word.startswith("-") and not re.fullmatch(r"-+\d.*|-+", word):
                flag = word.split("=", 1)[0].rstrip(".,;:)")
                assert flag in options, f"{where}: omny {name} has no option {flag}"
                checked += 1
    assert checked > 30


def test_readme_describes_the_demo_steps_it_prints():
    """Issue 9: the README described the demo as 5 steps; it prints 9."""
    from onnx_ir_multidevice._cli._demo_steps import STEPS

    text = (ROOT / "README.md").read_text()
    section = text[text.index("## What the two commands do") : text.index("## Install")]
    items = re.findall(r"^(\d+)\. `(\w+)`", section, flags=re.MULTILINE)
    assert [int(n) for n, _ in items] == list(range(1, len(STEPS) + 1))
    assert [name for _, name in items] == [step.name for step in STEPS]
    words = {3: "three", 5: "five", 9: "nine"}
    assert f"in {words.get(len(STEPS), len(STEPS))} steps" in section
