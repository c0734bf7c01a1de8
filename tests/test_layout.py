"""The package's layout: the import graph of fabric/ has no cycle (imports inside functions count too), the core
never imports the experiments and commands built on it, nothing but the commands imports fabric.cli, and the
collectives (a workload layer: the pipeline hands them a cost oracle) never reach the simulator."""
import ast
from collections import deque
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


def import_path(graph: dict[str, set[str]], start: str, target: str, via=lambda m: True) -> list[str] | None:
    """A shortest chain of imports start -> ... -> target through modules `via` accepts, or None."""
    prev, todo = {start: None}, deque([start])
    while todo:
        m = todo.popleft()
        if m == target:
            chain = []
            while m is not None:
                chain.append(m)
                m = prev[m]
            return chain[::-1]
        for nxt in sorted(graph.get(m, ())):
            if nxt not in prev and (nxt == target or via(nxt)):
                prev[nxt] = m
                todo.append(nxt)
    return None


def _within(m: str, pkg: str) -> bool:
    return m == pkg or m.startswith(pkg + ".")


def collectives_reaching_sim(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """{module of fabric.collectives: its chain of imports to fabric.sim} for every one that reaches it. The chain
    may not pass through the root package: every import of a submodule runs fabric/__init__.py, so that edge is
    everywhere, and what the root imports itself is the cycle test's business (a root that reached sim would close
    a cycle through sim's own imports)."""
    out = {}
    for m in graph:
        if _within(m, "fabric.collectives"):
            chain = import_path(graph, m, "fabric.sim", via=lambda x: x != "fabric")
            if chain:
                out[m] = chain
    return out


def cli_importers(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """{module outside fabric.cli: the fabric.cli modules it imports}: only the commands may import them (their
    process set-up is an explicit call, fabric._process.tune_process, not something importing cli/ does)."""
    out = {m: sorted(t for t in targets if _within(t, "fabric.cli")) for m, targets in graph.items()
           if not _within(m, "fabric.cli")}
    return {m: t for m, t in out.items() if t}


def test_fabric_has_no_import_cycle():
    cycle = find_cycle(import_graph(ROOT / "fabric"))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_core_does_not_import_experiments():
    """The core never imports the experiments (nor the commands: test_only_the_commands_import_cli)."""
    def outer(m):
        return any(_within(m, p) for p in ("fabric.experiments", "fabric.cli"))
    bad = {m: sorted(t for t in targets if _within(t, "fabric.experiments"))
           for m, targets in import_graph(ROOT / "fabric").items() if not outer(m)}
    assert not {m: t for m, t in bad.items() if t}


def test_collectives_never_reach_the_simulator():
    bad = collectives_reaching_sim(import_graph(ROOT / "fabric"))
    assert not bad, {m: " -> ".join(chain) for m, chain in bad.items()}


def test_only_the_commands_import_cli():
    assert not cli_importers(import_graph(ROOT / "fabric"))


def test_the_layer_rules_can_fail(tmp_path):
    """A collectives module importing sim inside a function, or through another module, and an experiment importing
    a command module for its side effects, are all found; without them the rules pass."""
    pkg = tmp_path / "fabric"
    for sub in ("collectives", "cli", "experiments"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "sim.py").write_text("from fabric import network\n")
    (pkg / "network.py").write_text("")
    (pkg / "lower.py").write_text("from fabric import collectives, sim\n")      # the pipeline may
    (pkg / "collectives" / "policy.py").write_text("from fabric import network\n")
    (pkg / "cli" / "common.py").write_text("from fabric import sim\n")
    (pkg / "cli" / "replay.py").write_text("from fabric.cli.common import x\n")
    (pkg / "experiments" / "bench.py").write_text("from fabric import sim\n")
    assert not collectives_reaching_sim(import_graph(pkg)) and not cli_importers(import_graph(pkg))
    (pkg / "collectives" / "policy.py").write_text("def times():\n    from fabric import sim\n")
    assert collectives_reaching_sim(import_graph(pkg)) == {"fabric.collectives.policy":
                                                           ["fabric.collectives.policy", "fabric.sim"]}
    (pkg / "collectives" / "policy.py").write_text("")
    (pkg / "network.py").write_text("def route():\n    import fabric.sim\n")
    (pkg / "collectives" / "library.py").write_text("from fabric.network import route\n")
    assert collectives_reaching_sim(import_graph(pkg)) == {
        "fabric.collectives.library": ["fabric.collectives.library", "fabric.network", "fabric.sim"]}
    (pkg / "experiments" / "bench.py").write_text("def child():\n    import fabric.cli.common  # noqa\n")
    assert cli_importers(import_graph(pkg)) == {"fabric.experiments.bench": ["fabric.cli", "fabric.cli.common"]}


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


def test_old_tools_name_loads_the_experiments():
    """fabric.tools, the old name of fabric.experiments, still loads its modules for one release (scripts such as
    tools/serve_scaling.py import fabric.tools.serving)."""
    import subprocess
    import sys
    code = "from fabric.tools.serving import PRESET_16; from fabric.experiments.serving import PRESET_16 as P; " \
           "assert PRESET_16 == P"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
