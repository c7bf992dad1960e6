"""Packaging tests: the installed mooncake-go package is complete and consistent.

They check the *installed* package (run `make setup` first), so they fail when
the wheel misses the library, a Go binary, a console script or the header, or
when the hand-written header drifts from what capi/ exports.
"""

from __future__ import annotations

import ast
import ctypes
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

import mooncake
import mooncake._lib
import mooncake.cli

REPO = Path(__file__).resolve().parent.parent
PKG = Path(mooncake.__file__).resolve().parent
HEADER = REPO / "capi" / "mooncake.h"


def _repo_version() -> str:
    text = (REPO / "internal" / "version" / "version.go").read_text()
    m = re.search(r'const version = "([^"]+)"', text)
    assert m, 'internal/version/version.go has no `const version = "..."`'
    return m.group(1)


def _cmd_names() -> list[str]:
    """Directories of cmd/ that hold a main package (as CMakeLists.txt finds them)."""
    names = []
    for d in sorted((REPO / "cmd").glob("*")):
        for f in d.glob("*.go"):
            if f.name.endswith("_test.go"):
                continue
            if re.search(r"^package main\b", f.read_text(), re.M):
                names.append(d.name)
                break
    return names


def _console_scripts() -> dict[str, str]:
    eps = importlib.metadata.distribution("mooncake-go").entry_points
    return {ep.name: ep.value for ep in eps if ep.group == "console_scripts"}


def _go() -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    assert Path(go).exists(), "go toolchain not found"
    return go


def test_import_installed_package() -> None:
    assert (PKG / "lib" / "libmooncake.so").is_file(), f"no libmooncake.so under {PKG}"
    assert not PKG.is_relative_to(REPO / "python"), "tests must run against the installed package"
    code = "import sys, mooncake, mooncake._lib, mooncake.cli; sys.exit('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"importing mooncake imported torch or failed:\n{r.stderr}"


def test_version_matches_capi() -> None:
    assert mooncake._lib.version() == _repo_version()
    assert importlib.metadata.version("mooncake-go") == _repo_version()


def test_take_string_null_is_none() -> None:
    assert mooncake._lib.take_string(None) is None
    assert mooncake._lib.take_string(0) is None


def test_every_cmd_binary_is_shipped() -> None:
    for name in _cmd_names():
        path = PKG / "bin" / name
        assert path.is_file() and os.access(path, os.X_OK), f"cmd/{name} not shipped at {path}"


def test_console_scripts_run_help() -> None:
    scripts = _console_scripts()
    assert set(scripts) >= {
        "mooncake_master",
        "mooncake_http_metadata_server",
        "transfer_engine_bench",
    }
    bindir = Path(sysconfig.get_path("scripts"))
    for name in _cmd_names():
        if name not in scripts:
            continue
        exe = bindir / name
        assert exe.is_file(), f"console script {name} not installed in {bindir}"
        r = subprocess.run(
            [str(exe), "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert r.returncode == 0, f"{name} --help exited {r.returncode}:\n{r.stdout}{r.stderr}"


def test_missing_binary_gives_clear_error() -> None:
    code = "import mooncake.cli as c; c.run('no_such_mooncake_binary')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 127
    assert "no_such_mooncake_binary" in r.stderr
    assert "not part of this installation" in r.stderr
    assert "Traceback" not in r.stderr


def test_header_installed() -> None:
    installed = PKG / "lib" / "mooncake.h"
    if HEADER.exists():
        assert installed.is_file(), f"capi/mooncake.h exists but {installed} does not"
        assert installed.read_bytes() == HEADER.read_bytes(), "installed mooncake.h is stale"
    else:
        assert not installed.exists(), f"{installed} installed but capi/mooncake.h is gone"


def _cgo_exports(header: str) -> set[str]:
    """Names of the functions cgo exports, from its generated header."""
    marker = "End of boilerplate cgo prologue."
    assert marker in header, "unexpected cgo header layout"
    body = header.split(marker, 1)[1]
    return set(re.findall(r"^extern\s+[^;(\"]*?\b(\w+)\s*\(", body, re.M))


def _declared_functions(header: str) -> set[str]:
    """Names of the functions a hand-written C header declares (not defines)."""
    text = re.sub(r"/\*.*?\*/", " ", header, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)
    text = re.sub(r'extern\s+"C"\s*\{', " ", text)
    prev = None
    while prev != text:  # drop struct/enum bodies and inline definitions
        prev, text = text, re.sub(r"\{[^{}]*\}", " ", text)
    text = text.replace("{", " ").replace("}", " ")
    names = set()
    for stmt in text.split(";"):
        stmt = " ".join(stmt.split())
        if not stmt or stmt.startswith("typedef"):
            continue
        m = re.match(r"(?:extern\s+)?[\w\s*]+?\b([A-Za-z_]\w*)\s*\(", stmt)
        if m:
            names.add(m.group(1))
    return names


@pytest.fixture(scope="module")
def cgo_header(tmp_path_factory) -> str:
    """The header cgo generates for capi/ (its exports' C prototypes)."""
    out = tmp_path_factory.mktemp("cgo")
    env = dict(os.environ, CGO_CFLAGS="-Wno-deprecated-declarations")
    r = subprocess.run(
        [_go(), "build", "-buildmode=c-shared", "-o", str(out / "libx.so"), "./capi"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, f"go build ./capi failed:\n{r.stderr}"
    return (out / "libx.h").read_text()


def test_header_matches_cgo_exports(cgo_header: str) -> None:
    if not HEADER.exists():
        pytest.skip("capi/mooncake.h not written yet")
    exported = _cgo_exports(cgo_header)
    documented = _declared_functions(HEADER.read_text())
    assert exported, "cgo header declares no functions"
    assert not exported - documented, (
        f"exported but missing from capi/mooncake.h: {sorted(exported - documented)}"
    )
    assert not documented - exported, (
        f"in capi/mooncake.h but not exported: {sorted(documented - exported)}"
    )


def test_header_parsers() -> None:
    cgo = (
        '/* End of boilerplate cgo prologue.  */\n#ifdef __cplusplus\nextern "C" {\n#endif\n'
        "extern char* mc_version(void);\nextern void mc_free(void* p);\n"
        "#ifdef __cplusplus\n}\n#endif\n"
    )
    assert _cgo_exports(cgo) == {"mc_version", "mc_free"}
    hand = """
        #ifndef MOONCAKE_H
        #define MOONCAKE_H
        #include <stdint.h>
        #ifdef __cplusplus
        extern "C" {
        #endif
        /* Returns the version; free with mc_free(). */
        char *mc_version(void);
        // Frees p.
        extern void mc_free(void *p);
        typedef void (*mc_callback)(void *arg, int status);
        typedef struct { uint64_t a; void (*cb)(int); } mc_pair;
        int64_t mc_submit(uint64_t engine,
                          const mc_pair *pairs, mc_callback cb);
        #ifdef __cplusplus
        }
        #endif
        #endif
    """
    assert _declared_functions(hand) == {"mc_version", "mc_free", "mc_submit"}


def test_error_codes_match_the_go_table():
    """mooncake.store.ErrorCode names every code of kvstore/errors.go, with its number."""
    import re

    from mooncake.store import ErrorCode

    src = (REPO / "kvstore" / "errors.go").read_text()
    values = dict(re.findall(r"^\s+(\w+)\s+ErrorCode = (-?\d+)$", src, re.M))
    names = dict(re.findall(r'(\w+): "([A-Z_]+)"', src))
    go = {names[ident]: int(v) for ident, v in values.items()}
    assert go, "no codes parsed from kvstore/errors.go"
    assert {c.name: int(c) for c in ErrorCode} == go


def _prototypes(header: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (return type, parameter types) of the mc_* functions a header
    declares; types normalised (no const, no parameter names, "*" attached)."""
    text = re.sub(r"/\*.*?\*/", " ", header, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)
    text = re.sub(r'extern\s+"C"\s*\{', " ", text).replace("}", " ")

    def norm(decl: str, named: bool) -> str:
        decl = " ".join(decl.replace("const ", " ").replace("*", " * ").split())
        words = [w for w in decl.split(" ") if w != "extern"]
        if named and len(words) > 1 and words[-1] not in ("*", "void"):
            words = words[:-1]  # the parameter's name
        return " ".join(w for w in words if w != "*") + "*" * words.count("*")

    out = {}
    for stmt in text.split(";"):
        m = re.fullmatch(r"\s*(.*?)\b(mc_\w+)\s*\((.*)\)\s*", stmt, re.S)
        if m:
            params = [p for p in m.group(3).split(",") if p.strip() not in ("", "void")]
            out[m.group(2)] = (norm(m.group(1), False), [norm(p, True) for p in params])
    return out


# The ctypes types a C parameter type may be passed as (pointers also as
# c_void_p, and C strings as c_char_p, c_void_p or a pointer to char).
_SCALARS = {
    "uint64_t": ctypes.c_uint64,
    "int64_t": ctypes.c_int64,
    "uint32_t": ctypes.c_uint32,
    "int32_t": ctypes.c_int32,
    "int": ctypes.c_int,
    "size_t": ctypes.c_size_t,
    "double": ctypes.c_double,
    "float": ctypes.c_float,
    "char": ctypes.c_char,
    "uint8_t": ctypes.c_uint8,
}


def _fits(c_type: str, ct) -> bool:
    """Whether ctypes type `ct` passes C type `c_type` correctly."""
    if c_type in _SCALARS:
        return (
            ct is _SCALARS[c_type]
            or ctypes.sizeof(ct) == ctypes.sizeof(_SCALARS[c_type])
            and (issubclass(ct, ctypes._SimpleCData) and ct._type_ == _SCALARS[c_type]._type_)
        )
    if c_type in _structs():
        return ct is _structs()[c_type]
    if c_type in _FUNCTION_POINTERS:
        return ct is ctypes.c_void_p or issubclass(ct, ctypes._CFuncPtr)
    if not c_type.endswith("*"):
        return False
    if ct in (ctypes.c_void_p, ctypes.c_char_p) or ct is ctypes.py_object:
        return True
    target = getattr(ct, "_type_", None)
    return isinstance(target, type) and (_fits(c_type[:-1], target) or c_type[:-1] == "void")


# mooncake.h's function-pointer typedefs (callbacks): passed as c_void_p or
# as a ctypes CFUNCTYPE.
_FUNCTION_POINTERS = set(re.findall(r"typedef[^;(]*\(\s*\*\s*(\w+)\s*\)", HEADER.read_text()))


def _structs() -> dict[str, type]:
    """mooncake.h's structs that Python passes, and their ctypes.Structure."""
    from mooncake import mooncake_ep_buffer as ep
    from mooncake import store

    return {
        "mc_store_setup_args": store.StoreSetupArgs,
        "mc_ep_call": ep.EpCall,
        "mc_ep_dispatch_args": ep.DispatchArgs,
        "mc_ep_combine_args": ep.CombineArgs,
    }


def _header_structs(header: str) -> dict[str, list[tuple[str, str]]]:
    """typedef name -> [(field, C type)] of every `typedef struct` in a header;
    types normalised as `_prototypes` does (no const, "*" attached)."""
    text = re.sub(r"/\*.*?\*/", " ", header, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    out = {}
    for body, name in re.findall(r"typedef\s+struct\s+\w*\s*\{([^{}]*)\}\s*(\w+)\s*;", text):
        fields = []
        for decl in body.split(";"):
            decl = " ".join(decl.replace("const ", " ").replace("*", " * ").split())
            if decl:
                words = decl.split(" ")
                fields.append(
                    (
                        words[-1],
                        " ".join(w for w in words[:-1] if w != "*") + "*" * words.count("*"),
                    )
                )
        out[name] = fields
    return out


def _c_layouts(header: Path, structs: dict[str, list[tuple[str, str]]]) -> dict[str, dict]:
    """sizeof and (offset, size) of each field of `structs`, as the C compiler
    lays them out from `header`."""
    lines = [
        f'#include "{header.name}"',
        "#include <stddef.h>",
        "#include <stdio.h>",
        "int main(void) {",
    ]
    for name, fields in structs.items():
        lines.append(f'  printf("{name} . %zu %zu\\n", sizeof({name}), (size_t)0);')
        for f, _ in fields:
            size = f"sizeof((({name} *)0)->{f})"
            lines.append(f'  printf("{name} {f} %zu %zu\\n", offsetof({name}, {f}), {size});')
    lines += ["  return 0;", "}"]
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler to lay out mooncake.h's structs"
    with tempfile.TemporaryDirectory() as d:
        src, exe = Path(d) / "layout.c", Path(d) / "layout"
        src.write_text("\n".join(lines) + "\n")
        r = subprocess.run(
            [cc, "-I", str(header.parent), str(src), "-o", str(exe)], capture_output=True, text=True
        )
        assert r.returncode == 0, f"compiling the layout probe failed:\n{r.stderr}"
        run = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    out: dict[str, dict] = {}
    for line in run.stdout.splitlines():
        name, field, a, b = line.split()
        out.setdefault(name, {})[field] = (int(a), int(b))
    return out


def _struct_mismatches(c_fields: list[tuple[str, str]], layout: dict, cls: type) -> list[str]:
    """How ctypes.Structure `cls` differs from the C struct (fields, layout)."""
    bad = []
    names = [f[0] for f in cls._fields_]
    if names != [f for f, _ in c_fields]:
        bad.append(f"fields {names} != {[f for f, _ in c_fields]}")
    if ctypes.sizeof(cls) != layout["."][0]:
        bad.append(f"sizeof {ctypes.sizeof(cls)} != {layout['.'][0]}")
    types = dict(cls._fields_)
    for field, c_type in c_fields:
        if field not in types:
            continue
        desc = getattr(cls, field)
        if (desc.offset, desc.size) != layout[field]:
            bad.append(f"{field}: offset/size {(desc.offset, desc.size)} != {layout[field]}")
        if not _fits(c_type, types[field]):
            bad.append(f"{field}: {types[field]} cannot hold {c_type}")
    return bad


def test_ctypes_structs_match_the_header() -> None:
    """Every struct Python passes has mooncake.h's field names, order, types,
    offsets and size (as the C compiler lays the header out)."""
    structs = _header_structs(HEADER.read_text())
    assert "mc_pg_op" in structs and structs["mc_pg_op"][0] == ("kind", "int32_t")
    wanted = {name: structs[name] for name in _structs()}
    layouts = _c_layouts(HEADER, wanted)
    for name, cls in _structs().items():
        bad = _struct_mismatches(wanted[name], layouts[name], cls)
        assert not bad, f"{cls.__qualname__} vs mooncake.h's {name}: {bad}"


def test_struct_check_catches_a_drift(tmp_path: Path) -> None:
    """The layout check fails a ctypes struct whose field order, type or
    padding differs from the header's."""
    h = tmp_path / "drift.h"
    h.write_text(
        "#include <stdint.h>\n"
        "typedef struct s { int32_t a; /* c */ int64_t b; const void *p; } s;\n"
    )
    fields = _header_structs(h.read_text())["s"]
    assert fields == [("a", "int32_t"), ("b", "int64_t"), ("p", "void*")]
    layout = _c_layouts(h, {"s": fields})["s"]
    assert layout == {".": (24, 0), "a": (0, 4), "b": (8, 8), "p": (16, 8)}

    def struct(*fs: tuple[str, type], pack: int = 0) -> type:
        attrs: dict = {"_fields_": list(fs)}
        if pack:
            attrs["_pack_"] = pack
        return type("S", (ctypes.Structure,), attrs)

    good = struct(("a", ctypes.c_int32), ("b", ctypes.c_int64), ("p", ctypes.c_void_p))
    assert _struct_mismatches(fields, layout, good) == []
    swapped = struct(("b", ctypes.c_int64), ("a", ctypes.c_int32), ("p", ctypes.c_void_p))
    assert _struct_mismatches(fields, layout, swapped)
    narrow = struct(("a", ctypes.c_int32), ("b", ctypes.c_int32), ("p", ctypes.c_void_p))
    assert _struct_mismatches(fields, layout, narrow)
    packed = struct(("a", ctypes.c_int32), ("b", ctypes.c_int64), ("p", ctypes.c_void_p), pack=1)
    assert _struct_mismatches(fields, layout, packed)


def _ctypes_tables() -> dict[str, tuple[list, object]]:
    """Every (argtypes, restype) the Python package declares for libmooncake."""
    import importlib

    tables: dict[str, tuple[list, object]] = {}
    for mod, attrs in {
        "mooncake._lib": ("_SIGNATURES",),
        "mooncake.store": ("_SIGNATURES", "_SEGMENT_SIGNATURES"),
        "mooncake._store_sessions": ("_SIGNATURES",),
        "mooncake._store_fleet": ("_SIGNATURES",),
        "mooncake._store_offload": ("_SIGNATURES",),
        "mooncake._store_dummy": ("_SIGNATURES",),
        "mooncake._engine_rpc": ("_SIGNATURES",),
        "mooncake.engine": ("_SIGNATURES",),
        "mooncake.mooncake_ep_buffer": ("_SIGNATURES",),
        "mooncake.buffer_pool": ("_SIGNATURES",),
        "mooncake._device": ("_SIGNATURES",),
    }.items():
        m = importlib.import_module(mod)
        for attr in attrs:
            for name, sig in getattr(m, attr).items():
                assert tables.get(name, sig) == sig, f"{name} declared differently in two modules"
                tables[name] = sig
    return tables


def test_ctypes_tables_match_the_header(cgo_header: str) -> None:
    """The ctypes signature tables agree, parameter by parameter, with
    mooncake.h, which declares what libmooncake exports (the compiler checks
    each export against it; see capi/cgo.h)."""
    exports = cgo_header.split("End of boilerplate cgo prologue.", 1)[1].split("*/", 1)[1]
    exported = _prototypes(exports)
    documented = _prototypes(HEADER.read_text())
    assert len(exported) > 50 and set(exported) == set(documented)
    for name, (_, params) in exported.items():
        assert len(documented[name][1]) == len(params), f"mooncake.h: arity of {name}"
    tables = _ctypes_tables()
    assert len(tables) > 50
    for name, (args, res) in tables.items():
        assert name in documented, f"ctypes declares {name}, which mooncake.h does not"
        ret, params = documented[name]
        assert len(args) == len(params), f"{name}: {len(args)} ctypes arguments for {len(params)}"
        for i, (c_type, ct) in enumerate(zip(params, args, strict=True)):
            assert _fits(c_type, ct), f"{name} argument {i}: {ct} cannot pass {c_type}"
        if ret == "void":
            assert res is None, f"{name} returns void, ctypes says {res}"
        else:
            assert res is not None and _fits(ret, res), f"{name} returns {ret}, ctypes says {res}"


def test_exports_are_compiled_against_the_header(cgo_header: str) -> None:
    """cgo's header carries capi's preambles, which include mooncake.h (through
    capi/cgo.h): that is what makes the compiler reject an export whose
    signature differs from its declaration."""
    prolog = cgo_header.split("End of boilerplate cgo prologue.", 1)[0]
    assert '#include "cgo.h"' in prolog
    assert '#include "mooncake.h"' in (REPO / "capi" / "cgo.h").read_text()


# -- the Python package imports in no circle (issue 31) ------------------------------


def _import_targets(node: ast.AST, module: str, is_pkg: bool) -> list[str]:
    """The dotted names one AST node imports, absolute: `import a.b`,
    `from .x import y` (as ``pkg.x.y``: the module y if there is one, else x)
    and ``importlib.import_module("literal"[, package])``."""

    def absolute(anchor: str, anchor_is_pkg: bool, level: int, name: str | None) -> str:
        base = anchor.split(".") if anchor_is_pkg else anchor.split(".")[:-1]
        if level > 1:
            base = base[: len(base) - (level - 1)]
        return ".".join([*base, name] if name else base)

    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        src = absolute(module, is_pkg, node.level, node.module) if node.level else node.module or ""
        return [f"{src}.{a.name}" for a in node.names]
    if isinstance(node, ast.Call) and node.args:
        fn = node.func
        called = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
        arg = node.args[0]
        literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
        if called == "import_module" and literal:
            name = arg.value
            if not name.startswith("."):
                return [name]
            anchor = module if is_pkg else module.rpartition(".")[0]
            if len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
                anchor = str(node.args[1].value)
            stripped = name.lstrip(".")
            return [absolute(anchor, True, len(name) - len(stripped), stripped or None)]
    return []


def _module_graph(pkg_dir: Path) -> dict[str, set[str]]:
    """Each module of the package in pkg_dir and the package's modules it
    imports anywhere in its body (module level or inside functions)."""
    mods: dict[str, tuple[Path, bool]] = {}
    for path in sorted(pkg_dir.rglob("*.py")):
        parts = [pkg_dir.name, *path.relative_to(pkg_dir).with_suffix("").parts]
        is_pkg = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, (path, is_pkg) in mods.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _import_targets(node, mod, is_pkg):
                # "from pkg import name" is an import of the module
                # pkg.name when there is one, else of pkg.
                found = resolve(target)
                if found is not None and found != mod:
                    deps.add(found)
        graph[mod] = deps
    return graph


def _import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle in graph as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_python_package_has_no_import_cycle() -> None:
    """No module of python/mooncake imports, directly or through others, a
    module that imports it back: imports inside functions count, as do
    `importlib.import_module` literals (DESIGN.md: the store's parts take
    what they share from `_store_types`, not from `store.py`)."""
    graph = _module_graph(REPO / "python" / "mooncake")
    assert "mooncake.store" in graph and "mooncake._store_types" in graph["mooncake._store_tensors"]
    cycle = _import_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_import_cycle_check_finds_lazy_and_dynamic_imports(tmp_path: Path) -> None:
    """The checker sees a circle closed by an import inside a function, by
    `from . import`, and by importlib.import_module; and none in a chain."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "top.py").write_text("from pkg import _part\n")
    (pkg / "_part.py").write_text("def f():\n    from .top import X\n")
    (pkg / "dyn.py").write_text("import importlib\nm = importlib.import_module('.leaf', 'pkg')\n")
    (pkg / "leaf.py").write_text("x = 1\n")
    assert _import_cycle(_module_graph(pkg)) == ["pkg._part", "pkg.top", "pkg._part"]
    (pkg / "_part.py").write_text("from pkg import leaf\n")
    assert _import_cycle(_module_graph(pkg)) is None
    (pkg / "leaf.py").write_text("def g():\n    import pkg.dyn\n")
    assert _import_cycle(_module_graph(pkg)) == ["pkg.leaf", "pkg.dyn", "pkg.leaf"]
