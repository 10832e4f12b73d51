"""``make benchmark``: the course's own performance, measured in one run, written as one table.

Four measurements (``python -m grader benchmark --out reports``):

1. **Notebooks**: each solution notebook executed top to bottom (nbclient, one kernel each, wall
   time), and the whole course's sum.
2. **Visible checks**: each exercise's check run on its reference ``REPEATS`` times in this process
   (wall time; median and max).
3. **Grading against execution**: one full-course submission (every chapter's correct answers, as
   the sample bank builds them) executed plainly, then autograded with 1 worker; the ratio is what
   grading costs over merely running the same notebooks. Grading executes only what it needs
   (answer cells, the learner's own cells, test cells, and the definitions of the locked demo
   cells), then re-verifies each exercise in a fresh sandboxed process.
4. **Batch speed-up**: a class, 16 students' chapter-03 notebooks, graded with 1 and with 2
   workers; speed-up = 1-worker time over 2-worker time. (The full-course submission is graded
   with 2 workers too; its 16 assignments each add nbgrader's serial steps, so it gains less.)

Writes ``benchmark.md`` and ``benchmark.json`` into ``--out``, naming the machine. Targets on 2
cores (issue "the course's own performance"): the course executes in <= 5 min, grading <= 1.3x
plain execution, 2 workers >= 1.7x faster than 1. The table reports; it asserts nothing, because
timing depends on the machine.
"""
from __future__ import annotations

import io
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import course

REPEATS = 5
TARGETS = {"course_seconds": 300.0, "grade_over_execute": 1.3, "speedup_2_workers": 1.7}


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}"


def execute(path: Path) -> float:
    """Wall seconds to execute one notebook top to bottom in a fresh kernel (outputs discarded)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


def check_times() -> dict:
    from utils._guard import unguarded
    from utils.checks import EXERCISES
    from utils.checks._core import run_check

    out = {}
    with contextlib.redirect_stdout(io.StringIO()):
        run_check(EXERCISES["softmax"], unguarded(EXERCISES["softmax"].reference), quiet=True)  # warm-up
        for name, ex in sorted(EXERCISES.items()):
            times = []
            for _ in range(REPEATS):
                start = time.perf_counter()
                run_check(ex, unguarded(ex.reference), quiet=True)
                times.append(time.perf_counter() - start)
            out[name] = {"median": statistics.median(times), "max": max(times)}
    return out


def full_course_submission(folder: Path, student: str = "full_course") -> Path:
    """Every chapter's correct answers (the sample bank's builders) as one student's submission."""
    from .samples import bank

    correct = {bank.ASSIGNMENT_OF.get(s, bank.A): build for s, (_, build, _) in bank.SAMPLES.items()
               if s == "correct" or (s.startswith("ch") and s.endswith("_correct"))}
    missing = sorted(set(course.assignments()) - set(correct))
    if missing:
        raise SystemExit(f"no correct sample in the bank for {', '.join(missing)}")
    for assignment, build in sorted(correct.items()):
        dest = folder / student / assignment
        dest.mkdir(parents=True, exist_ok=True)
        (dest / f"{assignment}.ipynb").write_text(json.dumps(build(), indent=1))
    return folder


def grade(submissions: Path, tmp: Path, workers: int) -> tuple[float, dict]:
    env = dict(os.environ, GRADER_WORKERS=str(workers), GRADEBOOK_URL=f"sqlite:///{tmp}/gb-{workers}.db",
               JUPYTER_CONFIG_PATH=str(course.GRADER))
    reports = tmp / f"reports-{workers}"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "grader", "autograde", "--quiet", "--submissions", str(submissions),
                           "--reports", str(reports), "--work", str(tmp / f"work-{workers}")],
                          cwd=course.ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"grading failed:\n{proc.stdout}\n{proc.stderr[-3000:]}")
    return seconds, json.loads((reports / "timing.json").read_text())


CLASS_SIZE = 16
CLASS_ASSIGNMENT = "03_scaled_dot_product_attention"


def class_batch(tmp: Path) -> dict:
    """What an instructor grades: one assignment handed in by a class (CLASS_SIZE students, each
    the correct answers), with 1 and with 2 workers. The batch's serial steps (nbgrader recording
    the assignment, then scoring) happen once, as in real use; a full-course submission repeats
    them for each of its sixteen assignments, which is why its own speed-up is lower."""
    from .samples import bank

    nb = json.dumps(bank.correct(), indent=1)
    subs = tmp / "class"
    for i in range(CLASS_SIZE):
        dest = subs / f"student_{i:02d}" / CLASS_ASSIGNMENT
        dest.mkdir(parents=True, exist_ok=True)
        (dest / f"{CLASS_ASSIGNMENT}.ipynb").write_text(nb)
    for d in ("class-1", "class-2"):
        (tmp / d).mkdir(exist_ok=True)
    c1, _ = grade(subs, tmp / "class-1", workers=1)
    c2, _ = grade(subs, tmp / "class-2", workers=2)
    return {"class_size": CLASS_SIZE, "class_1_worker_seconds": round(c1, 1), "class_2_workers_seconds": round(c2, 1),
            "speedup_2_workers": round(c1 / c2, 2)}


def run(out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "targets": TARGETS}
    print("1/4 executing the solution notebooks", flush=True)
    result["notebooks"] = {a: round(execute(course.source_path(a)), 1) for a in course.assignments()}
    result["course_seconds"] = round(sum(result["notebooks"].values()), 1)
    print("2/4 timing the visible checks", flush=True)
    result["checks"] = {k: {m: round(v, 3) for m, v in d.items()} for k, d in check_times().items()}
    with tempfile.TemporaryDirectory(prefix="attention-bench-") as tmp_name:
        tmp = Path(tmp_name)
        subs = full_course_submission(tmp / "subs")
        notebooks = sorted((subs / "full_course").glob("*/*.ipynb"))
        print(f"3/4 one full-course submission ({len(notebooks)} notebooks): plain execution, then grading", flush=True)
        result["submission_execute_seconds"] = round(sum(execute(p) for p in notebooks), 1)
        t1, timing1 = grade(subs, tmp, workers=1)
        t2, _ = grade(subs, tmp, workers=2)
        print(f"4/4 a class: {CLASS_SIZE} students' {CLASS_ASSIGNMENT}, graded with 1 and with 2 workers", flush=True)
        result.update(class_batch(tmp))
    result["grade_1_worker_seconds"] = round(t1, 1)
    result["grade_2_workers_seconds"] = round(t2, 1)
    result["grade_over_execute"] = round(t1 / result["submission_execute_seconds"], 2)
    result["full_course_speedup_2_workers"] = round(t1 / t2, 2)
    result["batch_submissions"] = len(notebooks)
    result["grade_seconds_per_notebook"] = {k.split("/", 1)[1]: v["grade_seconds"]
                                            for k, v in timing1["per_submission"].items()}
    (out / "benchmark.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "benchmark.md").write_text(markdown(result))
    return result


def _ok(value: float, target: float, less: bool = True) -> str:
    return "✅" if (value <= target if less else value >= target) else "❌"


def markdown(r: dict) -> str:
    lines = [f"# Course benchmark ({r['date']})", "", f"Machine: {r['machine']}.", "",
             "| measure | value | target |", "|---|---|---|",
             f"| whole course, solution notebooks executed | {r['course_seconds']:.0f} s | ≤ 300 s "
             f"{_ok(r['course_seconds'], 300)} |",
             f"| one full-course submission ({r['batch_submissions']} notebooks), plain execution | "
             f"{r['submission_execute_seconds']:.0f} s | |",
             f"| the same submission autograded, 1 worker | {r['grade_1_worker_seconds']:.0f} s | |",
             f"| grading / plain execution | {r['grade_over_execute']:.2f}× | ≤ 1.3× "
             f"{_ok(r['grade_over_execute'], 1.3)} |",
             f"| the same {r['batch_submissions']} notebooks, 2 workers | {r['grade_2_workers_seconds']:.0f} s "
             f"({r['full_course_speedup_2_workers']:.2f}× faster) | |",
             f"| a class: {r['class_size']} students' chapter 03, 1 worker / 2 workers | "
             f"{r['class_1_worker_seconds']:.0f} s / {r['class_2_workers_seconds']:.0f} s | |",
             f"| speed-up of 2 workers over 1 (the class) | {r['speedup_2_workers']:.2f}× | ≥ 1.7× "
             f"{_ok(r['speedup_2_workers'], 1.7, less=False)} |",
             "", "| notebook | execute (s) | grade, 1 worker (s) |", "|---|---|---|"]
    for a, s in r["notebooks"].items():
        lines.append(f"| {a} | {s:.1f} | {r['grade_seconds_per_notebook'].get(a, float('nan')):.1f} |")
    checks = r["checks"]
    med = [v["median"] for v in checks.values()]
    lines += ["", f"Visible checks on the reference, {REPEATS} runs each: median of medians "
              f"{statistics.median(med):.3f} s, slowest median {max(med):.3f} s.", "",
              "| check | median (s) | max (s) |", "|---|---|---|"]
    lines += [f"| {k} | {v['median']:.3f} | {v['max']:.3f} |" for k, v in checks.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m grader benchmark")
    p.add_argument("--out", type=Path, default=course.ROOT / "reports")
    args = p.parse_args(argv)
    r = run(args.out)
    print((args.out / "benchmark.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
