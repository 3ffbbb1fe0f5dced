"""``release.py verify``: what is wrong with a release's directory, checked without root,
buildah or a registry: the checksums, the images' digests against their archives, the pins of
install.yaml, the wheels' metadata, the npm packages' and the chart's version; with
``rebuild``, the Python distributions, the npm packages and the chart built again and compared
byte for byte.
"""

from __future__ import annotations

import json
import re
import tarfile
import tempfile
from pathlib import Path

from stages import (
    IMAGES,
    StepError,
    Version,
    build,
    check_wheels,
    npm_package_manifest,
    peer_range,
    read_images,
    sha256,
)


def verify(version: Version, dist: Path, rebuild: bool, allow_dirty: bool) -> list[str]:
    """What is wrong with a release in ``dist`` (nothing: an empty list)."""
    problems = []
    sums = dist / "SHA256SUMS"
    if not sums.exists():
        return [f"{dist} holds no SHA256SUMS"]
    listed = {}
    for line in sums.read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name.strip()] = digest
    present = {p.name for p in dist.iterdir() if p.is_file() and p.name != "SHA256SUMS"}
    problems += [f"{name} is not in SHA256SUMS" for name in sorted(present - set(listed))]
    problems += [f"{name} is missing" for name in sorted(set(listed) - present)]
    problems += [
        f"{name}: its sha256 differs from SHA256SUMS"
        for name in sorted(present & set(listed))
        if sha256(dist / name) != listed[name]
    ]
    if any(dist.glob("*.whl")):
        try:
            check_wheels(dist, version)
        except StepError as failed:
            problems.append(str(failed))
    if (dist / "images.txt").exists():
        problems += _verify_images(dist, version)
    problems += _verify_npm(dist, version)
    chart = dist / f"taskfleet-{version.semver}.tgz"
    if chart.exists():
        problems += _verify_chart(chart, version)
    if rebuild:
        problems += _verify_rebuild(version, dist, allow_dirty)
    return problems


def _verify_images(dist: Path, version: Version) -> list[str]:
    problems = []
    images = read_images(dist / "images.txt")
    missing = [name for name in IMAGES if name not in images]
    if missing:
        problems.append(f"images.txt lists no image of {', '.join(missing)}")
    for image in images.values():
        with tarfile.open(dist / image.archive) as archive:
            index = json.load(archive.extractfile("index.json"))  # type: ignore[arg-type]
        [manifest] = index["manifests"]
        ref = manifest.get("annotations", {}).get("org.opencontainers.image.ref.name")
        if manifest["digest"] != image.digest or ref != version.semver:
            problems.append(
                f"{image.archive} holds {manifest['digest']} as {ref!r}, images.txt says "
                f"{image.digest} as {version.semver!r}"
            )
    install = dist / "install.yaml"
    if install.exists():
        operator = images["operator"]
        wanted = f"{operator.name}:{operator.tag}@{operator.digest}"
        named = set(re.findall(r"^\s*image: (\S+)$", install.read_text(), re.M))
        if named != {wanted}:
            problems.append(f"install.yaml names the images {sorted(named)}, not {wanted}")
    return problems


def _verify_npm(dist: Path, version: Version) -> list[str]:
    """The npm packages' versions; the NestJS module's peer range on the Node client."""
    problems = []
    for archive in version.npm_archives:
        if not (dist / archive).exists():
            continue
        manifest = npm_package_manifest(dist / archive)
        if (found := str(manifest.get("version"))) != version.semver:
            problems.append(f"{archive}: package.json says {found}, not {version.semver}")
        peer = manifest.get("peerDependencies", {}).get("taskfleet")
        if archive == version.nestjs_archive and peer != peer_range(version.semver):
            problems.append(
                f"{archive}: asks for taskfleet {peer} as a peer, not {peer_range(version.semver)}"
            )
    present = [a for a in version.npm_archives if (dist / a).exists()]
    if len(present) == 1:
        problems.append(f"{present[0]} is there without its companion: the npm stage packs both")
    return problems


def _verify_chart(chart: Path, version: Version) -> list[str]:
    with tarfile.open(chart) as archive:
        text = archive.extractfile("taskfleet/Chart.yaml").read().decode()  # type: ignore[union-attr]
    found = dict(re.findall(r"^(version|appVersion): \"?([^\"\n]+)\"?$", text, re.M))
    wanted = {"version": version.semver, "appVersion": version.semver}
    return [] if found == wanted else [f"{chart.name}: Chart.yaml says {found}, not {wanted}"]


def _verify_rebuild(version: Version, dist: Path, allow_dirty: bool) -> list[str]:
    stages = ["python"] if any(dist.glob("*.whl")) else []
    stages += ["npm"] if any((dist / a).exists() for a in version.npm_archives) else []
    stages += ["chart"] if (dist / f"taskfleet-{version.semver}.tgz").exists() else []
    with tempfile.TemporaryDirectory(prefix="taskfleet-rebuild-") as scratch:
        again = Path(scratch) / "rebuild"
        build(version, again, stages, "localhost", allow_dirty)
        return [
            f"{path.name} differs when built again"
            for path in sorted(again.iterdir())
            if path.name != "SHA256SUMS"
            and (
                not (dist / path.name).exists()
                or (dist / path.name).read_bytes() != path.read_bytes()
            )
        ]
