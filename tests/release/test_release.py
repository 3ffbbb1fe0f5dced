"""`make release` without images, for real: release/release.py run on two fresh clones of
this commit builds the wheels and sdists of both distributions, byte for byte the same; what
they hold and declare; the version everything reports (the npm packages and the chart too,
for a release of 0.3.0); the tree's versions agreeing; and the refusals of bad input.

The image archives and install.yaml need root, buildah and minutes: `make release-check`
builds and verifies them (and rebuilds the chart to compare its bytes).
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
import taskfleet
import taskfleet_operator

from tests.fixtures_operator import APISERVER_INTERVAL_S, APISERVER_TIMEOUT_S, OperatorProcess
from tests.polling import wait_for

REPO = Path(__file__).resolve().parents[2]
RELEASE = Path("release/release.py")
VERSION = "3.4.5-rc.2"  # not the tree's: the release writes it into its copy
PYTHON_VERSION = "3.4.5rc2"


def release(clone: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, clone / RELEASE, *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def clone_head(into: Path) -> Path:
    """A fresh clone of this commit: its own paths, file times and checkout."""
    head = subprocess.run(
        ["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    subprocess.run(["git", "clone", "-q", "--no-checkout", REPO, into], check=True)
    subprocess.run(["git", "-C", into, "checkout", "-q", head], check=True)
    return into


@pytest.fixture(scope="module")
def clones(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("clones")
    return clone_head(root / "a"), clone_head(root / "b")


@pytest.fixture(scope="module")
def built(clones: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The same commit built twice, from two clones: the two output directories."""
    outs = []
    for clone in clones:
        out = tmp_path_factory.mktemp("dist")
        done = release(clone, "build", VERSION, "--only", "python", "--out", str(out / "dist"))
        assert done.returncode == 0, done.stderr
        outs.append(out / "dist")
    return outs


def load_release_module(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """release/NAME.py imported as release.py imports it: by its plain name, its directory
    first on sys.path (for this test only)."""
    monkeypatch.syspath_prepend(str(REPO / RELEASE.parent))
    return importlib.import_module(name)


def metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return archive.read(name).decode()


def test_two_builds_of_one_commit_give_the_same_wheels_and_sdists_byte_for_byte(
    built: list[Path],
) -> None:
    first, second = built
    names = sorted(p.name for p in first.iterdir())
    assert names == [
        "SHA256SUMS",
        f"taskfleet-{PYTHON_VERSION}-py3-none-any.whl",
        f"taskfleet-{PYTHON_VERSION}.tar.gz",
        f"taskfleet_operator-{PYTHON_VERSION}-py3-none-any.whl",
        f"taskfleet_operator-{PYTHON_VERSION}.tar.gz",
    ]
    assert sorted(p.name for p in second.iterdir()) == names
    differing = [n for n in names if (first / n).read_bytes() != (second / n).read_bytes()]
    assert differing == []


def test_the_checksums_cover_every_artefact_and_verify_finds_a_changed_one(
    built: list[Path],
) -> None:
    dist = built[0]
    checked = subprocess.run(
        ["sha256sum", "--check", "--strict", "SHA256SUMS"],
        cwd=dist,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert len(checked.stdout.splitlines()) == 4
    assert release(REPO, "verify", VERSION, "--dist", str(dist)).returncode == 0

    tampered = dist.parent / "tampered"
    subprocess.run(["cp", "-a", dist, tampered], check=True)
    sdist = tampered / f"taskfleet-{PYTHON_VERSION}.tar.gz"
    sdist.write_bytes(sdist.read_bytes() + b"\0")
    done = release(REPO, "verify", VERSION, "--dist", str(tampered))
    assert done.returncode == 1
    assert f"taskfleet-{PYTHON_VERSION}.tar.gz: its sha256 differs" in done.stderr


def test_the_library_wheel_holds_no_operator_and_declares_no_development_tools(
    built: list[Path],
) -> None:
    wheel = built[0] / f"taskfleet-{PYTHON_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        # the script bundle, byte for byte: what every client sends to Redis
        bundle = REPO / "worker-image/taskfleet/protocol/bundle"
        for path in [*bundle.glob("*.lua"), bundle / "manifest.json"]:
            shipped = archive.read(f"taskfleet/protocol/bundle/{path.name}")
            assert shipped == path.read_bytes(), path.name
    assert not [n for n in names if n.startswith("taskfleet_operator")]
    assert "taskfleet/protocol/lua/claim.lua" in names
    assert "taskfleet/protocol/lua/includes/claim_tasks.lua" in names
    assert "taskfleet/py.typed" in names
    meta = metadata(wheel)
    assert re.findall(r"^Provides-Extra: (.+)$", meta, re.M) == [
        "metrics",
        "opentelemetry",
        "dashboard",
    ]
    required = re.findall(r"^Requires-Dist: ([A-Za-z0-9_.-]+)", meta, re.M)
    for tool in ("pytest", "ruff", "mypy", "hypothesis", "selenium", "build", "kopf"):
        assert tool not in required
    assert "License-Expression: Apache-2.0" in meta.splitlines()
    assert f"{wheel.name.split('-')[0]}-{PYTHON_VERSION}.dist-info/licenses/LICENSE" in names


def test_the_operator_wheel_is_its_own_distribution_pinned_to_the_same_library(
    built: list[Path],
) -> None:
    wheel = built[0] / f"taskfleet_operator-{PYTHON_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "taskfleet_operator/handlers.py" in names
    assert not [n for n in names if n.startswith("taskfleet/")]
    meta = metadata(wheel)
    assert f"Version: {PYTHON_VERSION}" in meta.splitlines()
    required = re.findall(r"^Requires-Dist: (.+)$", meta, re.M)
    assert f"taskfleet=={PYTHON_VERSION}" in required
    assert {r.split("<")[0].split(">")[0] for r in required} >= {"kopf", "kubernetes"}


def test_the_released_packages_report_the_release_version(
    built: list[Path], tmp_path: Path
) -> None:
    """The wheels unpacked ahead of the editable install on the path: their CLI and modules
    say the version the release was given, not the tree's."""
    for wheel in built[0].glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(tmp_path)
    probe = (
        "import taskfleet, taskfleet_operator; "
        "print(taskfleet.__file__, taskfleet.__version__, taskfleet_operator.__version__)"
    )
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    assert shown == [str(tmp_path / "taskfleet/__init__.py"), PYTHON_VERSION, PYTHON_VERSION]
    cli = subprocess.run(
        [sys.executable, "-m", "taskfleet", "--version"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert cli.stdout.strip() == f"taskfleet, version {PYTHON_VERSION}"


def test_the_tree_reports_one_version_everywhere() -> None:
    written = re.search(
        r'^__version__ = "([^"]+)"$',
        (REPO / "worker-image/taskfleet/_version.py").read_text(),
        re.M,
    )
    assert written is not None
    version = written.group(1)
    assert taskfleet.__version__ == taskfleet_operator.__version__ == version
    cli = subprocess.run(
        [sys.executable, "-m", "taskfleet", "--version"], capture_output=True, text=True, check=True
    )
    assert cli.stdout.strip() == f"taskfleet, version {version}"


def test_the_npm_package_and_the_chart_of_a_checkout_agree_with_the_library_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = load_release_module("stages", monkeypatch)
    assert module.version_disagreements(REPO) == []
    package = json.loads((REPO / "clients/node/package.json").read_text())
    assert package["version"] == module.npm_version(taskfleet.__version__)
    assert module.npm_version("0.3.0.dev0") == "0.3.0-dev.0"
    assert module.npm_version("0.3.0") == "0.3.0"

    tree = tmp_path / "tree"
    for name in ("worker-image/taskfleet/_version.py", "charts/taskfleet/Chart.yaml"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, tree / name)
    for name in ("node", "nestjs"):
        (tree / "clients" / name).mkdir(parents=True)
        for file in ("package.json", "package-lock.json"):
            shutil.copyfile(REPO / "clients" / name / file, tree / "clients" / name / file)
    assert module.version_disagreements(tree) == []
    (tree / "clients/node/package.json").write_text(json.dumps({**package, "version": "0.1.0"}))
    wanted = module.npm_version(taskfleet.__version__)
    assert module.version_disagreements(tree) == [
        f"clients/node/package.json says 0.1.0, not {wanted} "
        f"(worker-image/taskfleet/_version.py says {taskfleet.__version__})"
    ]
    (tree / "clients/node/package.json").write_text(json.dumps(package))
    nestjs = json.loads((REPO / "clients/nestjs/package.json").read_text())
    assert nestjs["version"] == wanted
    assert nestjs["peerDependencies"]["taskfleet"] == f"^{wanted}"
    lock = tree / "clients/nestjs/package-lock.json"
    locked = json.loads(lock.read_text())
    locked["packages"][""]["version"] = "0.1.0"
    locked["packages"][""]["peerDependencies"]["taskfleet"] = ">=0.1.0"
    lock.write_text(json.dumps(locked))
    assert module.version_disagreements(tree) == [
        f"clients/nestjs/package-lock.json says 0.1.0, {wanted}, not {wanted} "
        f"(worker-image/taskfleet/_version.py says {taskfleet.__version__})",
        f"clients/nestjs/package-lock.json asks for taskfleet >=0.1.0 as a peer, not ^{wanted}",
    ]
    shutil.copyfile(REPO / "clients/nestjs/package-lock.json", lock)
    chart = tree / "charts/taskfleet/Chart.yaml"
    chart.write_text(chart.read_text().replace("version: 0.0.0-dev", "version: 0.2.0"))
    [disagreement] = module.version_disagreements(tree)
    assert "charts/taskfleet/Chart.yaml says {'version': '0.2.0', 'appVersion': 'dev'}" in (
        disagreement
    )


@pytest.fixture(scope="module")
def release_0_3_0(clones: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make release VERSION=0.3.0` without images (nor install.yaml, which pins them)."""
    out = tmp_path_factory.mktemp("release-0.3.0") / "dist"
    done = release(clones[0], "build", "0.3.0", "--only", "python,npm,chart", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def test_a_release_of_0_3_0_writes_0_3_0_into_every_artefact(release_0_3_0: Path) -> None:
    dist = release_0_3_0
    assert sorted(p.name for p in dist.iterdir()) == [
        "SHA256SUMS",
        "taskfleet-0.3.0-py3-none-any.whl",
        "taskfleet-0.3.0.tar.gz",
        "taskfleet-0.3.0.tgz",
        "taskfleet-nestjs-0.3.0.tgz",
        "taskfleet-node-0.3.0.tgz",
        "taskfleet_operator-0.3.0-py3-none-any.whl",
        "taskfleet_operator-0.3.0.tar.gz",
    ]
    for wheel in dist.glob("*.whl"):
        assert "Version: 0.3.0" in metadata(wheel).splitlines(), wheel.name
    with tarfile.open(dist / "taskfleet-node-0.3.0.tgz") as packed:
        manifest = json.load(packed.extractfile("package/package.json"))  # type: ignore[arg-type]
        names = packed.getnames()
    assert (manifest["name"], manifest["version"]) == ("taskfleet", "0.3.0")
    assert "package/dist/src/index.js" in names and "package/bundle/manifest.json" in names
    with tarfile.open(dist / "taskfleet-nestjs-0.3.0.tgz") as packed:
        manifest = json.load(packed.extractfile("package/package.json"))  # type: ignore[arg-type]
        names = packed.getnames()
    assert (manifest["name"], manifest["version"]) == ("taskfleet-nestjs", "0.3.0")
    assert manifest["peerDependencies"]["taskfleet"] == "^0.3.0"
    assert "package/dist/src/index.js" in names and "package/dist/src/index.d.ts" in names
    assert not [n for n in names if n.startswith("package/dist/test/")]
    with tarfile.open(dist / "taskfleet-0.3.0.tgz") as chart:
        text = chart.extractfile("taskfleet/Chart.yaml").read().decode()  # type: ignore[union-attr]
    found = dict(re.findall(r"^(version|appVersion): \"?([^\"\n]+)\"?$", text, re.M))
    assert found == {"version": "0.3.0", "appVersion": "0.3.0"}
    assert release(REPO, "verify", "0.3.0", "--dist", str(dist)).returncode == 0


def _fake_npm_package(path: Path, manifest: dict[str, object], scratch: Path) -> None:
    (scratch / "package").mkdir(parents=True)
    (scratch / "package/package.json").write_text(json.dumps(manifest))
    with tarfile.open(path, "w:gz") as archive:
        archive.add(scratch / "package", arcname="package")


def test_verify_finds_npm_packages_of_another_version_or_peer_range(
    release_0_3_0: Path, tmp_path: Path
) -> None:
    dist = tmp_path / "dist"
    shutil.copytree(release_0_3_0, dist)
    npm_archives = ("taskfleet-node-0.3.0.tgz", "taskfleet-nestjs-0.3.0.tgz")
    for name in npm_archives:
        (dist / name).unlink()
    (dist / "SHA256SUMS").write_text(
        "".join(
            line + "\n"
            for line in (dist / "SHA256SUMS").read_text().splitlines()
            if not line.endswith(npm_archives)
        )
    )
    assert release(REPO, "verify", "0.3.0", "--dist", str(dist)).returncode == 0
    _fake_npm_package(
        dist / "taskfleet-node-0.3.0.tgz", {"name": "taskfleet", "version": "0.2.0"}, tmp_path / "a"
    )
    done = release(REPO, "verify", "0.3.0", "--dist", str(dist))
    assert done.returncode == 1
    assert "taskfleet-node-0.3.0.tgz: package.json says 0.2.0, not 0.3.0" in done.stderr
    assert "taskfleet-node-0.3.0.tgz is there without its companion" in done.stderr
    _fake_npm_package(
        dist / "taskfleet-nestjs-0.3.0.tgz",
        {"name": "taskfleet-nestjs", "version": "0.3.0", "peerDependencies": {"taskfleet": "^0.2"}},
        tmp_path / "b",
    )
    done = release(REPO, "verify", "0.3.0", "--dist", str(dist))
    assert done.returncode == 1
    assert "companion" not in done.stderr
    assert (
        "taskfleet-nestjs-0.3.0.tgz: asks for taskfleet ^0.2 as a peer, not ^0.3.0" in done.stderr
    )


@pytest.mark.apiserver
def test_the_operator_names_its_version_when_it_starts(operator_process: OperatorProcess) -> None:
    line = f"taskfleet-operator {taskfleet.__version__} starting, watching all namespaces"
    # The whole log: the operator is shared by the session, its start may be megabytes back.
    wait_for(
        lambda: line in operator_process.log.read_text(errors="replace"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what=lambda: f"{line!r} in the operator's log",
    )


@pytest.mark.parametrize(
    "version",
    ["", "0.2", "v0.2.0", "0.2.0.0", "01.2.3", "1.2.3-rc1", "1.2.3-preview.1", "1.2.3+build.5"],
)
def test_a_version_that_is_not_a_release_version_is_refused_in_one_line(
    version: str, tmp_path: Path
) -> None:
    out = tmp_path / "dist"
    done = release(REPO, "build", version, "--only", "python", "--out", str(out))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("release: error: VERSION ")
    assert not out.exists()


def test_release_versions_map_to_their_python_spelling(monkeypatch: pytest.MonkeyPatch) -> None:
    module = load_release_module("stages", monkeypatch)
    spellings = {
        "0.2.0": "0.2.0",
        "10.0.1": "10.0.1",
        "1.0.0-alpha.0": "1.0.0a0",
        "1.0.0-beta.3": "1.0.0b3",
        "1.0.0-rc.12": "1.0.0rc12",
    }
    assert {v: module.Version.parse(v).python for v in spellings} == spellings


def test_unknown_stages_and_an_install_without_images_are_refused(tmp_path: Path) -> None:
    for only, wanted in (
        ("python,wheels", "--only takes stages among python, npm, images, chart, install"),
        ("install", "--only install needs images"),
    ):
        done = release(REPO, "build", "1.0.0", "--only", only, "--out", str(tmp_path / "d"))
        assert (done.returncode, done.stderr.count("\n")) == (2, 1)
        assert wanted in done.stderr


def test_a_tree_with_uncommitted_changes_is_refused_unless_allowed(
    tmp_path: Path,
) -> None:
    clone = clone_head(tmp_path / "clone")
    (clone / "notes.txt").write_text("not committed\n")
    out = tmp_path / "dist"
    done = release(clone, "build", "1.0.0", "--only", "python", "--out", str(out))
    assert done.returncode == 2
    assert done.stderr.startswith("release: error: the tree has uncommitted changes (?? notes.txt")
    assert not out.exists()


def test_a_release_whose_chart_is_missing_fails_before_building_anything(
    tmp_path: Path,
) -> None:
    clone = clone_head(tmp_path / "clone")
    subprocess.run(["rm", "-rf", clone / "charts"], check=True)
    out = tmp_path / "dist"
    done = release(
        clone, "build", "1.0.0", "--only", "python,chart", "--allow-dirty", "--out", str(out)
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "release: error: no chart at charts/taskfleet/Chart.yaml"
    ]
    assert not out.exists()


def _oci_archive(path: Path, digest: str, ref: str) -> None:
    """An OCI archive holding only what verify reads: index.json naming one manifest."""
    import io
    import json
    import tarfile

    index = json.dumps(
        {
            "schemaVersion": 2,
            "manifests": [
                {"digest": digest, "annotations": {"org.opencontainers.image.ref.name": ref}}
            ],
        }
    ).encode()
    with tarfile.open(path, "w") as archive:
        info = tarfile.TarInfo("index.json")
        info.size = len(index)
        archive.addfile(info, io.BytesIO(index))


def test_a_release_lists_and_verifies_the_node_worker_image_with_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = load_release_module("stages", monkeypatch)
    verification = load_release_module("verification", monkeypatch)
    assert module.IMAGES == ("operator", "worker", "worker-node")
    semver = VERSION
    lines = []
    for name in module.IMAGES:
        archive = f"taskfleet-{name}-{semver}.oci.tar"
        _oci_archive(tmp_path / archive, f"sha256:{name}", semver)
        lines.append(f"localhost/taskfleet-{name} {semver} sha256:{name} {archive}")
    (tmp_path / "images.txt").write_text("\n".join(lines) + "\n")
    version = module.Version.parse(VERSION)
    assert verification._verify_images(tmp_path, version) == []

    (tmp_path / "images.txt").write_text("\n".join(lines[:2]) + "\n")
    assert verification._verify_images(tmp_path, version) == [
        "images.txt lists no image of worker-node"
    ]
