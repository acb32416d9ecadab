"""The direction of imports (docs/architecture.md), read from the source's import graph.

Every ``import`` and ``from … import`` in the package is read with ``ast``, the ones inside
functions included, so a lazy import that breaks a rule fails as a top-level one does."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = {"git_pf": "git_pf"}
UTILITIES = {"git_pf.core.errors", "git_pf.core.cores", "git_pf.core.limits", "git_pf.core.writeback",
             "git_pf.core.gitdir"}  # leaves: the standard library only (gitdir: which git directory holds the objects)
# What no layer package may import: the porcelain, the transport, the mount, the merge engine.
ABOVE_LAYERS = ("git_pf.cli", "git_pf.mount", "git_pf.transport", "git_pf.mount.mounts", "git_pf.mount.snapshot",
                "git_pf.merge.engine", "git_pf.merge.conflicts", "git_pf.merge.report", "git_pf.runs",
                "git_pf.integrations", "git_pf.blame", "git_pf.report")
# A rule that spans layers: the cache merge keeps the pages whose tokens the merged trace still holds.
CROSS_LAYER = {("cache", "trace")}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    for name, directory in PACKAGE_DIRS.items():
        if rel.parts[0] == directory:
            parts = [name, *rel.with_suffix("").parts[1:]]
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise ValueError(path)


def import_graph() -> dict[str, set[str]]:
    """``{module: {git_pf modules it imports}}`` for every module of the package."""
    files = {_module_name(p): p for d in PACKAGE_DIRS.values() for p in (ROOT / d).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = ".".join(package[: len(package) - node.level + 1] + [node.module] if node.module else
                                package[: len(package) - node.level + 1]) if node.level else node.module or ""
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.add(full if full in files else base)
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
        graph[module] = {t for t in targets if t.split(".")[0] == "git_pf" and t != module}
    return graph


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _layer(module: str) -> str | None:
    """The layer package ``module`` belongs to (None outside them; the registry and the protocol
    (``base``) are no layer)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "layers" and parts[2] not in ("registry", "base") else None


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that goes against docs/architecture.md, one line each."""
    out = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            edge = f"{module} imports {target}"
            if _under(module, "git_pf.store") and not (_under(target, "git_pf.store") or target in UTILITIES):
                out.append(f"{edge}: the store imports only the store and utilities")
            if _under(module, "git_pf.kernels") and not _under(target, "git_pf.kernels"):
                out.append(f"{edge}: the kernels import nothing of git-pf")
            if _layer(module) and any(_under(target, p) for p in ABOVE_LAYERS):
                out.append(f"{edge}: a layer imports no porcelain, transport, mount or merge engine")
            if _layer(module) and _layer(target) and _layer(module) != _layer(target) \
                    and (_layer(module), _layer(target)) not in CROSS_LAYER:
                out.append(f"{edge}: one layer does not import another")
            if _under(module, "git_pf.transport") and _layer(target):
                out.append(f"{edge}: the transport reaches layers through registries, not imports")
            if _under(target, "git_pf.cli") and not (_under(module, "git_pf.cli") or module == "git_pf.__main__"):
                out.append(f"{edge}: only the entry point imports the CLI")
            if _under(target, "git_pf.mount") and not (_under(module, "git_pf.mount") or _under(module, "git_pf.cli")):
                out.append(f"{edge}: only the CLI starts the mount daemon's code")
            if _under(target, "git_pf.integrations") and not (_under(module, "git_pf.integrations")
                                                               or _under(module, "git_pf.cli")):
                out.append(f"{edge}: only the CLI imports the framework integrations")
    return out


def test_the_graph_is_read_whole():
    graph = import_graph()
    assert "git_pf.store.sidestore" in graph and "git_pf.layers.world.capture" in graph
    assert "git_pf.store.sidestore" in graph["git_pf.layers.world.capture"]
    assert "git_pf.layers.registry" in graph["git_pf.image.layercheck"]
    assert any(_under(t, "git_pf.merge") for t in graph["git_pf.layers.effects.merge"])


def test_imports_go_the_documented_direction():
    assert violations(import_graph()) == []


def test_a_store_module_importing_a_layer_is_caught():
    graph = import_graph()
    graph["git_pf.store.sidestore"] = graph["git_pf.store.sidestore"] | {"git_pf.layers.world.attrs"}
    graph["git_pf.layers.trace.tape"] = graph["git_pf.layers.trace.tape"] | {"git_pf.transport.push"}
    found = violations(graph)
    assert any("git_pf.store.sidestore imports git_pf.layers.world.attrs" in v for v in found)
    assert any("git_pf.layers.trace.tape imports git_pf.transport.push" in v for v in found)


# The operations reach the layers only through the registry (git_pf.layers.registry) and the
# protocol's methods (git_pf.layers.base): they import no layer module and name no layer.
OPERATIONS = ("git_pf.ops.snapshot", "git_pf.ops.checkout", "git_pf.ops.diff", "git_pf.ops.fork", "git_pf.ops.fsck", "git_pf.image.manifest",
              "git_pf.merge.engine", "git_pf.merge.conflicts", "git_pf.merge.report")


def layer_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Each (operation, layer module) import edge: what the registry should carry instead."""
    return {(module, target) for module in OPERATIONS for target in graph.get(module, ()) if _layer(target)}


def test_operations_reach_layers_through_the_registry():
    assert layer_imports(import_graph()) == set(), "reach it through a method of the Layer protocol"


def test_an_operation_naming_a_layer_is_caught():
    graph = import_graph()
    assert "git_pf.layers.registry" in graph["git_pf.ops.diff"] and "git_pf.layers.registry" in graph["git_pf.ops.fsck"]
    graph["git_pf.ops.diff"] = graph["git_pf.ops.diff"] | {"git_pf.layers.effects.ledger"}
    assert ("git_pf.ops.diff", "git_pf.layers.effects.ledger") in layer_imports(graph)


def layer_names() -> set[str]:
    """Every registered layer's name, and every manifest entry a layer keeps (tape, procs)."""
    from git_pf.layers import registry

    return {layer.name for layer in registry.layers()} | {k for layer in registry.layers() for k in layer.counts}


def _source(module: str) -> str:
    return (ROOT / Path(*module.split("."))).with_suffix(".py").read_text()


def layer_literals(sources: dict[str, str], names: set[str]) -> list[str]:
    """Each string or bytes literal of the ``sources`` (module -> text) that is a layer's name."""
    out = []
    for module, text in sorted(sources.items()):
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
                value = node.value.decode("utf-8", "replace") if isinstance(node.value, bytes) else node.value
                if value in names:
                    out.append(f"{module}:{node.lineno}: names the {value!r} layer")
    return out


def test_operations_name_no_layer():
    assert layer_literals({m: _source(m) for m in OPERATIONS}, layer_names()) == []


def test_a_layer_name_in_an_operation_is_caught():
    sources = {m: _source(m) for m in OPERATIONS}
    sources["git_pf.ops.checkout"] += '\nif "trace" in LAYERS:\n    pass\n'
    sources["git_pf.merge.engine"] += '\nTAPE = b"tape"\n'
    found = layer_literals(sources, layer_names())
    assert any(line.startswith("git_pf.ops.checkout:") and "'trace'" in line for line in found)
    assert any(line.startswith("git_pf.merge.engine:") and "'tape'" in line for line in found)


# One rule per package (docs/architecture.md, "The tree"): the packages of git_pf in their order,
# bottom up. A module may import its own package, the package root (the public names) and any
# package below its own; an import upwards is one of the exceptions listed, with its reason.
ORDER = ("kernels", "core", "store", "image", "layers", "transport", "ops", "merge", "repo", "cache", "mount",
         "runs", "executors", "blame", "rollouts", "report", "integrations", "testing", "hooks", "cli", "__main__")
UPWARD = {
    ("image", "layers"): "layercheck reads each layer's files through the registry's parsers",
    ("layers", "merge"): "a layer's merger implements the merge interface (merge.layer, merge.tree3)",
    ("layers", "repo"): "the KV cache's restore and prefix lookup read images through Repo",
    ("transport", "repo"): "fetch opens the fetched repository through Repo",
    ("blame", "testing"): "the validation suite runs the scripted agent against the fake LLM server",
}


def package_of(module: str) -> str:
    """The top-level package (or root module) of git_pf that ``module`` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "git_pf"


def package_violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, targets in sorted(graph.items()):
        mine = package_of(module)
        for target in sorted(targets):
            theirs = package_of(target)
            if theirs in (mine, "git_pf") or (mine, theirs) in UPWARD:
                continue
            if mine not in ORDER or theirs not in ORDER:
                out.append(f"{module} imports {target}: a package missing from ORDER")
            elif ORDER.index(theirs) > ORDER.index(mine):
                out.append(f"{module} imports {target}: {mine} is below {theirs}")
    return out


def test_each_package_imports_only_those_below_it():
    graph = import_graph()
    assert {package_of(m) for m in graph} - {"git_pf"} == set(ORDER)
    assert package_violations(graph) == []


def test_an_import_upwards_is_caught():
    graph = import_graph()
    graph["git_pf.core.units"] = graph["git_pf.core.units"] | {"git_pf.image.refs"}
    graph["git_pf.ops.diff"] = graph["git_pf.ops.diff"] | {"git_pf.runs.replay"}
    found = package_violations(graph)
    assert "git_pf.core.units imports git_pf.image.refs: core is below image" in found
    assert "git_pf.ops.diff imports git_pf.runs.replay: ops is below runs" in found


# One command module does not reach into another's private names: what two commands share
# lives in the CLI's shared module (git_pf.cli.app) under a public name.
def _commands() -> dict[str, str]:
    """Each ``git_pf.cli.cmd_*`` module -> its source."""
    return {f"git_pf.cli.{p.stem}": p.read_text() for p in sorted((ROOT / "git_pf" / "cli").glob("cmd_*.py"))}


def private_command_imports(sources: dict[str, str]) -> list[str]:
    """Each private name (``_x``, not a dunder) a command module takes from another command module:
    ``from .cmd_x import _y``, or ``cmd_x._y`` on a command module it imported."""
    def private(name: str) -> bool:
        return name.startswith("_") and not name.endswith("__")

    out = []
    for module, text in sorted(sources.items()):
        package = module.split(".")[:-1]
        bound = {}  # local name -> the command module it stands for
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom):
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else node.module or ""
                for alias in node.names:
                    if f"{base}.{alias.name}" in sources:
                        bound[alias.asname or alias.name] = f"{base}.{alias.name}"
                    elif base in sources and base != module and private(alias.name):
                        out.append(f"{module}:{node.lineno}: imports {alias.name} of {base}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in sources and alias.asname:
                        bound[alias.asname] = alias.name
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Attribute) and private(node.attr):
                target = bound.get(node.value.id) if isinstance(node.value, ast.Name) else \
                    ast.unparse(node.value) if ast.unparse(node.value) in sources else None
                if target and target != module:
                    out.append(f"{module}:{node.lineno}: uses {node.attr} of {target}")
    return out


def test_no_command_imports_another_commands_private_names():
    sources = _commands()
    assert "git_pf.cli.cmd_mount" in sources and "git_pf.cli.cmd_runs" in sources
    assert private_command_imports(sources) == []


def test_a_command_importing_another_commands_private_name_is_caught():
    sources = _commands()
    sources["git_pf.cli.cmd_runs"] += "\ndef f():\n    from .cmd_mount import _repo_of_mount\n"
    sources["git_pf.cli.cmd_tree"] += "\nfrom . import cmd_mount as m\nm._repo_of_mount\n"
    sources["git_pf.cli.cmd_model"] += "\nimport git_pf.cli.cmd_mount\ngit_pf.cli.cmd_mount._repo_of_mount\n"
    sources["git_pf.cli.cmd_mount"] += "\nfrom .cmd_mount import _repo_of_mount\n"  # its own: fine
    found = private_command_imports(sources)
    assert any(v.startswith("git_pf.cli.cmd_runs:") and "_repo_of_mount of git_pf.cli.cmd_mount" in v for v in found)
    assert any(v.startswith("git_pf.cli.cmd_tree:") and "_repo_of_mount" in v for v in found)
    assert any(v.startswith("git_pf.cli.cmd_model:") and "_repo_of_mount" in v for v in found)
    assert not any(v.startswith("git_pf.cli.cmd_mount:") for v in found)


# The CLI is at the top of ORDER, so it may import any package; past Repo and the packages above
# it (runs, blame, report, ...: each command group is the front end of one), it reaches only these,
# each for its reason (docs/architecture.md, the cli row). A layer it reaches only through the
# registry, but for the two modules named.
CLI_BELOW_REPO = {
    "core": "errors and exit codes, JSONL, config: the command line's own input and output",
    "image": "refs, the manifest, verify and signing: log, ls, show, branch, tag and verify print refs and images "
             "as they read them, and -S signs the command's image",
    "layers": "the registry (each layer's snapshot flags, diff and summary lines through its Layer object) and "
              "the two modules of CLI_LAYER_MODULES",
    "transport": "push, fetch, clone, gc, remote-store and install are the transport's front end, with its "
                 "progress lines and remote names",
    "merge": "merge.report is the terminal form of a merge's result",
}
CLI_LAYER_MODULES = {
    "git_pf.layers.registry": "every layer through its Layer object",
    "git_pf.layers.model.model_merge": "git pf model-merge is the model layer's own command",
    "git_pf.layers.model.options": "the options of git pf model-merge",
    "git_pf.layers.world.watch": "the command server watches the sandboxes it snapshotted",
}
CLI_ABOVE_REPO = set(ORDER[ORDER.index("repo"):])


def cli_violations(graph: dict[str, set[str]]) -> list[str]:
    """Each import of the CLI past Repo that is not one of the documented reasons."""
    out = []
    for module, targets in sorted(graph.items()):
        if not _under(module, "git_pf.cli"):
            continue
        for target in sorted(targets):
            theirs = package_of(target)
            if theirs in CLI_ABOVE_REPO or theirs == "git_pf":
                continue
            if theirs not in CLI_BELOW_REPO:
                out.append(f"{module} imports {target}: the CLI reaches {theirs} only through Repo")
            elif theirs == "layers" and target not in CLI_LAYER_MODULES:
                out.append(f"{module} imports {target}: the CLI reaches a layer through the registry")
    return out


def test_the_cli_reaches_past_repo_only_where_documented():
    assert cli_violations(import_graph()) == []


def test_a_cli_import_past_repo_is_caught():
    graph = import_graph()
    assert "git_pf.layers.registry" in graph["git_pf.cli.cmd_snapshot"]
    graph["git_pf.cli.cmd_snapshot"] = graph["git_pf.cli.cmd_snapshot"] | {"git_pf.layers.trace.tape"}
    graph["git_pf.cli.cmd_images"] = graph["git_pf.cli.cmd_images"] | {"git_pf.store.sidestore"}
    found = cli_violations(graph)
    assert "git_pf.cli.cmd_snapshot imports git_pf.layers.trace.tape: the CLI reaches a layer through the registry" in found
    assert "git_pf.cli.cmd_images imports git_pf.store.sidestore: the CLI reaches store only through Repo" in found


def test_opening_a_repository_attaches_the_transport_at_the_stores_first_miss(tmp_path):
    """Opening a repository imports no transport; the store's first miss attaches it (lazy fetch,
    held objects), keeping a fetcher set before that (the mount daemon's)."""
    import subprocess
    import sys

    code = f"""
import sys
from git_pf import Repo
Repo.init({str(tmp_path / "r")!r})
repo = Repo.open({str(tmp_path / "r")!r})
assert not any(m.startswith("git_pf.transport") for m in sys.modules), "opened with the transport"
mine = lambda missing: None
repo.store.fetcher = mine
assert not repo.store.has("0" * 64)
assert "git_pf.transport.lazy" in sys.modules
assert type(repo.store.held).__name__ == "HeldObjects" and repo.store.fetcher is mine
other = Repo.open({str(tmp_path / "r")!r})
assert not other.store.has("0" * 64) and type(other.store.fetcher).__name__ == "Fetcher"
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
