"""Execute one notebook, cell by cell. Runs INSIDE the sandbox (copied into its scratch folder).

Usage: python _execute.py IN.ipynb OUT.ipynb CELL_TIMEOUT

Every code cell ends with either its real outputs or a synthetic error saying why it did not run
(time limit, the kernel died, ...): a grade cell must never be left without outputs, because
nbgrader would score an unexecuted test cell as passed. Outputs are truncated so a 100 MB print
cannot bloat the notebook.
"""
import sys
import time

sys.modules.setdefault("rfc3987_syntax", None)  # 1.6 s of lark grammars nbformat never needs (grader/__init__.py)

import nbformat  # noqa: E402
from nbclient import NotebookClient  # noqa: E402
from nbclient.exceptions import CellTimeoutError, DeadKernelError

MAX_OUTPUT_CHARS = 10_000
WARM_UP_SECONDS = 300  # the warm-up's own limit: never the cell limit, so it is never interrupted
WARM_UP = """# grader warm-up
import torch, utils.checks
from utils._clock import defer_interrupts_during_imports
get_ipython().events.register("pre_run_cell", lambda *_, _defer=defer_interrupts_during_imports: _defer())
del defer_interrupts_during_imports
"""


def error_output(ename, evalue):
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def truncate(cell):
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            text = out.get("text", "")
            if len(text) > MAX_OUTPUT_CHARS:
                out["text"] = text[:MAX_OUTPUT_CHARS] + f"\n... [output truncated: {len(text)} characters]\n"
        for key in ("text/plain", "text/html"):
            data = out.get("data", {})
            if key in data and len("".join(data[key])) > MAX_OUTPUT_CHARS:
                data[key] = "".join(data[key])[:MAX_OUTPUT_CHARS] + "\n... [output truncated]"
        if out.get("output_type") == "error":
            out["traceback"] = [line[:MAX_OUTPUT_CHARS] for line in out.get("traceback", [])[-40:]]


def main(src, dst, cell_timeout):
    nb = nbformat.read(src, as_version=4)
    # shutdown_kernel="immediate": the kernel is killed at the end rather than asked to exit
    # (a graceful shutdown waits about 1.5 s for nothing: the sandbox is thrown away).
    client = NotebookClient(nb, timeout=cell_timeout, allow_errors=True, interrupt_on_timeout=True,
                            kernel_name="python3", record_timing=False, shutdown_kernel="immediate",
                            resources={"metadata": {"path": "."}})
    code_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    dead = None
    written = time.monotonic()
    try:
        with client.setup_kernel():
            # Warm-up, not part of the notebook: torch and the checks load now, not inside the
            # first cell's time limit; and from now on an interrupt (a cell past its limit) waits
            # for a running import to finish, so it never leaves a module half-initialised.
            # nbclient stores the cell it executed at the index it is given (nb.cells[index] = cell):
            # the warm-up is given an index past the notebook's end and the notebook's cell list is
            # put back afterwards, so no cell of the notebook is replaced by it.
            warm = nbformat.v4.new_code_cell(WARM_UP)
            cells = list(nb.cells)
            nb.cells.append(warm)
            client.timeout = WARM_UP_SECONDS
            try:
                client.execute_cell(warm, len(nb.cells) - 1, store_history=False)
            except Exception:  # noqa: BLE001 - the notebook runs all the same
                pass
            client.timeout = cell_timeout
            nb.cells[:] = cells
            for i in code_cells:
                cell = nb.cells[i]
                if dead:
                    cell.outputs = [error_output("NotExecuted", dead)]
                    continue
                try:
                    client.execute_cell(cell, i)
                except CellTimeoutError:
                    cell.outputs.append(error_output("TimeoutError", f"this cell exceeded the {cell_timeout} s limit per cell"))
                except DeadKernelError:
                    dead = "the kernel died (it crashed, exited or ran out of memory) before this cell ran"
                    cell.outputs.append(error_output("DeadKernelError", "the kernel died while running this cell"))
                except Exception as err:  # nbclient's own failure: record it, never stop
                    cell.outputs.append(error_output(type(err).__name__, str(err)[:2000]))
                truncate(cell)
                if time.monotonic() - written > 0.5:  # progress so far, in case the sandbox is killed
                    nbformat.write(nb, dst)  # (not after every cell: a write costs ~20 ms, a cell often less)
                    written = time.monotonic()
    except Exception as err:  # the kernel could not start, or shutting it down failed
        for i in code_cells:
            if not nb.cells[i].get("outputs"):
                nb.cells[i].outputs = [error_output("NotExecuted", f"the kernel failed: {str(err)[:500]}")]
    nbformat.write(nb, dst)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
