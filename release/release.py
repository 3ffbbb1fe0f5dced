"""``make release VERSION=x.y.z``: every artefact of a release in dist/, built from one commit.

    release.py build VERSION [--out DIR] [--only STAGE,...] [--registry REGISTRY] [--allow-dirty]
    release.py verify VERSION [--dist DIR] [--rebuild] [--allow-dirty]

``build`` writes, into an empty ``--out`` (``dist/`` by default, emptied first):

- ``python``: the library's wheel and sdist (``taskfleet``) and the operator's
  (``taskfleet-operator``, requiring ``taskfleet==VERSION``);
- ``npm``: the Node.js package and the NestJS module as ``npm pack`` makes them,
  ``taskfleet-node-VERSION.tgz`` and ``taskfleet-nestjs-VERSION.tgz`` (their dependencies from
  the lock files, npm's cache first); ``npm publish`` of each is the step that makes them public;
- ``images``: the operator, worker and Node.js worker images as OCI archives
  (``e2e/cluster/build-images.sh release``), and ``images.txt``: image, tag, manifest
  digest, archive, one line each;
- ``chart``: ``helm package charts/taskfleet --version VERSION --app-version VERSION``;
- ``install``: ``install.yaml``, the CRDs, the RBAC and the operator rendered by kustomize from
  manifests/ (release/install/kustomization.yaml), the operator's image pinned by digest (so it
  needs the ``images`` stage);
- and always ``SHA256SUMS`` over every file written (``sha256sum -c SHA256SUMS``).

The version is written in one place, ``worker-image/taskfleet/_version.py``; the package.json
and lock file of clients/node and clients/nestjs spell the same one for npm (``X.Y.Z-dev.N``),
and the NestJS module's peer range on ``taskfleet`` is ``^`` it. The release copies the tree's
files (those git tracks, and untracked ones it does not ignore) to a scratch directory,
writes VERSION there (into all five), and builds from that copy: no tracked file changes.
The copy of a tree with uncommitted changes is not the commit's, so ``build`` refuses one
unless ``--allow-dirty``. Reproducible: SOURCE_DATE_EPOCH is the commit's time (unless set), files
are copied with normalised modes, the build tools are pinned (pyproject's ``release`` group),
and the tarballs (sdists, chart) are rewritten with sorted members, fixed times and owners:
two builds of one commit give the same wheel, sdist and chart bytes. Images are not
byte-reproducible (their base and dependencies come from outside); ``images.txt`` pins
what was built.

``verify`` checks a dist/ (the checksums, the images' digests against their archives, the
pins of install.yaml, the wheels' metadata, the npm packages' versions and the NestJS module's
peer range, the chart's version); with ``--rebuild`` it builds the Python distributions, the
npm packages and the chart again and compares their bytes.

Bad input (VERSION, options) ends with one ``release: error: ...`` line and exit code 2; a
failed step with its output and exit code 1.

This file is the command line; stages.py builds the artefacts, verification.py checks them.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from stages import REPO, STAGES, BadInputError, StepError, Version, build, log
from verification import verify

#: A registry host (with an optional port) and path: what an image name may start with.
_REGISTRY = re.compile(r"[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadInputError(message)


def parse_stages(text: str) -> list[str]:
    stages = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown or not stages:
        raise BadInputError(f"--only takes stages among {', '.join(STAGES)}: got {text!r}")
    if "install" in stages and "images" not in stages:
        raise BadInputError(
            "install.yaml pins the operator's image by digest: --only install needs images"
        )
    return [s for s in STAGES if s in stages]


def main(argv: Iterable[str] | None = None) -> int:
    parser = _Parser(prog="release.py", description=__doc__.split("\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    making = commands.add_parser("build", help="write a release's artefacts")
    making.add_argument("version")
    making.add_argument("--out", type=Path, default=REPO / "dist")
    making.add_argument("--only", type=str, default=",".join(STAGES))
    making.add_argument("--registry", default=os.environ.get("REGISTRY") or "localhost")
    making.add_argument("--allow-dirty", action="store_true")
    checking = commands.add_parser("verify", help="check a release's artefacts")
    checking.add_argument("version")
    checking.add_argument("--dist", type=Path, default=REPO / "dist")
    checking.add_argument("--rebuild", action="store_true")
    checking.add_argument("--allow-dirty", action="store_true")
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
        version = Version.parse(args.version)
        if args.command == "build":
            if not _REGISTRY.fullmatch(args.registry):
                raise BadInputError(f"--registry {args.registry!r} is not a registry and path")
            build(version, args.out, parse_stages(args.only), args.registry, args.allow_dirty)
            return 0
        problems = verify(version, args.dist, args.rebuild, args.allow_dirty)
    except BadInputError as bad:
        print(f"release: error: {bad}", file=sys.stderr)
        return 2
    except StepError as failed:
        print(f"release: error: {failed}", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"release: {problem}", file=sys.stderr)
    if not problems:
        log(f"{args.dist.name}/ is taskfleet {version.semver}: every check passed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
