"""Rebuild what gets graded from a submission and the release.

- Test cells (nbgrader grade cells that are not answers) and other locked cells are restored from
  the release, source and metadata; an edited or deleted one is reported as tampering.
- Answer cells keep the learner's source with the release's metadata. Cells the learner added stay
  (their helpers may be used by their answers) but lose any nbgrader metadata they copied.
- All outputs are cleared: only what runs in the sandbox counts.
- A notebook that is not valid JSON, or that has none of the assignment's graded cells (another
  assignment's notebook), is replaced by the untouched release and reported.
"""
from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path


def nbg(cell: dict) -> dict:
    meta = cell.get("metadata", {})
    m = meta.get("nbgrader", {}) if isinstance(meta, dict) else {}
    return m if isinstance(m, dict) else {}


def grade_id(cell: dict) -> str | None:
    gid = nbg(cell).get("grade_id")
    return gid if isinstance(gid, str) else None


def is_test(cell: dict) -> bool:
    m = nbg(cell)
    return bool(m.get("grade")) and not m.get("solution")


def is_answer(cell: dict) -> bool:
    return bool(nbg(cell).get("solution"))


def is_locked_release_cell(cell: dict) -> bool:
    m = nbg(cell)
    return bool(m.get("locked")) or is_test(cell)


def is_demo(cell: dict) -> bool:
    """A course demo cell: locked by the release (grader/nbgrader_config.py), scoring nothing."""
    m = nbg(cell)
    return bool(m.get("locked")) and not m.get("grade") and not m.get("solution")


def source(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else str(s)


@dataclass
class Restored:
    notebook: dict
    notes: list = field(default_factory=list)  # what was wrong with the submission, for the reasons
    problem: str | None = None  # set when the submission could not be used at all


MAX_BYTES = 8 * 2**20  # a notebook larger than this is refused before any work is done
MAX_CELLS = 1000


def load_submission(path: Path, max_bytes: int = MAX_BYTES, max_cells: int = MAX_CELLS,
                    root: Path | None = None) -> tuple[dict | None, str | None]:
    """The submitted notebook, or why it cannot be graded. With ``root`` (the submissions folder),
    no link is followed anywhere on the path below it (``sandbox.read_below``)."""
    from .sandbox import read_below, read_regular

    if not os.path.lexists(path):
        return None, "no notebook was submitted for this assignment"
    if root is not None:
        data, why = read_below(root, list(path.relative_to(root).parts), max_bytes)
    else:
        data, why = read_regular(path, max_bytes)
    if data is None:
        if "larger" in (why or ""):
            return None, f"the notebook file is larger than {max_bytes // 2**20} MiB: it was not graded"
        return None, f"the notebook file could not be read ({why})"
    try:
        nb = json.loads(data.decode("utf-8"))
    except RecursionError:
        return None, "the notebook file is nested too deeply to be a notebook"
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return None, f"the notebook file is not valid notebook JSON ({type(err).__name__}: {str(err)[:120]})"
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return None, "the notebook file has no list of cells"
    if len(nb["cells"]) > max_cells:
        return None, f"the notebook has {len(nb['cells'])} cells, more than the {max_cells} allowed: it was not graded"
    for cell in nb["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            return None, "the notebook file has a malformed cell"
        src = cell.get("source", "")
        if not isinstance(src, str) and not (isinstance(src, list) and all(isinstance(x, str) for x in src)):
            return None, "the notebook file has a cell whose source is not text"
        if not isinstance(cell.get("metadata", {}), dict):
            return None, "the notebook file has a cell whose metadata is not an object"
    return nb, None


def _clean(cell: dict) -> dict:
    cell = copy.deepcopy(cell)
    cell["source"] = source(cell)
    if cell["cell_type"] == "code":
        cell["outputs"] = []
        cell["execution_count"] = None
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)
    cell.setdefault("metadata", {})
    return cell


def restore(release: dict, submission: dict | None, problem: str | None = None) -> Restored:
    """The notebook to execute: the learner's answers inside the release's locked structure."""
    if submission is None:
        nb = copy.deepcopy(release)
        nb["cells"] = [_clean(c) for c in nb["cells"]]
        return Restored(_as_notebook(nb), [problem] if problem else [], problem)

    release_cells = release["cells"]
    release_ids = [grade_id(c) for c in release_cells]
    by_id = {gid: c for gid, c in zip(release_ids, release_cells) if gid}
    sub_ids = {grade_id(c) for c in submission["cells"] if grade_id(c)}
    if by_id and not (sub_ids & set(by_id)):
        msg = "this notebook has none of the assignment's graded cells (is it another assignment's notebook?)"
        return restore(release, None, msg)

    notes: list[str] = []
    out: list[dict] = []
    seen: set[str] = set()
    for cell in submission["cells"]:
        gid = grade_id(cell)
        if gid and gid in by_id and gid not in seen:
            seen.add(gid)
            ref = by_id[gid]
            if is_locked_release_cell(ref):
                edited = source(cell) != source(ref) or cell.get("cell_type") != ref.get("cell_type")
                if edited and not is_demo(ref):  # a demo cell is simply the course's again
                    notes.append(f"the locked cell `{gid}` was edited: it was restored from the release")
                out.append(_clean(ref))
            else:  # an answer: the learner's source, the release's metadata and type
                fixed = _clean(ref)
                fixed["source"] = source(cell)
                out.append(fixed)
        else:
            fixed = _clean(cell)
            if gid or "nbgrader" in fixed["metadata"]:
                fixed["metadata"].pop("nbgrader", None)  # copied or unknown nbgrader cell: plain cell
            out.append(fixed)

    # Re-insert deleted release cells after the nearest preceding release cell still present.
    for idx, gid in enumerate(release_ids):
        if not gid or gid in seen:
            continue
        ref = release_cells[idx]
        if is_locked_release_cell(ref):
            if not is_demo(ref):  # a notebook from before demo cells were locked lacks them all
                notes.append(f"the locked cell `{gid}` was deleted: it was restored from the release")
            insert_cell = _clean(ref)
        else:
            notes.append(f"the answer cell `{gid}` was deleted: it was restored empty, as released")
            insert_cell = _clean(ref)
        anchor = None
        for prev in reversed(release_ids[:idx]):
            if prev and any(grade_id(c) == prev for c in out):
                anchor = prev
                break
        pos = 0 if anchor is None else next(i for i, c in enumerate(out) if grade_id(c) == anchor) + 1
        out.insert(pos, insert_cell)
        seen.add(gid)

    nb = {
        "cells": out,
        "metadata": copy.deepcopy(release.get("metadata", {})),  # kernelspec from the release
        "nbformat": 4,
        "nbformat_minor": release.get("nbformat_minor", 5),
    }
    return Restored(_as_notebook(nb), notes, None)


def _as_notebook(nb: dict):
    """An nbformat NotebookNode with fresh, unique cell ids (as nbformat 4.5 wants)."""
    import nbformat

    nb = nbformat.from_dict(nb)
    nb["nbformat"], nb["nbformat_minor"] = 4, max(5, nb.get("nbformat_minor", 5))
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"
    return nb
