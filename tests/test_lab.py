"""`make lab` works: JupyterLab starts headless on the course, answers its API over loopback,
serves nbgrader's extension, and stops."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str):
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.status, r.read().decode()


def test_lab_starts_and_answers(tmp_path):
    port, token = _free_port(), "course-test-token"
    env = dict(os.environ, JUPYTER_CONFIG_PATH=str(ROOT / "grader"), JUPYTER_RUNTIME_DIR=str(tmp_path))
    cmd = [str(Path(sys.executable).parent / "jupyter"), "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
           f"--ServerApp.token={token}", f"--ServerApp.root_dir={ROOT}", "--allow-root"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline, status = time.time() + 60, None
        while time.time() < deadline:
            try:
                status = _get(f"http://127.0.0.1:{port}/api/status", token)
                break
            except OSError:
                time.sleep(0.5)
        assert status and status[0] == 200, "JupyterLab did not answer /api/status within 60 s"
        code, body = _get(f"http://127.0.0.1:{port}/api/contents/notebooks", token)
        names = [c["name"] for c in json.loads(body)["content"]]
        assert "03_scaled_dot_product_attention" in names
        code, body = _get(f"http://127.0.0.1:{port}/lab/api/extensions", token)
        assert "nbgrader" in body, "nbgrader's JupyterLab extension is not available"
        code, body = _get(f"http://127.0.0.1:{port}/formgrader", token)
        assert code == 200
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
