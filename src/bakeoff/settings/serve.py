"""``bakeoff serve``'s settings, each written once: its keyword, flag, default, check and help.

:data:`SERVE_OPTIONS` is the table; ``bakeoff serve`` builds its options from it,
:func:`bakeoff.api.serve_service` takes its defaults from it, and
:meth:`ServeSettings.from_options` is the one validating constructor of their form; what needs
the service layer above (the traffic file's lines, the arrival schedule, the objectives, the
comparison function's import) is read by :func:`bakeoff.runner.serve.serve_service` before any
service starts. A service run stores :func:`run_settings` (the settings, with the command and
the reference the run resolved).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from bakeoff.analysis.cost import parse_prices
from bakeoff.errors import SpecError
from bakeoff.settings.bounds import SEED, TIMEOUT, WEEK_S, Bounds
from bakeoff.settings.option import Option, check_device_map, check_reference_device, number_check, read_options, texts

__all__ = ["EXAMPLE_TRAFFIC", "SERVE_OPTIONS", "ServeSettings", "run_settings", "traffic_path"]

#: ``--traffic example``: the requests of the bundled example service.
EXAMPLE_TRAFFIC = "example"
_RATE = Bounds(float, 0.0, 1e6, 20.0, low_open=True, unit="of requests per second")
_SPAN = Bounds(float, 0.0, WEEK_S, 30.0, low_open=True, unit="of seconds")
_WARMUP = Bounds(int, 0, 1_000_000, 16)
_STEPS = Bounds(int, 1, 30, 8)
_COLD = Bounds(float, 0.0, 3600.0, 10.0, unit="of seconds")
_CLIENTS = Bounds(int, 1, 64, 1)
_HEADROOM = Bounds(float, 0.0, 10.0, 0.2)
_DTYPES = ("float32", "float64", "bfloat16", "float16")


@dataclass(frozen=True)
class ServeSettings:
    """How a service is measured under ``bakeoff serve`` (see :data:`SERVE_OPTIONS`)."""

    reference: str | None = None
    map_devices: tuple[str, ...] = ("cuda",)
    traffic: str = EXAMPLE_TRAFFIC
    rate: float = 10.0
    arrivals: str = "poisson"
    duration_s: float = 30.0
    warmup: int = 16
    cold_s: float = 10.0
    clients: int = 1
    slo: tuple[str, ...] = ()
    health: str = "/health"
    path: str = "/generate"
    dtype: str = "float32"
    compare: str = ""
    audit: bool = True
    search: bool = False
    search_steps: int = 8
    peak: float | None = None
    headroom: float = 0.2
    prices: tuple[str, ...] = ()
    min_duration_s: float = 10.0
    start_timeout_s: float = 120.0
    request_timeout_s: float = 30.0
    seed: int = 0

    @property
    def sources(self) -> list[str]:
        """The device types the service names that are remapped (``cuda``)."""
        return [entry.partition("=")[0].strip() for entry in self.map_devices]

    @classmethod
    def from_options(cls, **given: Any) -> ServeSettings:
        """The settings for :func:`bakeoff.api.serve_service`'s keywords, each checked in the
        order of :data:`SERVE_OPTIONS`.

        Raises:
            SpecError: a value out of range or malformed.
            TypeError: a keyword that is not a setting.
        """
        values = read_options(SERVE_OPTIONS, given, "serve setting")
        if (values["search"] or values["peak"] is not None) and not values["slo"]:
            flag = "--peak" if values["peak"] is not None else "--search"
            raise SpecError(f"{flag} needs an objective to search within", hint="add --slo, e.g. --slo 'p90<=300ms'")
        return cls(**values)

    @property
    def searches(self) -> bool:
        """Whether the highest rate within the objectives is searched (``--search``, or ``--peak``)."""
        return self.search or self.peak is not None

    def options(self) -> dict[str, Any]:
        """The keywords that give these settings again."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_run(cls, settings: Mapping[str, Any]) -> ServeSettings:
        """The settings a stored service run's ``settings`` (:func:`run_settings`) ask for,
        checked like user input.

        Raises:
            SpecError: a stored value that is no longer valid input.
        """
        stored = settings.get("serve") or {}
        given = {f.name: stored[f.name] for f in fields(cls) if f.name in stored and f.name != "reference"}
        return cls.from_options(**given, reference=settings.get("reference"))


def traffic_path(traffic: str) -> Path:
    """The file ``--traffic`` names (``example``: the bundled example service's requests)."""
    if traffic == EXAMPLE_TRAFFIC:
        return Path(__file__).resolve().parents[1] / "examples" / "tiny_lm_requests.jsonl"
    return Path(traffic)


def run_settings(settings: ServeSettings, *, command: str, reference: str) -> dict[str, Any]:
    """What a service run stores as its ``settings``: the ``reference`` it ran on and, under
    ``serve``, the command and every setting (the traffic file by its absolute path, so that a
    ``rerun`` from elsewhere finds it)."""
    asked = {k: v for k, v in settings.options().items() if k != "reference"}
    if asked["traffic"] != EXAMPLE_TRAFFIC:
        asked["traffic"] = str(Path(asked["traffic"]).resolve())
    stored = {"reference": reference, "reference_added": True, "serve": {"command": command, **asked}}
    if settings.prices:  # where the decision reads a run's prices, as a trial's
        stored["prices"] = list(settings.prices)
    return stored


# -- the checks -------------------------------------------------------------------------------


def _check_traffic(value: str, given: Mapping[str, Any]) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError("--traffic names no file", hint="a JSONL file of request bodies, or example")
    return value


def _rate_check(flag: str) -> Any:
    def check(value: Any, given: Mapping[str, Any]) -> float:
        text = str(value).strip().removesuffix("/s") if isinstance(value, str) else value
        try:
            number = float(text)
        except (TypeError, ValueError):
            raise SpecError(f"{flag} {value!r}", hint=f"requests per second, e.g. {flag} 20/s") from None
        return number_check(_RATE, flag)(number, given)

    return check


_check_rate = _rate_check("--rate")


def _check_slo(value: str | Iterable[str], given: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(part.strip() for text in texts(value) for part in text.split(",") if part.strip())


def _check_path(flag: str) -> Any:
    def check(value: str, given: Mapping[str, Any]) -> str:
        if not isinstance(value, str) or not (value.startswith("/") or value.startswith(("http://", "https://"))):
            example = "/health" if flag == "--health" else "/generate"
            raise SpecError(f"{flag} {value!r} is not a path on the service (it starts with /) or a URL",
                            hint=f"e.g. {flag} {example}")  # fmt: skip
        return value

    return check


def _check_peak(value: Any, given: Mapping[str, Any]) -> float | None:
    return None if value is None else _rate_check("--peak")(value, given)


def _check_headroom(value: Any, given: Mapping[str, Any]) -> float:
    text = str(value).strip()
    try:
        share = float(text.removesuffix("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise SpecError(f"--headroom {value!r}", hint="a share above the peak to plan for, e.g. 20% or 0.2") from None
    return number_check(_HEADROOM, "--headroom")(share, given)


def _check_prices(value: str | Iterable[str], given: Mapping[str, Any]) -> tuple[str, ...]:
    found = tuple(texts(value))
    parse_prices(found)  # refused as written
    return found


def _check_compare(value: str, given: Mapping[str, Any]) -> str:
    module, sep, function = value.partition(":")
    if value and not (sep and all(p.isidentifier() for p in module.split(".")) and function.isidentifier()):
        raise SpecError(f"--compare {value!r}", hint="MODULE:FUNCTION, e.g. --compare my_checks:same_answer")
    return value


_DEFAULT = ServeSettings()

#: Every setting of ``bakeoff serve``, in the order its value is checked.
SERVE_OPTIONS: dict[str, Option] = {
    option.keyword: option
    for option in (
        Option(
            "reference",
            "--reference",
            _DEFAULT.reference,
            "Where the reference service runs [default: cpu, remapped like the targets].",
            check_reference_device,
            metavar="DEVICE",
            example="cpu",
        ),
        Option(
            "map_devices",
            "--map",
            _DEFAULT.map_devices,
            "The device types the service names that are remapped to each target's (repeatable).",
            check_device_map,
            metavar="DEVICE",
            multiple=True,
            example=["xpu"],
        ),
        Option(
            "traffic",
            "--traffic",
            _DEFAULT.traffic,
            "The requests: a JSONL file of request bodies (cycled), or a recorded trace whose lines are "
            '{"at": SECONDS, "body": ...}; example: the bundled example service\'s.',
            _check_traffic,
            metavar="FILE",
            example="requests.jsonl",
        ),
        Option(
            "rate",
            "--rate",
            _DEFAULT.rate,
            "The offered load, requests per second (20 or 20/s); a trace is scaled to it.",
            _check_rate,
            metavar="RATE",
            example=20.0,
        ),
        Option(
            "arrivals",
            "--arrivals",
            _DEFAULT.arrivals,
            "The arrival schedule: poisson, gamma?cv=2 (bursts), constant.",
            None,
            metavar="SCHEDULE",
            example="constant",
        ),
        Option(
            "duration_s",
            "--duration",
            _DEFAULT.duration_s,
            "Seconds of measured traffic (its requests: rate x duration) after the warm-up.",
            number_check(_SPAN, "--duration"),
            bounds=_SPAN,
            metavar="SECONDS",
            example=12.0,
        ),
        Option(
            "warmup",
            "--warmup",
            _DEFAULT.warmup,
            "Requests sent one after another before the measured traffic, not timed.",
            number_check(_WARMUP, "--warmup"),
            bounds=_WARMUP,
            metavar="N",
            example=4,
        ),
        Option(
            "cold_s",
            "--cold",
            _DEFAULT.cold_s,
            "Seconds of traffic sent to each fresh replica as soon as it is healthy, before its warm-up, "
            "at --rate: how many requests met every objective there, against the warm run (a scale-out "
            "event: first shapes compile, caches are empty); 0: none.",
            number_check(_COLD, "--cold"),
            bounds=_COLD,
            metavar="SECONDS",
            example=5.0,
        ),
        Option(
            "clients",
            "--clients",
            _DEFAULT.clients,
            "Client processes that share the schedule (each sends every N-th request): for rates one "
            "client process cannot send on time (its dispatch lag is reported either way).",
            number_check(_CLIENTS, "--clients"),
            bounds=_CLIENTS,
            metavar="N",
            example=2,
        ),
        Option(
            "slo",
            "--slo",
            _DEFAULT.slo,
            "An objective, judged with its interval (repeatable or comma-separated): p99<=300ms, "
            "error_rate<=1%, goodput>=20/s; for a streamed answer (server-sent events) ttft_p90<=200ms "
            "(time to first token) and tpot_p50<=50ms (per output token after it).",
            _check_slo,
            metavar="OBJECTIVE",
            multiple=True,
            example=["p99<=300ms"],
        ),
        Option(
            "health",
            "--health",
            _DEFAULT.health,
            "The health URL's path (GET, 2xx when ready).",
            _check_path("--health"),
            metavar="PATH",
            example="/ready",
        ),
        Option(
            "path",
            "--path",
            _DEFAULT.path,
            "The path each request is POSTed to.",
            _check_path("--path"),
            metavar="PATH",
            example="/v1/generate",
        ),
        Option(
            "dtype",
            "--dtype",
            _DEFAULT.dtype,
            "The dtype of the numbers in the responses: their tolerance when compared with the reference's.",
            choices=_DTYPES,
            example="bfloat16",
        ),
        Option(
            "compare",
            "--compare",
            _DEFAULT.compare,
            "A function MODULE:FUNCTION(reference_body, target_body) -> bool deciding whether two "
            "responses agree [default: numbers within the dtype's tolerance, the rest exactly].",
            _check_compare,
            metavar="MODULE:FUNCTION",
            example="my_checks:same_answer",
        ),
        Option(
            "audit",
            "--no-audit",
            _DEFAULT.audit,
            "Audit where each non-CPU target's work ran, on a start of the service of its own with the "
            "warm-up requests (the measured start runs unaudited); off leaves placement 'not audited'.",
            flag_help="Do not audit where each target's work ran (one start of the service fewer per target).",
            example=False,
        ),
        Option(
            "search",
            "--search",
            _DEFAULT.search,
            "Search the highest rate within the objectives on the measured start, after its traffic: "
            "doubling from --rate while every objective is met, halving while one is not, then bisecting; "
            "each step judged on its own, and a step that cannot decide ends the search (needs --slo).",
            flag_help="Search the highest rate within the objectives (needs --slo).",
            example=True,
        ),
        Option(
            "search_steps",
            "--search-steps",
            _DEFAULT.search_steps,
            "The most load runs the search makes.",
            number_check(_STEPS, "--search-steps"),
            bounds=_STEPS,
            example=4,
        ),
        Option(
            "peak",
            "--peak",
            _DEFAULT.peak,
            "The peak rate to plan replicas for, e.g. 400/s: the replicas it needs with --headroom, "
            "from the searched rate (implies --search).",
            _check_peak,
            metavar="RATE",
            example=400.0,
        ),
        Option(
            "headroom",
            "--headroom",
            _DEFAULT.headroom,
            "How far above the peak the plan provisions, e.g. 20% or 0.2: replicas for the peak x 1.2.",
            _check_headroom,
            metavar="SHARE",
            example=0.5,
        ),
        Option(
            "prices",
            "--price",
            _DEFAULT.prices,
            "What an hour of a replica costs, by target or device: 'neuron=$1.34/h' (repeatable): the "
            "decision ranks by cost per million requests at the searched rate, and the plan costs a month.",
            _check_prices,
            metavar="TARGET=PRICE/h",
            example=["cpu=0.34/h"],
            multiple=True,
        ),
        Option(
            "min_duration_s",
            "--min-duration",
            _DEFAULT.min_duration_s,
            "The shortest measured traffic whose objectives are judged; a run shorter, or of fewer than "
            "100 requests, is not judged.",
            number_check(_SPAN, "--min-duration"),
            bounds=_SPAN,
            metavar="SECONDS",
            example=5.0,
        ),
        Option(
            "start_timeout_s",
            "--start-timeout",
            _DEFAULT.start_timeout_s,
            "Seconds a service may take from its start to a healthy answer.",
            number_check(TIMEOUT, "--start-timeout"),
            bounds=TIMEOUT,
            example=60.0,
        ),
        Option(
            "request_timeout_s",
            "--request-timeout",
            _DEFAULT.request_timeout_s,
            "Seconds a request may wait for its whole answer (then an error, and slower than any objective).",
            number_check(TIMEOUT, "--request-timeout"),
            bounds=TIMEOUT,
            example=10.0,
        ),
        Option(
            "seed",
            "--seed",
            _DEFAULT.seed,
            "Seed of the arrival schedule.",
            number_check(SEED, "--seed"),
            bounds=SEED,
            example=7,
        ),
    )
}
