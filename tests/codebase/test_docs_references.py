"""Every file path, Lua file, make target, CRD field and link the docs name exists.

A reference is recognised by its shape, so prose is never guessed at:

- a path: a backticked word with a slash or a known file extension (``protocol/keys.py``,
  ``models.py``). It must be a file or folder of the repository, from its root, from the
  document's folder, or as the tail of a tracked path (``protocol/wire.py``). A word with a
  slash whose first part names nothing of the repository (``apps/v1``) is not a path;
- a Lua file: ``name.lua`` anywhere, in the docs and in the sources' comments;
- a make target: ``make X`` in a code span or a code block;
- a CRD field: ``spec.x.y`` in a code span, a path of the TaskQueue CRD's spec (crds/);
- a link: ``[text](target#anchor)`` to a file of the repository, and the anchor to one of
  its headings.

The history in bench/journal/ is not checked: it says what was true on its date.

And each make target the docs name works from a fresh clone on its own: its dry run
(`make -n`) in a clean `git clone` installs what it then runs (the project's venv before
`.venv/bin/...`, the dev tools before pytest, ruff or mypy), and every script it runs is
there and executable. The dry run shows the dependency chain without running it.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

#: File endings that make a backticked word a path even without a slash.
EXTENSIONS = (
    *(".py", ".lua", ".md", ".sh", ".yaml", ".yml", ".json", ".toml", ".ts", ".mjs"),
    *(".env", ".txt", ".c", ".go", ".cfg", ".lock", ".png", ".html", ".css", ".mod", ".sum"),
)

#: Backticked words of path shape that are no file of this repository: a user's own
#: files in examples, what a release or a run writes (dist/, the runtime directory).
NOT_OURS = {
    "myapp.py",
    "tasks.py",
    "app.py",
    "redis.py",
    "a.png",
    "flow.json",
    "my-taskqueue.yaml",
    "../lib/x.mjs",
    "install.yaml",
    "images.txt",
    "worker.json",
}
#: Folders a run makes, never tracked.
MADE_BY_RUNS = ("bench/.peers", "dist/", ".venv/")

CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
PATH_WORD = re.compile(r"^(?:\.{1,2}/)*[A-Za-z0-9_.@+-]+(?:/[A-Za-z0-9_.@+-]+)*/?$")
LUA_FILE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.lua)\b")
MAKE = re.compile(r"(?<![\w-])make((?:[ \t]+[^\s#`]+)+)")
TARGET_WORD = re.compile(r"^[a-z][a-z0-9-]*$")
SPEC = re.compile(r"(?<![\w.])spec((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]\n]*\]\(([^)\s]+)\)")


def checked_docs(root: Path = REPO) -> list[Path]:
    named = [root / "README.md", root / "DESIGN.md", root / "CONTRIBUTING.md"]
    named += sorted((root / "docs").glob("*.md"))
    named.append(root / "bench" / "README.md")
    return named


@cache
def tracked(root: Path = REPO) -> tuple[frozenset[str], frozenset[str]]:
    """The repository's files and folders, as git knows them."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    files = frozenset(p for p in out.split("\0") if p and (root / p).exists())
    folders = {str(Path(f).parent) for f in files}
    for leaf in list(folders):
        folders.update(str(p) for p in Path(leaf).parents if str(p) != ".")
    return files, frozenset(folders)


@cache
def make_targets(root: Path = REPO) -> frozenset[str]:
    text = (root / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)\s*:(?!=)", text, re.M))
    for phony in re.findall(r"^\.PHONY:((?:.*\\\n)*.*)", text, re.M):
        targets.update(phony.replace("\\\n", " ").split())
    return frozenset(targets)


@cache
def crd_spec_paths(root: Path = REPO) -> tuple[frozenset[str], frozenset[str]]:
    """The TaskQueue and ProviderQuota CRDs' spec paths, and those below which anything goes."""
    paths: set[str] = set()
    open_ended: set[str] = set()

    def walk(schema: dict[str, object], path: str) -> None:
        paths.add(path)
        if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("additionalProperties"):
            open_ended.add(path)
        items = schema.get("items")
        if isinstance(items, dict):
            walk(items, path)
        properties = schema.get("properties")
        if isinstance(properties, dict):
            for name, sub in properties.items():
                walk(sub, f"{path}.{name}")

    for crd_file in sorted((root / "crds").glob("*.yaml")):
        crd = yaml.safe_load(crd_file.read_text())
        if crd.get("spec", {}).get("names", {}).get("kind") not in ("TaskQueue", "ProviderQuota"):
            continue
        for version in crd["spec"]["versions"]:
            walk(version["schema"]["openAPIV3Schema"]["properties"]["spec"], "spec")
    return frozenset(paths), frozenset(open_ended)


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub makes it."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip()).lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    text = FENCE.sub("", path.read_text())
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    found.update(re.findall(r"<a (?:name|id)=\"([^\"]+)\"", text))
    return found


def code_spans_and_blocks(text: str) -> Iterator[str]:
    for block in FENCE.finditer(text):
        yield block.group(0)
    yield from CODE_SPAN.findall(FENCE.sub("", text))


def path_exists(word: str, doc: Path, root: Path) -> bool:
    files, folders = tracked(root)
    word = word.rstrip("/")
    rel_doc = doc.parent
    for base in (root, rel_doc):
        candidate = (base / word).resolve()
        try:
            rel = str(candidate.relative_to(root))
        except ValueError:
            continue
        if rel in files or rel in folders or rel == ".":
            return True
    tail = "/" + word.lstrip("./")
    return any(f.endswith(tail) for f in files) or any(d.endswith(tail) for d in folders)


def is_path_word(word: str, root: Path) -> bool:
    if not PATH_WORD.match(word) or word.startswith(("-", "spec.", "template.")) or "//" in word:
        return False
    if word in NOT_OURS or word.startswith(MADE_BY_RUNS):
        return False
    if "/" not in word:
        return word.endswith(EXTENSIONS)
    if word.endswith(EXTENSIONS):
        return True
    first = word.lstrip("./").split("/", 1)[0]
    files, folders = tracked(root)
    return first in folders or first in files


def problems(doc: Path, root: Path = REPO) -> list[str]:
    """What `doc` names that the repository lacks, one line each."""
    text = doc.read_text()
    where = doc.name if not doc.is_relative_to(root) else str(doc.relative_to(root))
    found: list[str] = []
    spans = list(code_spans_and_blocks(text))

    words = {w.strip("'\"(),;:").rstrip(".") for s in spans for w in s.split()}
    for word in sorted(w for w in words if w and not w.endswith(".lua")):
        if is_path_word(word, root) and not path_exists(word, doc, root):
            found.append(f"{where}: `{word}` is no file or folder of the repository")

    for lua in sorted(set(lua_files(text))):
        if not path_exists(lua, doc, root):
            found.append(f"{where}: Lua file `{lua}` does not exist")

    targets = make_targets(root)
    for span in spans:
        for target in sorted(named_targets(span)):
            if target not in targets:
                found.append(f"{where}: `make {target}`: no such target in the Makefile")

    paths, open_ended = crd_spec_paths(root)
    for span in CODE_SPAN.findall(FENCE.sub("", text)):
        for match in SPEC.finditer(span):
            field = "spec" + match.group(1)
            if field not in paths and not any(field.startswith(o + ".") for o in open_ended):
                found.append(f"{where}: `{field}` is no field of the TaskQueue CRD")

    for match in LINK.finditer(FENCE.sub("", text)):
        target = match.group(1) or match.group(2)
        if re.match(r"^[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (doc.parent / file_part).resolve() if file_part else doc
        if file_part and not linked.exists():
            found.append(f"{where}: link to `{target}`: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            found.append(f"{where}: link to `{target}`: no such heading")
    return sorted(set(found))


def lua_files(text: str) -> Iterable[str]:
    return LUA_FILE.findall(text)


def named_targets(span: str) -> Iterator[str]:
    for full_line in span.splitlines():
        # A code block's comment is prose ("not part of make check or CI").
        line = full_line.split(" #", 1)[0] if "\n" in span else full_line
        for match in MAKE.finditer(line):
            for word in match.group(1).split():
                if "=" in word or word.startswith("-"):
                    continue
                if not TARGET_WORD.match(word):
                    break
                yield word


@pytest.mark.parametrize("doc", checked_docs(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_target_field_and_link_a_doc_names_exists(doc: Path) -> None:
    assert problems(doc) == []


def test_every_lua_file_named_in_the_product_sources_exists() -> None:
    files, _ = tracked()
    # The tests make Lua files of their own; the bundle is generated from lua/.
    sources = [
        f
        for f in files
        if f.endswith((".py", ".ts", ".lua", ".sh", ".mjs"))
        and not f.startswith(("worker-image/taskfleet/protocol/bundle/", "tests/"))
    ]
    missing = []
    for source in sources:
        for lua in set(lua_files((REPO / source).read_text(errors="replace"))):
            if "<" not in lua and not path_exists(lua, REPO / source, REPO):
                missing.append(f"{source}: {lua}")
    assert missing == []


def test_a_doc_naming_an_invented_path_target_field_or_heading_fails_the_check(
    tmp_path: Path,
) -> None:
    doc = tmp_path / "invented.md"
    doc.write_text(
        "The worker (`worker-image/taskfleet/worker/nothing_here.py`) runs\n"
        "`lua/includes/invented_helper.lua`; see `make no-such-target` and\n"
        "`spec.heartbeat.everySeconds`, or [the protocol](../nowhere.md) and\n"
        f"[its keys]({REPO}/docs/protocol.md#no-such-heading).\n"
        "\n```sh\nmake bench-nothing PEERS=1\n```\n"
    )
    assert problems(doc) == [
        "invented.md: Lua file `lua/includes/invented_helper.lua` does not exist",
        "invented.md: `make bench-nothing`: no such target in the Makefile",
        "invented.md: `make no-such-target`: no such target in the Makefile",
        "invented.md: `spec.heartbeat.everySeconds` is no field of the TaskQueue CRD",
        "invented.md: `worker-image/taskfleet/worker/nothing_here.py` is no file or folder"
        " of the repository",
        "invented.md: link to `../nowhere.md`: no such file",
        f"invented.md: link to `{REPO}/docs/protocol.md#no-such-heading`: no such heading",
    ]


def test_a_doc_naming_only_what_exists_passes_the_check(tmp_path: Path) -> None:
    doc = tmp_path / "real.md"
    doc.write_text(
        "The keys (`protocol/keys.py`, `worker-image/taskfleet/protocol/lua/claim.lua`),\n"
        "`make bundle-check`, `make install local-demo`, `spec.heartbeat.ttlSeconds`,\n"
        f"[the protocol]({REPO}/docs/protocol.md#3-keys). Not paths: `apps/v1`, `myapp.py`.\n"
    )
    assert problems(doc) == []


#: What only the dev group installs, named by a command line or by a script it runs.
DEV_TOOLS = re.compile(r"\b(?:pytest|ruff|mypy)\b")
#: A command line or a script that runs something of the project's venv.
USES_VENV = re.compile(r"\.venv/bin|\bVENV\b")


def documented_targets(root: Path = REPO) -> list[str]:
    targets: set[str] = set()
    for doc in checked_docs(root):
        for span in code_spans_and_blocks(doc.read_text()):
            targets.update(named_targets(span))
    return sorted(targets & make_targets(root))


def dry_run_problems(clone: Path, target: str) -> list[str]:
    """What `make -n target` in `clone` runs before installing it, one line each."""
    run = subprocess.run(
        ["make", "-n", "--no-print-directory", target],
        cwd=clone,
        capture_output=True,
        text=True,
        env={**os.environ, "MAKEFLAGS": "", "MAKELEVEL": ""},
        check=False,
    )
    if run.returncode != 0:
        return [f"make -n {target}: {run.stderr.strip().splitlines()[-1:]}"]
    found: list[str] = []
    venv = dev = False
    for line in run.stdout.splitlines():
        venv = venv or ("-m venv" in line and ".venv" in line)
        dev = dev or ("pip install" in line and "--group dev" in line)
        scripts = [
            clone / word
            for word in re.findall(r"(?<![\w./-])((?:[\w.-]+/)+[\w.-]+)", line)
            if (clone / word).is_file() and not word.startswith(".venv/")
        ]
        for script in scripts:
            if line.lstrip().startswith(str(script.relative_to(clone))) and not os.access(
                script, os.X_OK
            ):
                found.append(f"make {target}: {script.relative_to(clone)} is not executable")
        texts = [line, *(s.read_text(errors="replace") for s in scripts)]
        if any(USES_VENV.search(t) for t in texts) and not venv:
            found.append(f"make {target} runs `{line.strip()[:80]}` before making .venv")
        if any(DEV_TOOLS.search(t) for t in texts) and not dev:
            found.append(f"make {target} runs `{line.strip()[:80]}` before the dev tools")
    return found


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    clone = tmp_path_factory.mktemp("clone") / "taskfleet"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], check=True)
    return clone


def test_the_docs_name_the_make_targets_a_reader_runs_first() -> None:
    assert {"install", "test", "check", "demo-local", "e2e-release", "bench"} <= set(
        documented_targets()
    )


@pytest.mark.parametrize("target", documented_targets())
def test_every_make_target_the_docs_name_installs_what_it_runs_from_a_fresh_clone(
    fresh_clone: Path, target: str
) -> None:
    assert not (fresh_clone / ".venv").exists()
    assert dry_run_problems(fresh_clone, target) == []


def test_a_target_running_pytest_without_the_dev_tools_fails_the_check(
    fresh_clone: Path, tmp_path: Path
) -> None:
    clone = tmp_path / "taskfleet"
    subprocess.run(["git", "clone", "--quiet", str(fresh_clone), str(clone)], check=True)
    makefile = clone / "Makefile"
    makefile.write_text(
        makefile.read_text()
        + "\nonly-venv: $(BIN)/python\n\t$(BIN)/python -m pytest tests\n"
        + "\nno-venv:\n\te2e/run-local.sh\n"
    )
    assert dry_run_problems(clone, "only-venv") == [
        "make only-venv runs `.venv/bin/python -m pytest tests` before the dev tools"
    ]
    assert dry_run_problems(clone, "no-venv") == [
        "make no-venv runs `e2e/run-local.sh` before making .venv",
        "make no-venv runs `e2e/run-local.sh` before the dev tools",
    ]


def test_every_journal_entry_is_in_the_journal_index() -> None:
    journal = REPO / "bench" / "journal"
    index = (journal / "README.md").read_text()
    entries = sorted(p.name for p in journal.glob("*.md") if p.name != "README.md")
    missing = [name for name in entries if f"]({name})" not in index]
    assert entries, "no journal entries found"
    assert not missing, f"bench/journal/README.md does not list: {missing}"
