"""Checks on the documentation, so that it stays usable as the code moves.

* No doc under docs/ grows past what one reader can take in (issue 51: about 500
  lines; the check allows 550).
* Every relative link in docs/, README.md and benchmarks/*.md names a file that
  exists and, for a Markdown file, a heading that exists (anchors as GitHub makes
  them); every doc path a source file cites exists, with the heading it names.
* Every command-line flag a program of cmd/ declares is mentioned (as --name) in that
  program's user guides (PROGRAM_GUIDES), and every MC_* / MOONCAKE_* environment
  variable the code names is mentioned in a user guide (docs/*.md), save the variables
  only tests read, named in TEST_ONLY_VARIABLES.

Pure text checks: nothing here imports `mooncake` or builds anything.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
MAX_DOC_LINES = 550

# Variables read only by tests, test harnesses and the consistency checker's
# workers, never by what a user runs.
TEST_ONLY_VARIABLES = {
    "MC_BENCH_MASTER",  # kvstore/client/latency_test.go
    "MC_BENCH_METADATA",  # kvstore/client/latency_test.go
    "MC_CONSISTENCY_KEYS",  # kvstore/consistency: the workers a test starts
    "MC_CONSISTENCY_MASTER",
    "MC_CONSISTENCY_METADATA",
    "MC_CONSISTENCY_OPS",
    "MC_CONSISTENCY_SEED",
    "MC_CONSISTENCY_SEGMENT_MIB",
    "MC_CONSISTENCY_WORKER",
    "MOONCAKE_CONSISTENCY_ROLE",
    "MC_LOG",  # tests/te_peer.py
    "MC_PG_HARNESS_DIR",  # tests/pg_harness.py
    "MC_SOMETHING_ELSE_ENTIRELY",  # internal/envvars/envvars_test.go: an unknown name
    "MC_TEST_PEER_ADDR",  # kvstore/standalone tests
    "MC_TEST_PEER_KEY",
    "MC_TEST_SQUAT_SOCKET",
    "MOONCAKE_ETCD",  # tests/conftest.py: an etcd to use instead of starting one
    "MOONCAKE_TEST_RUN_MASTER_MAIN",  # cmd/*/main_test.go: re-executed test binaries
    "MOONCAKE_TEST_RUN_METADATA_SERVER_MAIN",
    "MOONCAKE_TEST_RUN_MOONCAKE_MAIN",
    "MOONCAKE_TEST_RUN_STORAGE_CLIENT",
    "MOONCAKE_TEST_RUN_TE_BENCH_MAIN",
    "MOONCAKE_TEST_STORAGE_ARGS",
    "MOONCAKE_TEST_TRANSFER_PEER",
}

SOURCE_SUFFIXES = {".go", ".py", ".sh", ".cpp", ".cc", ".h"}
SKIPPED_DIRS = {".git", ".venv", "build", "dist", "node_modules", "bench-out", "__pycache__"}


def _files(suffixes: set[str]) -> list[Path]:
    out = []
    for path in REPO.rglob("*"):
        rel = path.relative_to(REPO)
        if any(part in SKIPPED_DIRS or part.startswith(".") for part in rel.parts[:-1]):
            continue
        if path.is_file() and (path.suffix in suffixes or path.name in suffixes):
            out.append(path)
    return sorted(out)


def _doc_files() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def user_guides() -> list[Path]:
    """The user guides: docs/*.md (design notes live in docs/design/)."""
    return sorted(DOCS.glob("*.md"))


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """Lines outside fenced code blocks, with their numbers."""
    out, fence = [], None
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.lstrip()
        m = re.match(r"(```+|~~~+)", stripped)
        if m:
            if fence is None:
                fence = m.group(1)[0] * 3
            elif stripped.startswith(fence):
                fence = None
            continue
        if fence is None:
            out.append((number, line))
    return out


def heading_slug(heading: str) -> str:
    """The anchor GitHub gives a heading's text (before de-duplication)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a Markdown file: its headings' slugs, numbered as GitHub
    numbers repeats, and explicit <a id/name> targets."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose_lines(path.read_text()):
        m = re.match(r"\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = heading_slug(m.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
        for a in re.finditer(r"<a\s+(?:id|name)=\"([^\"]+)\"", line):
            out.add(a.group(1))
    return out


def headings(path: Path) -> list[str]:
    """Heading texts and bold paragraph leads (`**Fencing.**`) of a Markdown file,
    lower case, without code marks: what a source comment may cite by name."""
    out = []
    for _, line in _prose_lines(path.read_text()):
        m = re.match(r"\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line) or re.match(r"\*\*([^*]+)\*\*", line)
        if m:
            out.append(m.group(1).replace("`", "").lower())
    return out


LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _links(path: Path) -> list[tuple[int, str]]:
    out = []
    for number, line in _prose_lines(path.read_text()):
        line = re.sub(r"`[^`]*`", "", line)
        out.extend((number, m.group(1)) for m in LINK.finditer(line))
    return out


def _link_problems(path: Path) -> list[str]:
    problems = []
    for number, target in _links(path):
        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
            continue  # a URL
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(REPO)}:{number}: {target}"
        if not dest.exists():
            problems.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(
                f"{where}: no heading with anchor #{anchor} in {dest.relative_to(REPO)}"
            )
    return problems


def test_no_doc_is_longer_than_a_reader_can_take_in():
    long = {
        str(p.relative_to(REPO)): n
        for p in _doc_files()
        if (n := len(p.read_text().splitlines())) > MAX_DOC_LINES
    }
    assert not long, f"split these docs (over {MAX_DOC_LINES} lines): {long}"


def test_every_relative_link_and_anchor_resolves():
    pages = [REPO / "README.md", *_doc_files(), *sorted((REPO / "benchmarks").glob("*.md"))]
    problems = [p for page in pages for p in _link_problems(page)]
    assert not problems, "broken links:\n" + "\n".join(problems)


# A doc path, optionally #anchor, optionally followed (on the same line or the
# next comment line) by the section's name in double quotes.
CITATION = re.compile(
    r"docs/((?:[\w-]+/)*[\w-]+\.md)(?:#([\w-]+))?"
    r"(?:[,:]?[ \t]*(?:\n[ \t]*(?://+|#+|\*)?[ \t]*)?\(?\"([^\"]{1,80})\")?"
)


def test_sources_cite_docs_and_sections_that_exist():
    problems = []
    for path in _files(SOURCE_SUFFIXES | {".md", ".proto", "Makefile"}):
        text = path.read_text(errors="replace")
        for m in CITATION.finditer(text):
            doc, anchor, section = DOCS / m.group(1), m.group(2), m.group(3)
            if section:  # a name cut over comment lines: join it again
                section = re.sub(r"\s*\n\s*(?://+|#+|\*)?\s*", " ", section)
            where = (
                f"{path.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
            )
            if not doc.exists():
                problems.append(f"{where}: no such doc")
            elif anchor and anchor not in anchors(doc):
                problems.append(f"{where}: no such anchor")
            elif section and not any(
                h.startswith(section.replace("`", "").lower()) for h in headings(doc)
            ):
                problems.append(f"{where}: no heading starts with {section!r}")
    assert not problems, "stale doc citations:\n" + "\n".join(problems)


FLAG_DECL = re.compile(
    r"\b(?:fs|flag)\.(?:Bool|Int|Int64|Uint|Uint64|String|Float64|Duration|Func|BoolFunc|TextVar|Var"
    r"|BoolVar|IntVar|Int64Var|UintVar|Uint64Var|StringVar|Float64Var|DurationVar)\([^\"\n;]*?\"([^\"]+)\""
)


# The user guides that document each program's flags.
PROGRAM_GUIDES = {
    "mooncake": ["doctor.md", "store-operations.md"],
    "mooncake_client": ["store-deployment.md"],
    "mooncake_http_metadata_server": ["transfer-engine.md"],
    "mooncake_master": [
        "store-master.md",
        "store-ha.md",
        "store-disk-tiers.md",
        "kv-events.md",
        "security.md",
    ],
    "mooncake_pg_coordinator": ["collectives.md"],
    "transfer_engine_bench": ["transfer-engine.md"],
}


def declared_flags() -> dict[str, set[str]]:
    """Every flag the programs of cmd/ declare, by program (cmd/<program>/)."""
    out: dict[str, set[str]] = {}
    for path in _files({".go"}):
        rel = path.relative_to(REPO)
        if rel.parts[0] != "cmd" or path.name.endswith("_test.go"):
            continue
        for m in FLAG_DECL.finditer(path.read_text()):
            out.setdefault(rel.parts[1], set()).add(m.group(1))
    return out


def variables_in_code() -> dict[str, str]:
    """Every MC_* / MOONCAKE_* name the code spells out as a string (Go, Python,
    C++) or reads as a shell variable, with one file that does."""
    out = {}
    quoted = re.compile(r"[\"']((?:MC|MOONCAKE)_[A-Z0-9_]+)[\"']")
    shell = re.compile(r"\$\{?((?:MC|MOONCAKE)_[A-Z0-9_]+)")
    for path in _files(SOURCE_SUFFIXES | {"Makefile"}):
        text = path.read_text(errors="replace")
        rx = shell if path.suffix == ".sh" or path.name == "Makefile" else quoted
        for m in rx.finditer(text):
            out.setdefault(m.group(1), str(path.relative_to(REPO)))
    return out


def _guide_text() -> str:
    return "\n".join(p.read_text() for p in user_guides())


def test_the_flag_scan_finds_flags():
    flags = declared_flags()
    # The scan must see every kind of declaration the programs use.
    for program, name in [
        ("mooncake_master", "rpc_port"),
        ("mooncake_master", "enable_kv_events"),
        ("mooncake_master", "v"),
        ("mooncake_client", "global_segment_size"),
        ("mooncake_pg_coordinator", "idle_exit_seconds"),
        ("transfer_engine_bench", "block_size"),
    ]:
        assert name in flags.get(program, ()), (program, name)


def test_every_flag_is_in_its_programs_user_guide():
    flags = declared_flags()
    assert set(flags) == set(PROGRAM_GUIDES), (
        "a program of cmd/ has no user guide in PROGRAM_GUIDES"
    )
    missing = {}
    for program, names in flags.items():
        text = "\n".join((DOCS / guide).read_text() for guide in PROGRAM_GUIDES[program])
        for name in sorted(names):
            if not re.search(r"(?<![\w-])--?" + re.escape(name) + r"(?![\w-])", text):
                missing.setdefault(program, []).append(name)
    assert not missing, f"flags their program's guides do not mention (as --name): {missing}"


def test_every_environment_variable_is_in_a_user_guide():
    text = _guide_text()
    found = variables_in_code()
    assert "MC_STORE_MASTER_RPC" in found and "MOONCAKE_WHEELHOUSE" in found, (
        "the variable scan is broken"
    )
    stale = sorted(TEST_ONLY_VARIABLES - set(found))
    assert not stale, f"TEST_ONLY_VARIABLES names variables no code reads any more: {stale}"
    missing = {
        name: where
        for name, where in found.items()
        if name not in TEST_ONLY_VARIABLES
        and not re.search(r"(?<![A-Za-z0-9_])" + name + r"(?![A-Za-z0-9_])", text)
    }
    assert not missing, f"environment variables no user guide mentions: {missing}"


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("KV cache events (`--enable_kv_events`)", "kv-cache-events---enable_kv_events"),
        ("Disk tier (client-local SSD offload)", "disk-tier-client-local-ssd-offload"),
        ("`mooncake.store`: the KV store's Python API", "mooncakestore-the-kv-stores-python-api"),
        (
            "Namespaces: `keyspace`, `tenant`, `domain`, `object_set`",
            "namespaces-keyspace-tenant-domain-object_set",
        ),
    ],
)
def test_heading_slugs_are_githubs(heading, slug):
    assert heading_slug(heading) == slug
