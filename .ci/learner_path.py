"""The learner's path, as the public CI's `learner` job runs it on Linux, macOS and Windows: with the
course installed from its wheel (not the checkout) and the torch of the matrix, run chapters' solution
notebooks (one per group of chapters) in a kernel of this Python, from a folder outside the checkout,
and fail on any error. The timing demos' asserts on CPU-time slopes are reported, not failed (a shared
runner skews them); everything else, every check included, must pass.

    python .ci/learner_path.py 04_masking_and_causal_attention 09_gqa_and_kv_cache 13_flash_attention
"""
import json
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def run(chapter: str) -> list:
    nb = nbformat.reads((ROOT / "solutions" / chapter / f"{chapter}.ipynb").read_text(encoding="utf-8"), as_version=4)
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    with tempfile.TemporaryDirectory() as work:
        NotebookClient(nb, kernel_name="python3", timeout=900, allow_errors=True,
                       resources={"metadata": {"path": work}}).execute()
    errors = []
    for c in nb.cells:
        for o in c.get("outputs", []) if c.cell_type == "code" else []:
            if o.output_type == "error":
                timing = "best_time(" in c.source and o.ename == "AssertionError"
                print(f"{chapter} {c.get('id')}: {o.ename}: {o.evalue}" + (" (timing demo: reported only)" if timing else ""))
                if not timing:
                    errors.append(c.get("id"))
    return errors


def main(chapters) -> int:
    import torch
    import utils

    assert utils.COURSE == "attention-course" and ROOT not in Path(utils.__file__).resolve().parents, utils.__file__
    print(f"utils from {utils.__file__}; torch {torch.__version__}; Python {sys.version.split()[0]} on {sys.platform}")
    failed = {}
    for chapter in chapters:
        start = time.perf_counter()
        errors = run(chapter)
        print(f"{chapter}: {'ok' if not errors else 'FAILED ' + json.dumps(errors)} in {time.perf_counter() - start:.0f} s")
        if errors:
            failed[chapter] = errors
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
