"""A release's artefacts and how each is built: the version, the tree to build from, the
reproducible archives, the stages (``python``, ``npm``, ``images``, ``chart``, ``install``) and
``build``, which runs them into one directory with ``SHA256SUMS``.

release.py is the command line over this module; verification.py checks what it wrote. The
modules sit beside release.py and are imported by their plain names: release.py runs as a
script (``python release/release.py``), whose own directory is first on ``sys.path``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
VERSION_FILE = Path("worker-image/taskfleet/_version.py")
#: The npm packages, packed in this order (the NestJS module builds on the Node client):
#: their manifests and lock files carry the version too.
NODE_PACKAGE = Path("clients/node")
NESTJS_PACKAGE = Path("clients/nestjs")
NPM_PACKAGES = (NODE_PACKAGE, NESTJS_PACKAGE)
NPM_VERSIONED = tuple(p / n for p in NPM_PACKAGES for n in ("package.json", "package-lock.json"))
CHART = Path("charts/taskfleet")
INSTALL_KUSTOMIZATION = Path("release/install")
STAGES = ("python", "npm", "images", "chart", "install")
#: The images a release builds: taskfleet-NAME (worker-node: clients/node/Dockerfile).
IMAGES = ("operator", "worker", "worker-node")
#: The image the manifests name for the operator (manifests/operator/deployment.yaml).
OPERATOR_IMAGE = "localhost/taskfleet-operator"

_SEMVER = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-(alpha|beta|rc)\.(0|[1-9][0-9]*))?"
)
_PEP440_PRE = {"alpha": "a", "beta": "b", "rc": "rc"}


class BadInputError(Exception):
    """What the caller must fix: one line, exit 2."""


class StepError(Exception):
    """A build step that failed: its output was shown; exit 1."""


@dataclass(frozen=True)
class Version:
    """A release's version: semver for the images and the chart, PEP 440 for Python."""

    semver: str
    python: str

    @classmethod
    def parse(cls, text: str) -> Version:
        if not text:
            raise BadInputError("VERSION is required: make release VERSION=x.y.z")
        found = _SEMVER.fullmatch(text)
        if found is None:
            raise BadInputError(
                f"VERSION {text!r} is not a release version: MAJOR.MINOR.PATCH (e.g. 0.2.0), "
                "optionally with -alpha.N, -beta.N or -rc.N"
            )
        major, minor, patch, pre, number = found.groups()
        python = f"{major}.{minor}.{patch}"
        if pre:
            python += f"{_PEP440_PRE[pre]}{number}"
        return cls(text, python)

    @property
    def npm_archive(self) -> str:
        """The npm package's file in dist/: named apart from the chart's taskfleet-X.Y.Z.tgz."""
        return f"taskfleet-node-{self.semver}.tgz"

    @property
    def nestjs_archive(self) -> str:
        """The NestJS module's file in dist/, as npm names it."""
        return f"taskfleet-nestjs-{self.semver}.tgz"

    @property
    def npm_archives(self) -> tuple[str, str]:
        """The npm packages' files in dist/, in NPM_PACKAGES's order."""
        return (self.npm_archive, self.nestjs_archive)


def npm_version(python: str) -> str:
    """The npm spelling of a PEP 440 version: a development version ``X.Y.Z.devN`` is
    ``X.Y.Z-dev.N``; a release is spelled alike in both."""
    found = re.fullmatch(r"(\d+\.\d+\.\d+)\.dev(\d+)", python)
    return f"{found.group(1)}-dev.{found.group(2)}" if found else python


def tree_version(tree: Path) -> str:
    """The version ``_version.py`` writes (PEP 440)."""
    found = re.search(r'^__version__ = "([^"]*)"$', (tree / VERSION_FILE).read_text(), re.M)
    if found is None:
        raise StepError(f'{VERSION_FILE} has no `__version__ = "..."` line')
    return found.group(1)


def peer_range(semver: str) -> str:
    """The range of ``taskfleet`` versions the NestJS module of release ``semver`` accepts:
    that release and the later ones of its minor version (its pre-releases too)."""
    return f"^{semver}"


def _npm_versions(data: dict[str, Any]) -> tuple[set[str], set[str]]:
    """The versions a manifest or lock file gives its own package, and the ranges it gives
    its peer ``taskfleet`` (none: the Node client itself)."""
    versions = {str(data.get("version"))}
    root = data.get("packages", {}).get("", {})  # a lock file names its root package twice
    if "packages" in data:
        versions.add(str(root.get("version")))
    peers = {
        str(d["taskfleet"])
        for d in (data.get("peerDependencies"), root.get("peerDependencies"))
        if d and "taskfleet" in d
    }
    return versions, peers


def version_disagreements(tree: Path) -> list[str]:
    """Where a checkout's versions disagree with ``_version.py``: the npm packages (their
    manifests and lock files, and the NestJS module's peer range on the Node client), and
    the chart, whose placeholders the release replaces."""
    python = tree_version(tree)
    wanted = npm_version(python)
    problems = []
    for name in NPM_VERSIONED:
        versions, peers = _npm_versions(json.loads((tree / name).read_text()))
        if versions != {wanted}:
            shown = ", ".join(sorted(versions))
            problems.append(f"{name} says {shown}, not {wanted} ({VERSION_FILE} says {python})")
        if name.parent == NESTJS_PACKAGE and peers != {peer_range(wanted)}:
            shown = ", ".join(sorted(peers)) or "nothing"
            problems.append(
                f"{name} asks for taskfleet {shown} as a peer, not {peer_range(wanted)}"
            )
    chart = tree / CHART / "Chart.yaml"
    if not chart.exists():
        return problems  # the chart stage says so, when it is asked for
    found = re.findall(r"^(version|appVersion): \"?([^\"\n]+)\"?$", chart.read_text(), re.M)
    placeholders = dict(found)
    if placeholders != {"version": "0.0.0-dev", "appVersion": "dev"}:
        problems.append(
            f"{CHART}/Chart.yaml says {placeholders}: a checkout keeps the placeholders "
            "version 0.0.0-dev and appVersion dev, which make release replaces"
        )
    return problems


def stamp_npm_packages(tree: Path, semver: str) -> None:
    """``semver`` as the version of each npm package's package.json and of the package in
    its lock file; the NestJS module's peer range on ``taskfleet``, its lock file's copy of
    the Node client's version (``../node``) follow."""
    for name in NPM_VERSIONED:
        path = tree / name
        data = json.loads(path.read_text())
        roots = [data, *([data["packages"][""]] if "packages" in data else [])]
        for root in roots:
            root["version"] = semver
            if "taskfleet" in root.get("peerDependencies", {}):
                root["peerDependencies"]["taskfleet"] = peer_range(semver)
        if "../node" in data.get("packages", {}):
            data["packages"]["../node"]["version"] = semver
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


# --- running tools ---------------------------------------------------------------------


def run(
    args: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    what: str,
) -> str:
    """Run a step, its output kept and shown only when it fails."""
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout)
        raise StepError(f"{what} failed (exit code {done.returncode})")
    return done.stdout


def git(*args: str) -> str:
    return run(["git", "-C", REPO, *args], what=f"git {args[0]}").strip()


def log(message: str) -> None:
    print(f"release: {message}", file=sys.stderr, flush=True)


def versions_env(tree: Path) -> dict[str, str]:
    """The pinned versions of e2e/cluster/versions.env (KEY=VALUE lines)."""
    values = {}
    for line in (tree / "e2e/cluster/versions.env").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            values[key.strip()] = value.strip()
    return values


def cache_dir() -> Path:
    return Path(os.environ.get("TASKFLEET_CACHE") or Path.home() / ".cache/taskfleet")


# --- the tree to build from --------------------------------------------------------------


def source_epoch() -> int:
    """SOURCE_DATE_EPOCH if set, else the commit's time: every timestamp in the artefacts."""
    given = os.environ.get("SOURCE_DATE_EPOCH")
    if given:
        if not given.isdigit():
            raise BadInputError(f"SOURCE_DATE_EPOCH {given!r} is not a number of seconds")
        return int(given)
    return int(git("log", "-1", "--format=%ct", "HEAD"))


def check_clean(allow_dirty: bool) -> None:
    changed = git("status", "--porcelain")
    if changed and not allow_dirty:
        first = changed.splitlines()[0].strip()
        raise BadInputError(
            f"the tree has uncommitted changes ({first}, ...): commit them, or pass "
            "--allow-dirty (ALLOW_DIRTY=1) for artefacts that are not the commit's"
        )


def copy_tree(dest: Path) -> None:
    """The files git tracks and the untracked ones it does not ignore, modes normalised (the
    wheel records them): 0755 for executables and directories, 0644 else."""
    listed = run(
        ["git", "-C", REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        what="git ls-files",
    )
    for name in sorted(set(filter(None, listed.split("\0")))):
        source, target = REPO / name, dest / name
        if not source.is_symlink() and not source.is_file():
            continue  # deleted in the work tree
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
            continue
        shutil.copyfile(source, target)
        target.chmod(0o755 if os.access(source, os.X_OK) else 0o644)
    for directory in [dest, *(p for p in dest.rglob("*") if p.is_dir() and not p.is_symlink())]:
        directory.chmod(0o755)


def stamp_version(tree: Path, version: Version) -> None:
    path = tree / VERSION_FILE
    text, count = re.subn(
        r'^__version__ = "[^"]*"$',
        f'__version__ = "{version.python}"',
        path.read_text(),
        flags=re.M,
    )
    if count != 1:
        raise StepError(f'{VERSION_FILE} has no single `__version__ = "..."` line')
    path.write_text(text)
    stamp_npm_packages(tree, version.semver)


# --- reproducible archives ----------------------------------------------------------------


def normalise_tgz(path: Path, epoch: int) -> None:
    """Rewrite a .tar.gz with its members sorted, every time ``epoch``, owner root (0, no
    names), modes 0755/0644, and a gzip header without time or name."""
    with tarfile.open(path, "r:gz") as source:
        members = []
        for member in source.getmembers():
            data = source.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            members.append((member, data))
    members.sort(key=lambda item: item[0].name)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as target:
        for member, data in members:
            member.mtime = epoch
            member.uid = member.gid = 0
            member.uname = member.gname = ""
            member.mode = 0o755 if member.isdir() or member.mode & 0o111 else 0o644
            member.pax_headers = {}
            target.addfile(member, io.BytesIO(data) if data is not None else None)
    with (
        path.open("wb") as out,
        gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=9, mtime=0) as compressed,
    ):
        compressed.write(raw.getvalue())


# --- stages ----------------------------------------------------------------------------------


def release_pins() -> dict[str, str]:
    """The build tools pyproject's `release` group pins: name -> version."""
    groups = tomllib.loads((REPO / "pyproject.toml").read_text())["dependency-groups"]
    pins = {}
    for requirement in groups["release"]:
        name, sep, version = str(requirement).partition("==")
        if sep:
            pins[name.strip().lower()] = version.strip()
    return pins


def check_build_tools() -> None:
    from importlib.metadata import PackageNotFoundError, version

    for name, pinned in release_pins().items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            installed = None
        if installed != pinned:
            raise BadInputError(
                f"{name} {installed or 'is not installed'}"
                f"{'' if installed is None else ' is installed'}, the release builds with "
                f"{name}=={pinned}: pip install --group release (make install does)"
            )


def build_python(tree: Path, out: Path, epoch: int) -> None:
    check_build_tools()
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "PYTHONHASHSEED": "0"}
    for project in (tree, tree / "operator"):
        log(f"building the Python distributions of {project.relative_to(tree) or '.'}")
        # The sdist first, then the wheel from it: a file missing from the sdist fails here.
        run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", out, project],
            env=env,
            what=f"python -m build {project.name}",
        )
    for sdist in out.glob("*.tar.gz"):
        normalise_tgz(sdist, epoch)
    check_wheels(out)


def _wheel(out: Path, distribution: str) -> Path:
    found = sorted(out.glob(f"{distribution}-*.whl"))
    if len(found) != 1:
        raise StepError(f"expected one {distribution} wheel in {out}, found {len(found)}")
    return found[0]


def wheel_metadata(wheel: Path) -> tuple[list[str], str]:
    """A wheel's file names and its METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        return names, archive.read(metadata).decode()


def check_wheels(out: Path, version: Version | None = None) -> None:
    names, metadata = wheel_metadata(_wheel(out, "taskfleet"))
    if any(n.startswith("taskfleet_operator/") for n in names):
        raise StepError("the library's wheel holds taskfleet_operator")
    extras = re.findall(r"^Provides-Extra: (\S+)$", metadata, re.M)
    if sorted(extras) != ["dashboard", "metrics", "opentelemetry"]:
        raise StepError(f"the library's wheel offers the extras {extras}")
    operator_names, operator_metadata = wheel_metadata(_wheel(out, "taskfleet_operator"))
    if any(n.startswith("taskfleet/") for n in operator_names):
        raise StepError("the operator's wheel holds the library")
    library_version = re.search(r"^Version: (\S+)$", metadata, re.M)
    assert library_version is not None
    pin = f"Requires-Dist: taskfleet=={library_version.group(1)}"
    if pin not in operator_metadata.splitlines():
        raise StepError(f"the operator's wheel lacks {pin!r}")
    if version is not None and library_version.group(1) != version.python:
        raise StepError(f"the wheels are of {library_version.group(1)}, not {version.python}")


def build_npm(tree: Path, out: Path, version: Version, epoch: int) -> None:
    """``npm pack`` of clients/node (compiled by its prepack script), then of clients/nestjs
    (compiled against the Node client just built), their dependencies from the lock files
    (npm's cache first: no network when it holds them), as taskfleet-node-VERSION.tgz and
    taskfleet-nestjs-VERSION.tgz."""
    npm = shutil.which("npm")
    if npm is None:
        raise StepError("no npm for the npm stage: install Node.js >= 20.19 and npm")
    env = {
        **os.environ,
        "SOURCE_DATE_EPOCH": str(epoch),
        "npm_config_update_notifier": "false",
        "npm_config_fund": "false",
        "npm_config_audit": "false",
    }
    for relative, archive in zip(NPM_PACKAGES, version.npm_archives, strict=True):
        package = tree / relative
        log(f"packing the npm package of {relative}")
        ci = [npm, "ci", "--prefer-offline", "--loglevel=error"]
        run(ci, cwd=package, env=env, what=f"npm ci {relative}")
        with tempfile.TemporaryDirectory() as scratch:
            run(
                [npm, "pack", "--loglevel=error", "--pack-destination", scratch],
                cwd=package,
                env=env,
                what=f"npm pack {relative}",
            )
            [packed] = Path(scratch).glob("*.tgz")
            normalise_tgz(packed, epoch)
            shutil.move(packed, out / archive)


def npm_package_manifest(archive: Path) -> dict[str, Any]:
    """The package.json of a packed npm package."""
    with tarfile.open(archive) as packed:
        manifest = packed.extractfile("package/package.json")
        if manifest is None:
            raise StepError(f"{archive.name} holds no package/package.json")
        return dict(json.load(manifest))


def build_images(tree: Path, out: Path, version: Version, registry: str) -> None:
    scratch = out / ".images"
    scratch.mkdir()
    run(
        [tree / "e2e/cluster/build-images.sh", "release", version.semver, scratch, registry],
        what="e2e/cluster/build-images.sh release",
    )
    lines = [
        "# image tag digest archive: the digest is the OCI manifest's, which install.yaml pins.",
        "# Load into containerd: ctr -n k8s.io images import --base-name IMAGE --digests ARCHIVE",
        "# (IMAGE:TAG and IMAGE@DIGEST); or push the archive to a registry as IMAGE:TAG.",
    ]
    for name in IMAGES:
        archive = f"taskfleet-{name}-{version.semver}.oci.tar"
        digest = (scratch / f"taskfleet-{name}-{version.semver}.digest").read_text().strip()
        (scratch / archive).rename(out / archive)
        lines.append(f"{registry}/taskfleet-{name} {version.semver} {digest} {archive}")
    shutil.rmtree(scratch)
    (out / "images.txt").write_text("\n".join(lines) + "\n")


def find_helm(tree: Path) -> str:
    """$HELM; else the pinned helm (e2e/cluster/build-helm.sh builds it once); else PATH's."""
    if not (tree / CHART / "Chart.yaml").exists():
        raise StepError(f"no chart at {CHART}/Chart.yaml")
    if os.environ.get("HELM"):
        return os.environ["HELM"]
    builder = tree / "e2e/cluster/build-helm.sh"
    if builder.exists():
        return run([builder], what="e2e/cluster/build-helm.sh").strip().splitlines()[-1]
    found = shutil.which("helm")
    if found is None:
        raise StepError("no helm: set HELM=/path/to/helm, or add e2e/cluster/build-helm.sh")
    return found


def package_chart(tree: Path, out: Path, version: Version, epoch: int, helm: str) -> None:
    chart = tree / CHART
    log(f"packaging {CHART} with {helm}")
    with tempfile.TemporaryDirectory() as scratch:
        run(
            [
                helm,
                "package",
                chart,
                "--version",
                version.semver,
                "--app-version",
                version.semver,
                "--destination",
                scratch,
            ],
            what="helm package",
        )
        [packaged] = Path(scratch).glob("*.tgz")
        # helm stamps every member with the time of packaging: the commit's instead.
        normalise_tgz(packaged, epoch)
        shutil.move(packaged, out / packaged.name)


def find_kubectl(tree: Path) -> str:
    """The pinned kubectl (e2e/cluster/build-k8s.sh builds it), else PATH's."""
    pinned = cache_dir() / "k8s" / versions_env(tree)["K8S_VERSION"] / "bin/kubectl"
    if pinned.exists():
        return str(pinned)
    found = shutil.which("kubectl")
    if found is None:
        raise StepError("no kubectl for kustomize: make k8s-bins builds the pinned one")
    return found


def render_install(tree: Path, out: Path, version: Version, kubectl: str) -> None:
    images = read_images(out / "images.txt")
    operator = images["operator"]
    directory = tree / INSTALL_KUSTOMIZATION
    kustomization = directory / "kustomization.yaml"
    text = kustomization.read_text()
    pinned = (
        f"images:\n  - name: {OPERATOR_IMAGE}\n    newName: {operator.name}\n"
        f'    newTag: "{operator.tag}"\n    digest: {operator.digest}\n'
        f'labels:\n  - pairs:\n      app.kubernetes.io/version: "{version.semver}"\n'
    )
    if "\nimages:" in text:
        raise StepError(f"{kustomization} names images itself: the release pins them")
    kustomization.write_text(text.rstrip("\n") + "\n" + pinned)
    rendered = run(
        [kubectl, "kustomize", "--load-restrictor", "LoadRestrictionsNone", directory],
        what="kubectl kustomize",
    )
    header = (
        f"# taskfleet {version.semver}: the TaskQueue CRD, kopf's peering CRD, the RBAC and the\n"
        f"# operator in taskfleet-system, its image pinned by digest. No Redis: bring your own\n"
        f"# (docs/redis.md). kubectl apply --server-side -f install.yaml\n"
    )
    (out / "install.yaml").write_text(header + rendered)
    expected = f"image: {operator.name}:{operator.tag}@{operator.digest}"
    if expected not in rendered:
        raise StepError(f"install.yaml does not pin the operator ({expected})")


@dataclass(frozen=True)
class Image:
    name: str
    tag: str
    digest: str
    archive: str


def read_images(path: Path) -> dict[str, Image]:
    """images.txt by short name (operator, worker, worker-node)."""
    if not path.exists():
        raise BadInputError(
            "install.yaml pins the operator's image by digest: it needs the images stage"
        )
    images = {}
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, tag, digest, archive = line.split()
        images[name.rsplit("/", 1)[-1].removeprefix("taskfleet-")] = Image(
            name, tag, digest, archive
        )
    return images


def write_sums(out: Path) -> None:
    lines = [
        f"{sha256(path)}  {path.name}"
        for path in sorted(out.iterdir())
        if path.is_file() and path.name != "SHA256SUMS"
    ]
    (out / "SHA256SUMS").write_text("\n".join(lines) + "\n")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --- build ----------------------------------------------------------------------------------


def build(
    version: Version, out: Path, stages: Sequence[str], registry: str, allow_dirty: bool
) -> None:
    check_clean(allow_dirty)
    epoch = source_epoch()
    commit = git("rev-parse", "HEAD")
    if out.exists() and any(out.iterdir()) and out.resolve() != (REPO / "dist").resolve():
        raise BadInputError(f"{out} is not empty: the release writes into an empty directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="taskfleet-release-") as scratch:
        tree, staged = Path(scratch) / "tree", Path(scratch) / "dist"
        tree.mkdir()
        staged.mkdir()
        copy_tree(tree)
        disagreeing = version_disagreements(tree)
        if disagreeing:
            raise BadInputError(f"the tree's versions disagree: {'; '.join(disagreeing)}")
        stamp_version(tree, version)
        # Every tool a stage needs is found before the first build, not after minutes.
        helm = find_helm(tree) if "chart" in stages else ""
        kubectl = find_kubectl(tree) if "install" in stages else ""
        if "images" in stages and os.geteuid() != 0:
            raise BadInputError("the images stage runs as root (buildah): sudo, or --only")
        log(f"taskfleet {version.semver} from {commit[:12]} (SOURCE_DATE_EPOCH={epoch})")
        if "python" in stages:
            build_python(tree, staged, epoch)
        if "npm" in stages:
            build_npm(tree, staged, version, epoch)
        if "images" in stages:
            build_images(tree, staged, version, registry)
        if "chart" in stages:
            package_chart(tree, staged, version, epoch, helm)
        if "install" in stages:
            render_install(tree, staged, version, kubectl)
        write_sums(staged)
        # Only a finished release replaces the previous one.
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(staged, out)
    for line in (out / "SHA256SUMS").read_text().splitlines():
        log(f"wrote {out.name}/{line.split()[1]}")
