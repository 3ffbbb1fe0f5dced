"""The npm packages of a release, installed as a NestJS team would: `release.py build --only
npm` on a fresh clone of this commit, then a new project in a temp dir that has nothing of
the repository but the two tarballs of dist/ (`npm install ./dist/taskfleet-node-*.tgz
./dist/taskfleet-nestjs-*.tgz`, NestJS itself from the npm registry or cache). It compiles
the module's quick start from clients/nestjs/README.md with `tsc` and runs it on a real
redis-server: a task enqueued through `@InjectQueue` is run by the `@Processor`.

It builds both npm packages and installs a project (minutes on a busy machine): marked
``npm_install``, outside `make test`; `make release-npm-check` runs it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: A pre-release: the NestJS module's peer range must accept its own pre-release of taskfleet.
VERSION = "0.3.0-rc.1"
NESTJS = REPO / "clients/nestjs"
#: What the quick start needs besides the two tarballs, pinned as the module's own tests pin
#: them (so npm's cache holds them).
FROM_REGISTRY = ("@nestjs/common", "@nestjs/core", "reflect-metadata", "rxjs")
TO_COMPILE = ("typescript", "@types/node")
#: The quick start's tsconfig: what a Nest project's tsconfig sets for decorators.
TSCONFIG = {
    "compilerOptions": {
        "target": "ES2022",
        "module": "NodeNext",
        "moduleResolution": "NodeNext",
        "types": ["node"],
        "strict": True,
        "experimentalDecorators": True,
        "emitDecoratorMetadata": True,
        "outDir": "dist",
    },
    "include": ["src/**/*.ts"],
}
#: Appended to the quick start: enqueue through the injected queue, wait, say what came back.
DRIVER = """
const id = await app.get(Signups).welcome("ada@example.com");
const queue = app.get<Queue>(getQueueToken("emails"));
const done = await queue.wait([id], { timeoutMs: 30_000 });
console.log(JSON.stringify({ state: done[id]?.state, result: done[id]?.result }));
await app.close();
"""


#: The build and the installs below have their own bounds (up to 15 min on a busy machine).
pytestmark = pytest.mark.timeout(1800)


def npm(args: list[str], cwd: Path, timeout: float = 600) -> str:
    done = subprocess.run(
        ["npm", *args, "--no-audit", "--no-fund", "--loglevel=error", "--prefer-offline"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"npm {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout


def release(clone: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, clone / "release/release.py", *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh clone of this commit."""
    head = subprocess.run(
        ["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    clone = tmp_path_factory.mktemp("npm-release") / "clone"
    subprocess.run(["git", "clone", "-q", "--no-checkout", REPO, clone], check=True)
    subprocess.run(["git", "-C", clone, "checkout", "-q", head], check=True)
    return clone


@pytest.fixture(scope="module")
def dist(clone: Path) -> Path:
    """`release.py build VERSION --only npm` on the clone."""
    out = clone.parent / "dist"
    done = release(clone, "build", VERSION, "--only", "npm", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def quick_start(redis_url: str) -> str:
    """The first TypeScript block of clients/nestjs/README.md, on the test's Redis, driven."""
    readme = (NESTJS / "README.md").read_text()
    found = re.search(r"^```ts\n(.*?)^```$", readme, re.M | re.S)
    assert found is not None, "clients/nestjs/README.md has no ```ts quick start"
    code = found.group(1)
    assert "redis://localhost:6379/0" in code and "@InjectQueue(" in code
    code = code.replace("redis://localhost:6379/0", redis_url)
    # The driver's names, added to the quick start's own imports.
    code = code.replace(
        "import { Handle, InjectQueue, Processor, TaskfleetModule }",
        "import { Handle, InjectQueue, Processor, TaskfleetModule, getQueueToken }",
    )
    assert "getQueueToken }" in code, "the quick start no longer imports taskfleet-nestjs so"
    return code + DRIVER


@pytest.mark.npm_install
def test_a_fresh_nestjs_project_installs_the_release_tarballs_alone_and_runs_the_quick_start(
    dist: Path, redis_url: str, tmp_path: Path
) -> None:
    tarballs = sorted(p.name for p in dist.glob("*.tgz"))
    assert tarballs == [f"taskfleet-nestjs-{VERSION}.tgz", f"taskfleet-node-{VERSION}.tgz"]
    pinned = json.loads((NESTJS / "package.json").read_text())["devDependencies"]
    app = tmp_path / "app"
    (app / "src").mkdir(parents=True)
    (app / "package.json").write_text(
        json.dumps({"name": "quick-start", "private": True, "type": "module"})
    )
    npm(
        [
            "install",
            str(dist / f"taskfleet-node-{VERSION}.tgz"),
            str(dist / f"taskfleet-nestjs-{VERSION}.tgz"),
            *(f"{name}@{pinned[name]}" for name in FROM_REGISTRY + TO_COMPILE),
        ],
        app,
    )
    for name in ("taskfleet", "taskfleet-nestjs"):
        installed = app / "node_modules" / name
        assert not installed.is_symlink(), f"{name} is linked, not installed from its tarball"
        assert json.loads((installed / "package.json").read_text())["version"] == VERSION
    # npm checked the peer range on install; `npm ls` says so again, in one tree.
    npm(["ls", "taskfleet", "taskfleet-nestjs"], app)

    (app / "tsconfig.json").write_text(json.dumps(TSCONFIG, indent=2))
    (app / "src/main.ts").write_text(quick_start(redis_url))
    compiled = subprocess.run(
        [app / "node_modules/.bin/tsc", "-p", "tsconfig.json"],
        cwd=app,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    ran = subprocess.run(
        ["node", "dist/main.js"], cwd=app, capture_output=True, text=True, timeout=120, check=False
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    last = ran.stdout.strip().splitlines()[-1]
    assert json.loads(last) == {"state": "done", "result": {"message": "sent to ada@example.com"}}


@pytest.mark.npm_install
def test_both_npm_tarballs_are_listed_verified_and_rebuilt_byte_for_byte(
    clone: Path, dist: Path
) -> None:
    listed = sorted(line.split()[1] for line in (dist / "SHA256SUMS").read_text().splitlines())
    assert listed == [f"taskfleet-nestjs-{VERSION}.tgz", f"taskfleet-node-{VERSION}.tgz"]
    done = release(clone, "verify", VERSION, "--dist", str(dist), "--rebuild")
    assert done.returncode == 0, done.stderr
    assert "every check passed" in done.stderr
