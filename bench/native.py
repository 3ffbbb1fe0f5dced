"""The bench's systems outside Python, prepared on first use and cached under bench/.peers.

- ``node``: bench/node (BullMQ's worker, the Node producer, the reference handler) copied
  to bench/.peers/node and its pinned packages installed there with ``npm ci`` from
  bench/node/package-lock.json (again only when the lock file changes).
- ``asynq``: bench/go built with ``go build`` into bench/.peers/asynq/asynqbench, its
  modules from the Go module proxy at the versions go.mod and go.sum pin (rebuilt when a
  source changes; Go caches the modules and the build).
- ``taskfleet-node``: clients/node built (``npm ci`` when it has no node_modules, then
  ``npm run build``) when its dist/ is older than a source.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
PEERS_DIR = BENCH_DIR / ".peers"
NODE_SRC = BENCH_DIR / "node"
NODE_DIR = PEERS_DIR / "node"
GO_SRC = BENCH_DIR / "go"
ASYNQ_BIN = PEERS_DIR / "asynq" / "asynqbench"
CLIENT = BENCH_DIR.parent / "clients" / "node"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"{name} not found: the Node and Go peers need node, npm and go")
    return path


def digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def prepare_node() -> None:
    NODE_DIR.mkdir(parents=True, exist_ok=True)
    for src in NODE_SRC.iterdir():
        if src.is_file():
            shutil.copy2(src, NODE_DIR / src.name)
    lock = NODE_SRC / "package-lock.json"
    stamp = NODE_DIR / ".bench-lock"
    want = digest([lock, NODE_SRC / "package.json"])
    if (NODE_DIR / "node_modules").exists() and stamp.exists() and stamp.read_text() == want:
        return
    log(f"npm ci in {NODE_DIR} (pins: bench/node/package-lock.json)")
    subprocess.run([tool("npm"), "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True)
    stamp.write_text(want)


def prepare_asynq() -> None:
    sources = [p for p in GO_SRC.iterdir() if p.suffix in (".go", ".mod", ".sum")]
    stamp = ASYNQ_BIN.with_suffix(".src")
    want = digest(sources)
    if ASYNQ_BIN.exists() and stamp.exists() and stamp.read_text() == want:
        return
    log(f"go build {ASYNQ_BIN} (pins: bench/go/go.mod, go.sum)")
    ASYNQ_BIN.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [tool("go"), "build", "-mod=readonly", "-o", str(ASYNQ_BIN), "."], cwd=GO_SRC, check=True
    )
    stamp.write_text(want)


def prepare_taskfleet_node() -> None:
    entry = CLIENT / "dist" / "src" / "taskfleet-node.js"
    sources = [
        *CLIENT.glob("src/**/*.ts"),
        *(BENCH_DIR.parent / "worker-image").glob("taskfleet/protocol/bundle/*"),
    ]
    if entry.exists() and entry.stat().st_mtime >= max(p.stat().st_mtime for p in sources):
        return
    npm = tool("npm")
    if not (CLIENT / "node_modules").exists():
        log(f"npm ci in {CLIENT}")
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=CLIENT, check=True)
    log(f"npm run build in {CLIENT}")
    subprocess.run([npm, "run", "build"], cwd=CLIENT, check=True)


PREPARE = {"node": prepare_node, "asynq": prepare_asynq, "taskfleet-node": prepare_taskfleet_node}


def prepare(*what: str) -> None:
    for name in what:
        PREPARE[name]()


if __name__ == "__main__":
    prepare(*(sys.argv[1:] or PREPARE))
