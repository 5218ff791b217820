"""The code's shape, read with ``ast``: imports go one way and no function grows past 60 lines unexplained.

- No import cycle among the app modules (``labapp``, ``rag``, ``bench``), imports inside
  functions included (a lazy import is how a cycle hides), and through a package's
  ``__init__`` (importing ``bench.kinds.registry`` from outside ``bench.kinds`` runs
  ``bench/kinds/__init__.py`` first, which imports every kind), except each app's
  ``services`` ⇄ ``tasks`` pair: a service enqueues its task after commit and the
  task calls the service back.
- Layers: ``rag`` (the vLLM boundary, retrieval, chat) imports no ``bench`` and no
  website module; ``bench`` imports no website module. The bottom layer (shared models,
  env, access, sockets, settings) is importable from anywhere. Entry points (views,
  consumers, tasks, commands, urls) may call any app.
- A function over 60 lines carries a comment saying why, with the words "longer than
  60 lines", just above its ``def`` or in its first lines.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ("labapp", "rag", "bench", "lti")
ALLOWED_CYCLES = [{f"{app}.services", f"{app}.tasks"} for app in APPS]
WEBSITE = ("labapp.chapter", "labapp.labs", "labapp.classes", "labapp.status", "labapp.ops", "labapp.urls", "lti")
ENTRY_POINT_PARTS = ("views", "consumers", "tasks", "urls", "asgi", "management", "admin")
MAX_LINES = 60
LONG_MARK = "longer than 60 lines"


@dataclass
class Module:
    name: str
    path: Path
    imports: set[str] = field(default_factory=set)


def _name_of(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def app_modules(root: Path = ROOT, apps: tuple[str, ...] = APPS) -> dict[str, Module]:
    found = {}
    for app in apps:
        for path in sorted((root / app).rglob("*.py")):
            if "migrations" not in path.parts:
                found[_name_of(path, root)] = Module(_name_of(path, root), path)
    for module in found.values():
        module.imports = _imports(module, found)
    return found


def _known(name: str, modules: dict[str, Module]) -> str | None:
    """The app module that ``name`` names or lives in (``bench.kinds.get`` -> ``bench.kinds``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: Module, modules: dict[str, Module]) -> set[str]:
    package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(module.path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            if known := _known(target, modules):
                out |= {known, *_packages_run_first(known, module.name, modules)}
    out.discard(module.name)
    return out


def _packages_run_first(target: str, importer: str, modules: dict[str, Module]) -> set[str]:
    """The packages whose ``__init__`` runs before ``target`` when ``importer`` imports it: every
    package above ``target`` that ``importer`` is not itself inside (those have run already)."""
    parts = target.split(".")
    above = {".".join(parts[:n]) for n in range(1, len(parts))}
    return {name for name in above if name in modules and not importer.startswith(name + ".")}


def import_cycles(modules: dict[str, Module]) -> list[set[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for other in modules[name].imports:
            if other not in index:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == name:
                    break
            if len(group) > 1:
                groups.append(group)

    for name in modules:
        if name not in index:
            visit(name)
    return groups


def test_there_is_no_import_cycle_but_the_services_and_tasks_pairs() -> None:
    cycles = [sorted(group) for group in import_cycles(app_modules()) if group not in ALLOWED_CYCLES]
    assert cycles == []


def test_the_cycle_finder_finds_a_cycle_through_an_import_inside_a_function() -> None:
    modules = {name: Module(name, ROOT) for name in ("bench.a", "bench.b", "bench.c")}
    modules["bench.a"].imports = {"bench.b"}
    modules["bench.b"].imports = {"bench.c"}
    modules["bench.c"].imports = {"bench.a"}
    assert import_cycles(modules) == [{"bench.a", "bench.b", "bench.c"}]
    tree = ast.parse("def f():\n    from bench import jobs\n")
    assert any(isinstance(node, ast.ImportFrom) for node in ast.walk(tree))  # ast.walk reaches function bodies


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_cycle_finder_finds_a_cycle_through_a_packages_init(tmp_path: Path) -> None:
    # As bench.kinds/__init__ imported a kind, which imported bench.charts, which imported bench.kinds.registry:
    # every import names a module, yet importing the registry from outside runs kinds/__init__ first.
    _write(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/charts.py": "from app.kinds.registry import find\n",
            "app/kinds/__init__.py": "from app.kinds import speed\n",
            "app/kinds/registry.py": "def find(): ...\n",
            "app/kinds/speed.py": "from app import charts\nfrom app.kinds import registry\n",
        },
    )
    assert import_cycles(app_modules(tmp_path, ("app",))) == [{"app.kinds", "app.kinds.speed", "app.charts"}]


def test_a_module_importing_its_siblings_inside_its_own_package_is_no_cycle(tmp_path: Path) -> None:
    # kinds/__init__ -> speed -> registry is how a package loads its parts: its __init__ is running already.
    _write(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/plotting.py": "import json\n",
            "app/charts.py": "from app.kinds.registry import find\n",
            "app/kinds/__init__.py": "from app.kinds import speed\n",
            "app/kinds/registry.py": "from app.plotting import json\ndef find(): ...\n",
            "app/kinds/speed.py": "from app import plotting\nfrom app.kinds import registry\n",
        },
    )
    assert import_cycles(app_modules(tmp_path, ("app",))) == []


def _entry_point(name: str) -> bool:
    return any(part in ENTRY_POINT_PARTS or part.startswith("views") for part in name.split("."))


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def layer_violations(modules: dict[str, Module]) -> list[str]:
    found = []
    for module in modules.values():
        if _entry_point(module.name):
            continue
        for target in sorted(module.imports):
            upward = (module.name.startswith("rag") and (target.startswith("bench") or _within(target, WEBSITE))) or (
                module.name.startswith("bench") and _within(target, WEBSITE)
            )
            if upward:
                found.append(f"{module.name} -> {target}")
    return found


def test_imports_go_down_one_way_rag_below_bench_below_the_website() -> None:
    assert layer_violations(app_modules()) == []


def long_functions() -> list[str]:
    found = []
    for module in app_modules().values():
        lines = module.path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if node.end_lineno is None or node.end_lineno - start + 1 <= MAX_LINES:
                continue
            body_start = node.body[0].lineno
            around = lines[max(0, start - 4) : body_start + 4]
            if not any(LONG_MARK in line.lower() for line in around):
                found.append(
                    f"{module.path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - start + 1})"
                )
    return found


def test_no_function_is_over_60_lines_without_a_comment_saying_why() -> None:
    assert long_functions() == []
