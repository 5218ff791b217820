"""The registry of job kinds, as vLLM's benchmarks map a backend name to its request function.

A kind is one module that declares a ``JobKind`` and passes it to ``register``: its
typed config (a frozen dataclass whose defaults are the only copy of them), the form
fields read onto it, how it measures, its chart, its lines in the terminal command,
its summary on the job page, the lab it serves (``bench.kinds.labs.Lab``: the whole lab,
from its title to its checks and prediction target) and its class chart. The form, the
command, the worker, the pages, the exports and the labs ask this registry and never
branch on a kind's name or a lab's number.

Nothing here imports a kind: ``bench.kinds`` imports the built-in ones (each
registers itself), so ``import bench.kinds.registry`` loads them all as well.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from bench import configs
from bench.kinds.checks import Check, disturbed_cells
from bench.kinds.labs import Lab, Text
from bench.plotting import Runs as Runs  # re-exported: what a kind's chart is drawn from
from labapp.said import gettext as _

Widget = Literal["integer", "real", "integers", "reals", "choice", "jsonl"]
SEED_MOST = 1 << 31


class KindConfig(Protocol):
    """What every kind's config dataclass has (besides its own settings, all with defaults)."""

    @property
    def seed(self) -> int: ...

    @property
    def total_requests(self) -> int: ...

    def longest_requests(self) -> list[tuple[str, int]]:
        """(field to blame, prompt + output tokens) of the longest requests known before it runs."""
        ...


Measure = Callable[..., Awaitable[tuple[dict[str, Any], bool]]]  # (config, *, base_url, model, reporter)


@dataclass(frozen=True)
class Field:
    """A setting on the job form and in ``--set KEY=VALUE``; its default is the config dataclass's.

    ``low``/``high`` bound numbers (and each number of a list); ``choices`` are the
    (value, label) pairs of a "choice"; a "jsonl" field is an uploaded custom workload
    stored under ``stores`` as the parsed prompts.
    """

    name: str
    label: Text
    widget: Widget
    low: float = 0
    high: float = 1 << 20
    choices: tuple[tuple[Any, Text], ...] = ()
    help_text: Text = ""
    most: int = 12
    stores: str = ""
    # Shown on the form only while another setting of the same kind has one of these values,
    # e.g. ("mode", ("rate", "ramp")); the value is still read and checked either way.
    when: tuple[str, tuple[str, ...]] | None = None

    @property
    def attribute(self) -> str:
        """The config's attribute the field sets."""
        return self.stores if self.widget == "jsonl" else self.name

    def read(self, raw: dict[str, Any], default: Any) -> Any:
        """The value in ``raw`` (form text or a saved JSON value), else ``default``; ConfigError names the field."""
        name, low, high = self.name, self.low, self.high
        if self.widget == "integer":
            return configs.integer(raw, name, default, int(low), int(high))
        if self.widget == "real":
            return configs.real(raw, name, default, low, high)
        if self.widget == "integers":
            return configs.integers(raw, name, default, int(low), int(high), most=self.most)
        if self.widget == "reals":
            return configs.reals(raw, name, default, low, high, most=self.most)
        if self.widget == "jsonl":
            return configs.custom_from_raw(raw, self.stores) if raw.get(self.stores) else default
        values = {str(value): value for value, _label in self.choices}
        given = raw.get(name)
        if isinstance(given, int) and not isinstance(given, bool):  # a saved config may hold the number itself
            raw = raw | {name: str(given)}
        return values[configs.choice(raw, name, str(default), values)]

    def shown(self, default: Any) -> str:
        """How the form shows ``default``: text that ``read`` turns back into the same value."""
        if self.widget in ("integers", "reals"):
            return ", ".join(_number(value) for value in default)
        if self.widget == "jsonl":
            return ""
        return _number(default) if self.widget in ("integer", "real") else str(default)


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class ClassChart:
    """A class-wide chart over each learner's latest finished job of the kind.

    ``points`` takes [(username, engine URL, results)] and gives JSON-ready data
    (``/classes/<id>/charts.json`` under ``key``); ``figure`` draws it (None: no data).
    """

    key: str
    id: str
    points: Callable[[list[tuple[str, str, dict[str, Any]]]], Any]
    figure: Callable[[Any], dict[str, Any] | None]


def _no_lines(results: dict[str, Any]) -> list[str]:
    return []


def _cell_name(cell: dict[str, Any]) -> str:
    return str(cell.get("cell", ""))


@dataclass(frozen=True)
class JobKind:
    """One kind of benchmark job. ``name`` is what a ``BenchJob`` row stores (at most 16 characters).

    - ``parse`` turns a raw config into the typed one; None reads every field (and
      the seed) onto ``config_type``. ``check_length`` refuses requests longer than
      the engine's ``max_model_len``.
    - ``measure(config, *, base_url, model, reporter)`` gives (results, cancelled).
    - ``chart(runs)`` draws one or more jobs' results; ``summary_template`` is the
      results part of the job page (given ``job`` and ``r``, the results).
    - ``cell_name`` names a cell in a CSV (stable, in English); ``cell_label`` names it on a page,
      in the reader's language (None: the CSV name); ``cell_line`` and ``report_lines`` are the
      terminal command's lines; ``sequential``: one request at a time (a run's
      ``max_concurrency`` is 1 unless the cell says otherwise).
    """

    name: str
    label: Text
    config_type: type[Any]
    fields: tuple[Field, ...]
    measure: Measure
    parse: Callable[[dict[str, Any]], Any] | None = None
    check_length: Callable[[Any, int], None] | None = None
    chart: Callable[[Runs], dict[str, Any]] | None = None
    summary_template: str = ""
    cell_name: Callable[[dict[str, Any]], str] = _cell_name
    cell_label: Callable[[dict[str, Any]], str] | None = None
    cell_line: Callable[[dict[str, Any]], str] | None = None
    report_lines: Callable[[dict[str, Any]], list[str]] = _no_lines
    sequential: bool = True
    lab: Lab | None = None  # the lab it serves, declared in full (``bench.kinds.labs``)
    class_chart: ClassChart | None = None
    # A kind without a lab may still judge its results (shown on the job page): checks(results).
    checks: Callable[[dict[str, Any]], list[Check]] | None = None
    # Refuses a submit on an engine it cannot run from (e.g. too few engines in its pool): ConfigError.
    engines_check: Callable[[str], None] | None = None
    # False: its jobs are made some other way (e.g. read from another tool's file) and never run;
    # the form, the command and ``job_create`` offer only runnable kinds.
    runnable: bool = True
    # True: its owner may delete a job of it (``bench.access.job_to_delete``). A run measured here is kept:
    # a hand-in, the gradebook and a class's charts may stand on it, so only a copy of a file (imported) goes.
    deletable: bool = False
    # A job's own title from its results (e.g. which tool an imported run came from); None: ``label``.
    job_label: Callable[[dict[str, Any]], str] | None = None
    # The routing policies its requests go through, when the run starts vllm-router itself (the
    # run's provenance, ``bench.provenance``): policies(config), comma-separated.
    router_policies: Callable[[Any], str] | None = None
    # The engines those routers stand in front of, from the job's engine address (a database read).
    router_engines: Callable[[str], list[str]] | None = None

    def default(self) -> Any:
        """The config with every default: what an empty form runs."""
        return self.config_type()

    def config(self, raw: dict[str, Any]) -> Any:
        if self.parse is not None:
            return self.parse(raw)
        return self.config_type(**read_fields(self.config_type, self.fields, raw))

    def checked_length(self, config: Any, max_model_len: int) -> None:
        (self.check_length or length_check)(config, max_model_len)

    def saved_config(self, raw: dict[str, Any]) -> Any | None:
        """The typed config of a job's saved settings (``BenchJob.config``); None when they no longer read."""
        try:
            return self.config(raw)
        except configs.ConfigError:
            return None

    def lab_checks(self, results: dict[str, Any], raw: dict[str, Any]) -> list[Check]:
        """The lab's checks of a finished job: its results and its saved settings ``raw``."""
        return self.lab.all_checks(results, self.saved_config(raw)) if self.lab else []

    def own_checks(self, results: dict[str, Any]) -> list[Check]:
        """The kind's own checks of a job's results (a lab's checks are ``lab_checks``)."""
        return self.checks(results) if self.checks is not None else []

    def check_engines(self, engine_url: str) -> None:
        """ConfigError when a job of this kind cannot run from ``engine_url``."""
        if self.engines_check is not None:
            self.engines_check(engine_url)

    def lab_missing(self, results: dict[str, Any], raw: dict[str, Any]) -> list[str]:
        """What a job (its results, its saved settings) lacks of its lab's minimum settings."""
        return self.lab.lacking(results, self.saved_config(raw)) if self.lab else []

    def title(self, results: dict[str, Any]) -> str:
        """A job of this kind as its pages name it, in the reader's language."""
        return self.job_label(results) if self.job_label is not None else str(self.label)

    def shown_cell(self, cell: dict[str, Any]) -> str:
        """A cell's name on a page, in the reader's language."""
        return (self.cell_label or self.cell_name)(cell)

    def disturbed(self, results: dict[str, Any]) -> list[tuple[str, float]]:
        """(cell name, most requests beyond its own) of each cell during which other traffic ran on the engine."""
        return disturbed_cells(results, self.cell_name)


def read_fields(config_type: type[Any], fields: tuple[Field, ...], raw: dict[str, Any]) -> dict[str, Any]:
    """Each field read from ``raw`` with ``config_type``'s default, and the seed: the config's arguments."""
    default = config_type()
    values = {field.attribute: field.read(raw, getattr(default, field.attribute)) for field in fields}
    if hasattr(default, "seed"):
        values["seed"] = configs.integer(raw, "seed", default.seed, 0, SEED_MOST)
    return values


def length_check(config: KindConfig, max_model_len: int) -> None:
    """ConfigError naming the field when one of the config's requests cannot fit the engine."""
    for field_name, tokens in config.longest_requests():
        if tokens > max_model_len:
            raise configs.ConfigError(
                field_name,
                _("요청 하나가 %(tokens)d 토큰(프롬프트 + 출력)으로 엔진의 최대 길이 %(limit)d 토큰을 넘습니다")
                % {"tokens": tokens, "limit": max_model_len},
            )


# --- the registry itself -----------------------------------------------------------------

_KINDS: dict[str, JobKind] = {}


def register(kind: JobKind) -> JobKind:
    """Add a kind (a kind module calls this once at import); a second kind of the same name is refused."""
    if kind.name in _KINDS and _KINDS[kind.name] is not kind:
        raise ValueError(f"a job kind named {kind.name!r} is already registered")
    if not kind.name or len(kind.name) > 16:
        raise ValueError(f"a job kind's name has 1 to 16 characters (BenchJob.kind): {kind.name!r}")
    if kind.lab is not None:
        for other in _KINDS.values():
            if other.name != kind.name and other.lab is not None and kind.lab.number == other.lab.number:
                raise ValueError(f"lab {kind.lab.number} is already served by the job kind {other.name!r}")
            if other.name != kind.name and other.lab is not None and kind.lab.slug == other.lab.slug:
                raise ValueError(f"a lab with the slug {kind.lab.slug!r} is already served by {other.name!r}")
    _KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    _KINDS.pop(name, None)


def find(name: str) -> JobKind | None:
    return _KINDS.get(name)


def get(name: str) -> JobKind:
    """The kind named ``name``; ConfigError on the "kind" field when there is none."""
    kind = _KINDS.get(name)
    if kind is None:
        raise configs.ConfigError("kind", _("알 수 없는 작업 종류: %(kind)s") % {"kind": name})
    return kind


def all_kinds() -> list[JobKind]:
    """Every kind, those serving a lab first in the labs' order, then the others as registered."""
    order = {name: index for index, name in enumerate(_KINDS)}
    return sorted(_KINDS.values(), key=lambda k: (k.lab is None, k.lab.number if k.lab else 0, order[k.name]))


def for_lab(number: int) -> JobKind | None:
    """The kind serving lab ``number`` (None: no such lab)."""
    return next((kind for kind in all_kinds() if kind.lab is not None and kind.lab.number == number), None)


def labs() -> list[tuple[JobKind, Lab]]:
    """(kind, the lab it serves) of every lab, in the labs' order."""
    return [(kind, kind.lab) for kind in all_kinds() if kind.lab is not None]


def key_label(key: str) -> str:
    """What a reader sees for a stored key number: its label in the lab that declares it (the key itself
    when no registered lab does, e.g. a hand-in kept from a lab since changed)."""
    for _kind, lab in labs():
        for number in lab.keys:
            if number.key == key:
                return str(number.label)
    return key


def choices() -> list[tuple[str, Text]]:
    """Every kind a job row may have (``BenchJob.kind``), runnable or not."""
    return [(kind.name, kind.label) for kind in all_kinds()]


def runnable_kinds() -> list[JobKind]:
    """The kinds a person or the command can start (the form's and ``manage.py bench``'s choices)."""
    return [kind for kind in all_kinds() if kind.runnable]


def get_runnable(name: str) -> JobKind:
    """``get``, refusing a kind that is never run (ConfigError on the "kind" field)."""
    kind = get(name)
    if not kind.runnable:
        raise configs.ConfigError("kind", _("이 종류의 작업은 실행할 수 없습니다: %(kind)s") % {"kind": name})
    return kind
