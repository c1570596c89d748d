"""project/RESULTS.md: the project's one results file, one section per benchmark.

Each benchmark script rewrites its own section from its JSON output when it finishes, with the
date, commit, machine and exact command, and copies that JSON (the raw figures) to
project/metrics/<section>.json, committed beside RESULTS.md so that each table can be checked
against it; the other sections stay as they are. History is git's.
"""

import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

RESULTS = Path(__file__).resolve().parents[1] / "RESULTS.md"
# The folder beside RESULTS.md that holds each section's raw figures.
METRICS = "metrics"
HEADER = ("# Results\n\nWritten by the project's benchmarks (`spacy project run benchmark` in `project/`), "
          "one section per benchmark, each from its latest run. Ratios compare systems measured in the same "
          "run on the same machine.\n")


def machine() -> str:
    memory = ""
    if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        memory = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    python = platform.python_version()
    cpu = cpu_name()
    return (f"{platform.machine()} {platform.system()}, {cpu + ', ' if cpu else ''}{os.cpu_count()} CPUs{memory}, "
            f"Python {python}")


def cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU as Linux's /proc/cpuinfo names it, with its family and model numbers (a virtual machine may
    name different CPUs alike, and speed ratios between systems depend on the CPU); elsewhere, Python's name."""
    try:
        fields = dict(re.findall(r"^(model name|cpu family|model)\s*:\s*(.*?)\s*$",
                                 cpuinfo.read_text(), re.M))
    except OSError:
        return platform.processor()
    if "model name" not in fields:
        return platform.processor()
    numbers = f" (family {fields['cpu family']}, model {fields['model']})" if "cpu family" in fields else ""
    return fields["model name"] + numbers


def commit() -> str:
    def git(*args):
        out = subprocess.run(["git", *args], cwd=RESULTS.parent, capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    # What the benchmarks write (an earlier section of the same session, in the results file and its raw
    # figures) and prose (Markdown: the README, notes) are not code changes.
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ":/", ":(top,exclude,glob)**/*.md",
                  f":(exclude){METRICS}")
    return head + (" (with uncommitted changes)" if changed else "")


_started: Optional[str] = None  # commit() when the run began (mark_start)


def mark_start() -> None:
    """Note the tree as a long run begins: its trainings and timings run the code of that moment, so a
    section written after the tree changed names both states."""
    global _started
    _started = commit()


def run_commit() -> str:
    """The section's commit: commit() now, and the one at mark_start where that differs."""
    now = commit()
    return now if _started in (None, now) else f"{_started} at start, {now} when written"


def raw_name(title: str) -> str:
    """The raw figures' file of a section: metrics/<title in lower case, words joined by dashes>.json."""
    return f"{METRICS}/" + re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") + ".json"


def write_section(title: str, body: str, configs: Sequence[str] = (), command: str = "",
                  path: Path = RESULTS, raw: Optional[Path] = None) -> None:
    """Replace (or add) the section `## title` of `path` with `body` and where it came from; `raw`,
    the JSON the body was made from, is copied beside `path` (raw_name) with the same provenance."""
    import spacy

    command = command or "python " + shlex.join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])
    lines = [f"## {title}", "",
             f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
             f"- commit: {run_commit()}; spaCy {spacy.__version__}",
             f"- machine: {machine()}",
             f"- command (in `project/`): `{command}`"]
    if configs:
        lines.append("- configs: " + ", ".join(f"`{c}`" for c in configs))
    if raw is not None:
        lines.append(f"- raw figures: `{raw_name(title)}`")
        target = Path(path).parent / raw_name(title)
        target.parent.mkdir(parents=True, exist_ok=True)
        provenance = {line[2:].split(": ", 1)[0]: line[2:].split(": ", 1)[1] for line in lines[2:]}
        figures = json.loads(Path(raw).read_text(encoding="utf8"))
        target.write_text(json.dumps({"section": title, **provenance, "figures": figures}, indent=1) + "\n")
    section = "\n".join(lines) + "\n\n" + body.strip() + "\n"
    path = Path(path)
    text = path.read_text() if path.exists() else HEADER
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text)
