"""``python -m taskfleet.protocol.bundle --write | --check``: build the bundle from ``lua/``.

``--write`` writes each script's assembled text and manifest.json here, and the reference
page docs/protocol-scripts.md (in a source tree); ``--check`` builds the same in memory
and fails, naming each file, when a committed one differs (``make bundle-check``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from taskfleet.protocol.bundle import defaults_gen
from taskfleet.protocol.bundle.build import BuildError, build
from taskfleet.protocol.bundle.reference import reference
from taskfleet.protocol.bundle.typescript import typescript

HERE = Path(__file__).resolve().parent
#: The source tree's docs/, when this runs from one (worker-image/taskfleet/protocol/bundle).
DOCS = HERE.parents[3] / "docs"


def expected(bundle_dir: Path = HERE, docs: Path | None = DOCS) -> dict[Path, str]:
    """Every generated file and its text."""
    bundle = build()
    out = {bundle_dir / name: text for name, text in bundle.files.items()}
    out[bundle_dir / "manifest.json"] = bundle.manifest_text()
    if docs is not None and docs.is_dir():
        out[docs / "protocol-scripts.md"] = reference(bundle.manifest)
        out.update(typescript(bundle.manifest))  # the Node client's src/protocol/
    out.update(defaults_gen.generated())
    return out


def stale(files: dict[Path, str], bundle_dir: Path = HERE) -> list[str]:
    """What differs from ``files`` on disk: changed, missing, or a .lua nothing makes."""
    problems = []
    for path, text in files.items():
        if not path.exists():
            problems.append(f"{path.name}: missing")
        elif path.read_bytes() != text.encode():
            problems.append(f"{path.name}: differs from what lua/ and signatures.py build")
    for path in sorted(bundle_dir.glob("*.lua")):
        if path not in files:
            problems.append(f"{path.name}: no script makes it")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m taskfleet.protocol.bundle")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write the bundle and its reference")
    mode.add_argument("--check", action="store_true", help="fail if they drifted from lua/")
    args = parser.parse_args(argv)
    try:
        files = expected()
    except (BuildError, defaults_gen.TableError) as e:
        print(f"bundle: error: {e}", file=sys.stderr)
        return 2
    if args.write:
        for path in sorted(HERE.glob("*.lua")):
            if path not in files:
                path.unlink()
        for path, text in files.items():
            if not path.exists() or path.read_bytes() != text.encode():
                path.write_bytes(text.encode())
                print(f"wrote {path}")
        return 0
    problems = stale(files) + defaults_gen.literal_defaults()
    for problem in problems:
        print(f"bundle: drift: {problem}", file=sys.stderr)
    if problems:
        print("bundle: run `make bundle` and commit the result", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
