"""Run the ``omny`` CLI over every model of ``tests/corpus/`` and write ``BASELINE.md``.

Not a test: a report of how the current tool fares on real exports. For each model of
``tests/corpus/manifest.json`` it runs, with a time limit per command (300 s) and the output
captured::

    omny plan M.onnx -o WORK/M.omny --shards 2      # then, if that fails:
        ... --dim NAME=VALUE ...                     #   the manifest's suggested_dims
        ... --relaxed                                #   relaxed cuts
        ... --relaxed --dim NAME=VALUE ...           #   both
    omny check WORK/M.omny [--relaxed]
    omny annotate WORK/M.omny WORK/M.annotated.onnx [--relaxed]
    omny split WORK/M.omny WORK/M.split --shards 2
    omny verify WORK/M.omny --shards 2 [--dim NAME=VALUE ...]
    omny run WORK/M.omny --shards 2 --requests 4 [--dim NAME=VALUE ...]

``--relaxed`` is passed on to check and annotate when plan needed it; ``--dim`` values are the
manifest's ``suggested_dims``. Every step after a successful plan is run even when an earlier
one failed (they all read the .omny), so the report shows each step's own result; the first
failing step is named per model.

Usage (with the project's environment, e.g. ``.dev/tool-venv``)::

    .dev/tool-venv/bin/python scripts/corpus_baseline.py            # all, writes BASELINE.md
    .dev/tool-venv/bin/python scripts/corpus_baseline.py --only gpt2_dynamo --no-write
    .dev/tool-venv/bin/python scripts/corpus_baseline.py --no-dims   # verify/run without --dim
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
STEPS = ("plan", "check", "annotate", "split", "verify", "run")
PKG = "onnx_ir_multidevice"
WORK_DIR = [""]  # the scratch folder, shown as $WORK in the report


def _omny() -> list[str]:
    exe = Path(sys.executable).with_name("omny")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("omny")
    if found:
        return [found]
    return [sys.executable, "-m", f"{PKG}._cli"]


def summarize(out: str) -> dict[str, Any]:
    """First/last lines of the output; exception type and innermost package frame."""
    lines = [ln.rstrip() for ln in out.splitlines() if ln.strip()]
    info: dict[str, Any] = {"first": lines[:3], "last": lines[-3:] if len(lines) > 3 else []}
    if "Traceback (most recent call last)" in out:
        tb = out[out.rindex("Traceback (most recent call last)") :]
        tb_lines = tb.splitlines()
        exc = next(
            (
                ln
                for ln in reversed(tb_lines)
                if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)?\b.*:", ln)
                and not ln.startswith(" ")
            ),
            tb_lines[-1] if tb_lines else "",
        )
        info["exception"] = exc.strip()[:300]
        frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', tb)
        pkg_frames = [f for f in frames if f"{PKG}/" in f[0]]
        if pkg_frames:
            f = pkg_frames[-1]
            info["frame"] = f"{f[0][f[0].index(PKG) :]}:{f[1]} in {f[2]}"
    else:
        err = [ln for ln in lines if re.match(r"(omny: )?error\b", ln.strip(), re.I)]
        err = err or [ln for ln in lines if re.search(r"error|fail|mismatch", ln, re.I)]
        if err:
            info["error_lines"] = err[:3]
    return info


def run_cmd(cmd: list[str], timeout: int) -> dict[str, Any]:
    """Run one command; capture rc, time and a summary of its output."""
    t = time.monotonic()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        p = subprocess.run(
            cmd,
            check=False,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        rc, out = p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        out = (
            (e.stdout or b"").decode(errors="replace")
            if isinstance(e.stdout, bytes)
            else (e.stdout or "")
        )
    dt = round(time.monotonic() - t, 2)
    out = out.replace(str(ROOT) + "/", "")
    if WORK_DIR[0]:
        out = out.replace(WORK_DIR[0] + "/", "$WORK/")
    short = [c if len(c) < 120 else "…" + c[-60:] for c in cmd]
    rel = [c.replace(str(ROOT) + "/", "") for c in short]
    if WORK_DIR[0]:
        rel = [c.replace(WORK_DIR[0] + "/", "$WORK/") for c in rel]
    return {
        "cmd": " ".join(["omny", *rel[len(_omny()) :]]),
        "rc": rc,
        "seconds": dt,
        **summarize(out),
        "_out": out,
    }


def baseline_one(
    entry: dict[str, Any], work: Path, timeout: int, no_dims: bool = False
) -> dict[str, Any]:
    """All steps for one model (``no_dims``: verify and run without ``--dim``, as a new user)."""
    name = entry["name"]
    model = CORPUS / entry["file"]
    d = work / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    omny = _omny()
    omny_file = d / f"{name}.omny"
    dims = [f"{k}={v}" for k, v in sorted(entry.get("suggested_dims", {}).items())]
    dim_args = [a for kv in dims for a in ("--dim", kv)]
    res: dict[str, Any] = {"name": name, "steps": {}, "plan_attempts": []}
    base = [*omny, "plan", str(model), "-o", str(omny_file), "--shards", "2"]
    attempts = [("plain", [])]
    if dims:
        attempts.append(("dims", dim_args))
    attempts.append(("relaxed", ["--relaxed"]))
    if dims:
        attempts.append(("relaxed+dims", ["--relaxed", *dim_args]))
    relaxed = False
    plan_ok = False
    for label, extra in attempts:
        r = run_cmd(base + extra, timeout)
        r["attempt"] = label
        res["plan_attempts"].append(r)
        if r["rc"] == 0 and omny_file.exists():
            plan_ok = True
            relaxed = "--relaxed" in extra
            res["plan_flags"] = label
            break
    res["steps"]["plan"] = res["plan_attempts"][-1] if plan_ok else res["plan_attempts"][0]
    if not plan_ok:
        res["first_failure"] = "plan"
        return res
    rflag = ["--relaxed"] if relaxed else []
    run_dims = [] if no_dims else dim_args
    cmds = {
        "check": [*omny, "check", str(omny_file), *rflag],
        "annotate": [*omny, "annotate", str(omny_file), str(d / f"{name}.annotated.onnx"), *rflag],
        "split": [*omny, "split", str(omny_file), str(d / "split"), "--shards", "2"],
        "verify": [*omny, "verify", str(omny_file), "--shards", "2", *run_dims],
        "run": [*omny, "run", str(omny_file), "--shards", "2", "--requests", "4", *run_dims],
    }
    for step, cmd in cmds.items():
        res["steps"][step] = run_cmd(cmd, timeout)
    after = [s for s in STEPS[1:] if res["steps"][s]["rc"] != 0]
    res["first_failure_after_plan"] = after[0] if after else None
    if res["plan_attempts"][0]["rc"] != 0:
        res["first_failure"] = "plan"
    else:
        res["first_failure"] = after[0] if after else None
    return res


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "–"
    if r["rc"] == 0:
        return "ok"
    return "timeout" if r["rc"] == "timeout" else f"rc {r['rc']}"


def _err(r: dict[str, Any]) -> str:
    if "exception" in r:
        s = r["exception"] if len(r["exception"]) < 160 else r["exception"][:160] + "…"
        if "frame" in r:
            s += f" @ {r['frame']}"
        return s
    if r.get("error_lines"):
        return " / ".join(r["error_lines"][:2])
    lines = r.get("last") or r.get("first") or []
    return " / ".join(lines[-2:])


def _signature(err: str) -> str:
    """An error with its model-specific parts (quoted names, numbers, paths) blanked."""
    err = err.split(" / ", maxsplit=1)[0]
    err = re.sub(r"Node\(name=.*?(?=@|$)", "Node(…) ", err)
    err = re.sub(r"'[^']*'", "'…'", err)
    err = re.sub(r"\$WORK/\S+|tests/corpus/\S+", "FILE", err)
    err = re.sub(r"\[[^\]]*\]", "[…]", err)
    err = re.sub(r"(?<![\w.])\d+(?![\w.])", "N", err)
    return err.strip()[:200]


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")[:400]


def write_report(
    results: list[dict[str, Any]], manifest: dict[str, Any], path: Path, header: dict[str, Any]
) -> None:
    """BASELINE.md: a table and per-model details."""
    out = ["# Baseline: the current `omny` on the corpus", ""]
    out.append(
        "Generated by `scripts/corpus_baseline.py` (not a test). Each command ran with a "
        f"{header['timeout']} s limit. `plan` is tried plain, then with `--dim` (the manifest's "
        "suggested_dims), then `--relaxed`, then both; the table's plan column shows the first "
        "that succeeded. check/annotate get `--relaxed` when plan needed it; verify/run get "
        + (
            "no `--dim` (they use the dims the .omny records). "
            if header.get("no_dims")
            else "the suggested `--dim` values. "
        )
        + "Steps after plan all read the .omny, so each runs even when an earlier one failed."
    )
    out.append("")
    out.append(f"- date: {header['date']}")
    out.append(
        f"- package: onnx-ir-multidevice {header['omny_version']} (commit {header['commit']})"
    )
    out.append(
        f"- python {header['python']}, {header['platform']}; "
        f"onnx {header['onnx']}, onnx-ir {header['onnx_ir']}, "
        f"onnxruntime {header['onnxruntime']}"
    )
    out.append("")
    n = len(results)
    all_ok = sum(1 for r in results if r["first_failure"] is None)
    plan_plain = sum(1 for r in results if r["plan_attempts"][0]["rc"] == 0)
    plan_any = sum(1 for r in results if r.get("plan_flags"))
    some_ok = sum(
        1 for r in results if r.get("plan_flags") and r.get("first_failure_after_plan") is None
    )
    out.append(
        f"**{all_ok}/{n}** models pass every step with plain `omny plan`, {some_ok}/{n} with "
        f"some plan variant; plain plan succeeds on {plan_plain}/{n}, some plan variant on "
        f"{plan_any}/{n}."
    )
    for s in STEPS[1:]:
        ok = sum(1 for r in results if r["steps"].get(s, {}).get("rc") == 0)
        out.append(f"{s}: {ok}/{n}" + (";" if s != "run" else "."))
    out.append("")
    out.append(
        "Columns: *first failure* is the first step that failed, plain `omny plan` included, "
        "with its exit code; *after plan* is the first of check..run that failed once some plan "
        "variant had succeeded; *error* quotes that later step when there is one, else the "
        "plain plan (exception type and innermost package frame for tracebacks, else the "
        "`omny: error:` line). `$WORK` is the scratch folder."
    )
    out.append("")
    out.append(
        "| model | source | nodes | plan | check | annotate | split | verify | run "
        "| first failure (rc) | after plan | error |"
    )
    out.append("|---|---|---:|---|---|---|---|---|---|---|---|---|")
    for r in results:
        e = manifest[r["name"]]
        plan = r["steps"]["plan"]
        pc = (
            "ok"
            if r.get("plan_flags") == "plain"
            else (f"ok ({r['plan_flags']})" if r.get("plan_flags") else _cell(plan))
        )
        cells = [pc] + [_cell(r["steps"].get(s)) for s in STEPS[1:]]
        ff = r["first_failure"]
        fa = r.get("first_failure_after_plan")
        if ff is None:
            err, ffc = "", "—"
        else:
            first = r["plan_attempts"][0] if ff == "plan" else r["steps"][ff]
            ffc = f"{ff} ({first['rc']})"
            err = _err(r["steps"][fa] if fa else first)
        if not r.get("plan_flags"):
            fac = "—"
        else:
            fac = f"{fa} ({r['steps'][fa]['rc']})" if fa else "none"
        out.append(
            f"| {r['name']} | {e['source']} | {e['nodes']} | "
            + " | ".join(cells)
            + f" | {ffc} | {fac} | {_md_escape(err)} |"
        )
    out.append("")
    out.append("## Failure classes")
    out.append("")
    out.append(
        "Errors of every failing step (plain plan, and check..run after the plan variant that "
        "worked; a failed plan variant is not counted), with quoted names and numbers blanked:"
    )
    out.append("")
    classes: dict[str, list[str]] = {}
    for r in results:
        rows = [("plan", r["plan_attempts"][0])]
        rows += [(st, r["steps"][st]) for st in STEPS[1:] if st in r["steps"]]
        seen = set()
        for st, x in rows:
            if x["rc"] == 0:
                continue
            key = f"{st}: {_signature(_err(x))}"
            if key not in seen:
                seen.add(key)
                classes.setdefault(key, []).append(r["name"])
    for key, names in sorted(classes.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        out.append(f"- **{len(names)}** × `{_md_escape(key)}` — {', '.join(names)}")
    out.append("")
    out.append("## Details")
    out.append("")
    for r in results:
        e = manifest[r["name"]]
        out.append(f"### {r['name']}")
        out.append("")
        out.append(f"`{e['file']}` — {e['generator']}; tags: {', '.join(e['tags'])}")
        out.append("")
        rows = [(f"plan [{a['attempt']}]", a) for a in r["plan_attempts"]]
        rows += [(s, r["steps"][s]) for s in STEPS[1:] if s in r["steps"]]
        for label, s in rows:
            status = _cell(s)
            out.append(f"- **{label}**: {status} ({s['seconds']} s) — `{s['cmd']}`")
            if s["rc"] != 0:
                for ln in s.get("error_lines", []):
                    out.append(f"  - error: `{_md_escape(ln)}`")
                if "exception" in s:
                    out.append(f"  - exception: `{_md_escape(s['exception'])}`")
                if "frame" in s:
                    out.append(f"  - innermost package frame: `{s['frame']}`")
                for ln in s.get("first", []):
                    out.append(f"  - first: `{_md_escape(ln)}`")
                for ln in s.get("last", []):
                    out.append(f"  - last: `{_md_escape(ln)}`")
        out.append("")
    path.write_text("\n".join(out) + "\n")


def _header(timeout: int) -> dict[str, Any]:
    def ver(mod: str) -> str:
        try:
            from importlib.metadata import version

            return version(mod)
        except Exception:
            return "?"

    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            check=False,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except Exception:
        commit = "?"
    return {
        "date": datetime.date.today().isoformat(),
        "omny_version": ver("onnx-ir-multidevice"),
        "commit": commit,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "onnx": ver("onnx"),
        "onnx_ir": ver("onnx-ir"),
        "onnxruntime": ver("onnxruntime"),
        "timeout": timeout,
    }


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], help="model name (repeatable)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per command (300)")
    ap.add_argument("--work", default="/tmp/omny-corpus-baseline", help="scratch folder")
    ap.add_argument("--jobs", type=int, default=1, help="models in parallel (1)")
    ap.add_argument("--no-write", action="store_true", help="print, do not write the report")
    ap.add_argument(
        "--no-dims",
        action="store_true",
        help="verify and run without --dim (at the dims the .omny records, as a new user would)",
    )
    ap.add_argument("--report", default=str(CORPUS / "BASELINE.md"))
    ap.add_argument(
        "--json",
        default=str(CORPUS / "baseline.json"),
        help="also write the raw results here ('' for none)",
    )
    args = ap.parse_args(argv)
    entries = json.loads((CORPUS / "manifest.json").read_text())
    manifest = {e["name"]: e for e in entries}
    names = args.only or [e["name"] for e in entries]
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    WORK_DIR[0] = str(work)
    results: dict[str, dict[str, Any]] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        futs = {
            ex.submit(baseline_one, manifest[n], work, args.timeout, args.no_dims): n for n in names
        }
        for f in concurrent.futures.as_completed(futs):
            r = f.result()
            results[r["name"]] = r
            cells = " ".join(f"{s}={_cell(r['steps'].get(s))}" for s in STEPS)
            print(f"{r['name']:28s} {cells} first_failure={r['first_failure']}", flush=True)
    ordered = [results[n] for n in names]
    if args.no_write:
        return 0
    header = {**_header(args.timeout), "no_dims": args.no_dims}
    write_report(ordered, manifest, Path(args.report), header)
    if args.json:
        clean = [
            {
                **r,
                "plan_attempts": [
                    {k: v for k, v in a.items() if k != "_out"} for a in r["plan_attempts"]
                ],
                "steps": {
                    s: {k: v for k, v in st.items() if k != "_out"} for s, st in r["steps"].items()
                },
            }
            for r in ordered
        ]
        Path(args.json).write_text(
            json.dumps({"header": header, "results": clean}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
