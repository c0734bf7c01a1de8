"""The package's layout: the import graph of fabric/ has no cycle (imports inside functions count too), and the core
never imports the tools and commands built on it."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules(pkg_dir: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the package at pkg_dir (a package is its __init__.py)."""
    out = {}
    for path in sorted(pkg_dir.rglob("*.py")):
        parts = path.relative_to(pkg_dir.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _targets(name: str, is_pkg: bool, node, mods) -> list[str]:
    """The modules one import statement names, each resolved to the deepest one that exists."""
    def deepest(dotted: str) -> str | None:
        while dotted and dotted not in mods:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    if isinstance(node, ast.Import):
        return [m for m in (deepest(a.name) for a in node.names) if m]
    base = node.module or ""
    if node.level:                               # relative: from the importer's package, level - 1 up
        pkg = name.split(".") if is_pkg else name.split(".")[:-1]
        pkg = pkg[:len(pkg) - node.level + 1]
        base = ".".join(pkg + ([node.module] if node.module else []))
    # `from pkg import sub` names the submodule; `from mod import attr` names mod
    return [m for m in (f"{base}.{a.name}" if f"{base}.{a.name}" in mods else deepest(base) for a in node.names)
            if m]


def import_graph(pkg_dir: Path) -> dict[str, set[str]]:
    """module -> the package's modules that importing it runs: every import statement anywhere in its file
    (functions and conditional blocks included). Importing pkg.sub from outside pkg also runs pkg/__init__.py, so
    it is an edge to pkg as well."""
    mods = modules(pkg_dir)
    graph = {}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(name, is_pkg, node, mods):
                    edges.add(target)
                    parts = target.split(".")
                    for i in range(1, len(parts)):
                        parent = ".".join(parts[:i])
                        if parent in mods and name != parent and not name.startswith(parent + "."):
                            edges.add(parent)
        edges.discard(name)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a list of nodes (first == last), or None."""
    state = dict.fromkeys(graph, 0)              # 0 unseen, 1 on the current path, 2 done
    for root in sorted(graph):
        if state[root]:
            continue
        path, stack = [root], [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt, 2) == 1:
                return path[path.index(nxt):] + [nxt]
            elif state.get(nxt, 2) == 0:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_fabric_has_no_import_cycle():
    cycle = find_cycle(import_graph(ROOT / "fabric"))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_core_does_not_import_tools_or_cli():
    def outer(m):
        return any(m == p or m.startswith(p + ".") for p in ("fabric.tools", "fabric.cli"))
    bad = {m: sorted(filter(outer, targets)) for m, targets in import_graph(ROOT / "fabric").items() if not outer(m)}
    assert not {m: t for m, t in bad.items() if t}


def test_the_cycle_check_can_fail(tmp_path):
    """A cycle through an import inside a function, and one through a package's __init__, are both found."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.a import thing\n")
    assert find_cycle(import_graph(pkg)) == ["pkg.a", "pkg.b", "pkg.a"]
    (pkg / "b.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub import leaf\n")
    (pkg / "sub" / "leaf.py").write_text("x = 1\n")
    assert find_cycle(import_graph(pkg)) is None
    (pkg / "sub" / "leaf.py").write_text("from pkg import a\n")
    (pkg / "a.py").write_text("from pkg.sub.leaf import x\n")     # runs pkg/sub/__init__.py first
    assert find_cycle(import_graph(pkg)) == ["pkg.a", "pkg.sub", "pkg.sub.leaf", "pkg.a"]
