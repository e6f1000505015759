"""One target of one trial as a session of steps, so several targets can be timed in turns.

A trial drives every target's session through the same steps: :meth:`TargetSession.start`
(build, place, first call and warm-up), :meth:`~TargetSession.round` repeated until the
target has enough samples, :meth:`~TargetSession.run_scenarios`, and
:meth:`~TargetSession.finish` (correctness, compilation and placement audits, training last
because it changes the weights). Driving all sessions round by round gives the A B A B
interleaving that lets drift in machine speed affect every target alike.

No step raises for problems of the workload or target: the first exception becomes the
session's ``status="error"`` result, with the phase it happened in and its traceback, and the
remaining steps do nothing. Every step returns plain values, so a worker process can run
the session and send them back (:mod:`bakeoff.runner.isolation`).
"""

from __future__ import annotations

import os
import shutil
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from bakeoff.analysis.noise import noise_flags
from bakeoff.checks.base import CheckContext
from bakeoff.checks.registry import guarded, registered_checks
from bakeoff.launch.command import FreshPython
from bakeoff.launch.tempdirs import owned_tempdir
from bakeoff.measure.clock import Clock, PerfClock
from bakeoff.measure.memory import lifetime_peak_rss_bytes, peak_rss_bytes, reset_peak_rss
from bakeoff.measure.timing import enough_samples, warm_calls
from bakeoff.results.librarylog import LibraryLog
from bakeoff.results.values import ErrorInfo, Latency, TargetResult
from bakeoff.runner.capture import Capture
from bakeoff.runner.job import TargetJob, adjustments_for, checked_value, error_checks
from bakeoff.runner.traffic import traffic_for
from bakeoff.scenarios.base import ScenarioContext, ScenarioResult
from bakeoff.scenarios.registry import run_scenario, scenario_named
from bakeoff.scenarios.rounds import FirstRound, align, in_round, merge_rounds, scenario_rounds
from bakeoff.scenarios.single_stream import SingleStream
from bakeoff.target.execute import device_peak_memory, prepare, reset_device_peak_memory, synchronizer
from bakeoff.workload.registry import build_workload

__all__ = ["TargetSession", "run_steps", "run_target"]


def _quiet_third_party() -> None:
    """Silence notices from backend libraries that a user of bakeoff cannot act on.

    OpenVINO probes a dynamo setting that torch deprecated; torch's ONNX exporter notes that
    torchvision's operators are not registered; a pickled pytree spec warns about its own API.
    Everything else is counted in the target's log (:mod:`bakeoff.runner.capture`).
    """
    import logging
    import warnings

    warnings.filterwarnings("ignore", message=r".*inline_inbuilt_nn_modules is deprecated", category=FutureWarning)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)


def _conditions() -> dict[str, Any]:
    """What the machine was like for one round of samples."""
    import psutil
    import torch

    freq = psutil.cpu_freq()
    return {
        "at": round(time.time(), 6),  # wall clock, comparable across worker processes
        "pid": os.getpid(),
        "threads": torch.get_num_threads(),
        "load_1m": round(os.getloadavg()[0], 3),
        "cpu_mhz": round(freq.current, 1) if freq and freq.current else None,
    }


class TargetSession:
    """A target being measured; see the module docstring for the order of steps.

    A target with ``amp`` runs its whole session under ``torch.autocast`` (entered once the
    model is prepared, left when the session closes), because the timing traffic, scenarios and
    checks all call the model themselves. Autocast state is thread-local: every step must run
    on the thread that started the session (a worker's command loop, or the trial's thread).

    What libraries say during the steps (warnings, log records, raw output on file descriptors
    1 and 2) is kept off the terminal and counted per phase into the result's ``log``; the raw
    output goes through files in ``capture_dir`` (a worker's parent names it, to read what a
    worker that died left there), or in a directory of the session's own.
    """

    def __init__(self, job: TargetJob, clock: Clock | None = None, capture_dir: str | None = None) -> None:
        self.job = job
        self.clock = clock or PerfClock()
        self.failed: TargetResult | None = None
        self.timing_done = False
        self._phase = "build"
        self.own_capture_dir = capture_dir is None
        if capture_dir is None:
            capture_dir = str(owned_tempdir("capture"))
        Path(capture_dir).mkdir(parents=True, exist_ok=True)
        self.capture_dir = capture_dir
        self.log = LibraryLog()
        self.capture = Capture(self.log, lambda: self._phase, capture_dir)
        self.phase = "build"
        self.started = time.monotonic()
        self.prepared: Any = None
        self.autocast: Any = None
        self.saved_env: dict[str, str | None] = {}
        self.saved_threads: int | None = None
        self.cold_cache_dir: str | None = None
        self.samples: list[float] = []
        self.traffic: Any = None
        self.rounds: list[dict[str, Any]] = []
        self.timed_s = 0.0
        self.scenario_results: list[ScenarioResult] = []
        self.stream_peak: tuple[int | None, int | None] = (None, None)
        self.compile_snapshot: dict[str, Any] | None = None
        self.build_peak: int | None = None
        target = job.target
        failing = "its not_applicable failed"
        asked = {spec.name for spec in job.checks}
        reasons = {
            c.name: guarded(c, "not_applicable", target, job.is_reference, fallback=failing)
            for c in registered_checks()
            if not getattr(c, "on_request", False) or c.name in asked
        }
        self.checks = [c for c in registered_checks() if c.name in reasons and reasons[c.name] is None]
        self.skipped_checks = {name: why for name, why in reasons.items() if why is not None}
        self.check_failures: list[str] = []

    # -- plumbing --------------------------------------------------------------------------
    @property
    def phase(self) -> str:
        """The part of the session running now (named in an error, and in the log's lines)."""
        return self._phase

    @phase.setter
    def phase(self, value: str) -> None:
        if self.capture.is_active:  # raw output so far belongs to the phase that ends
            self.capture.fold(self._phase)
        self._phase = value

    @contextmanager
    def _step(self) -> Iterator[None]:
        """Run a step's body (callers skip it once the session failed), capturing what libraries
        say; an exception becomes the session's error result."""
        import torch

        try:
            with self.capture.active(), torch.no_grad():
                yield
        except (Exception, SystemExit) as exc:  # a workload's sys.exit() is its failure, not the run's end
            self.failed = self._error(exc)
            self.timing_done = True
            self._close()

    def _error(self, exc: BaseException) -> TargetResult:
        import torch

        text = str(exc).lower()
        oom = isinstance(exc, MemoryError) or "out of memory" in text or "can't allocate memory" in text
        return TargetResult(
            target=self.job.target,
            status="error",
            is_reference=self.job.is_reference,
            checks=error_checks(f"the target failed during {self.phase}", self.job),
            error=ErrorInfo(
                type=type(exc).__name__,
                message=(
                    f"the workload called sys.exit({exc.code!r})"
                    if isinstance(exc, SystemExit)
                    else str(exc).strip()[:2000] or type(exc).__name__
                ),
                category="out_of_memory" if oom else "exception",
                phase=self.phase,
                traceback=traceback.format_exc(),
            ),
            duration_s=time.monotonic() - self.started,
            threads=torch.get_num_threads(),
            adjustments=adjustments_for(self.job.target, self.job.buckets, self.job.env),
            variant=self.job.variant,
            log=self.log.entries(),
        )

    def _close(self) -> None:
        if self.autocast is not None:
            self.autocast.__exit__(None, None, None)
            self.autocast = None
        if self.prepared is not None:
            self.prepared.close()
            self.prepared = None
        for key, value in self.saved_env.items():  # in-process runs must not leak switches to the next target
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self.saved_env = {}
        if self.saved_threads is not None:  # nor the target's thread count to the caller
            import torch

            torch.set_num_threads(self.saved_threads)
            self.saved_threads = None
        if self.cold_cache_dir is not None:  # an empty cache for one target's compiles: not kept
            shutil.rmtree(self.cold_cache_dir, ignore_errors=True)
            self.cold_cache_dir = None
        if self.own_capture_dir:
            shutil.rmtree(self.capture_dir, ignore_errors=True)

    # -- steps -----------------------------------------------------------------------------
    def start(self) -> bool:
        """Build, place and prepare; first call and warm-up (or the profile's first pass).

        Returns whether timing is already complete (it is, for a failed session).
        """
        import torch

        from bakeoff.target.plugins import load_plugins

        job, target = self.job, self.job.target
        self.load_before = os.getloadavg()[0]
        if self.failed is not None:
            return True
        with self._step():
            _quiet_third_party()
            load_plugins()
            if target.effective_threads is not None:
                self.saved_threads = torch.get_num_threads()
                torch.set_num_threads(target.effective_threads)
            self.saved_env = {key: os.environ.get(key) for key, _ in job.env}
            os.environ.update(dict(job.env))
            if job.cold_cache:
                self.saved_env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
                self.cold_cache_dir = str(owned_tempdir("inductor"))
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = self.cold_cache_dir
            # the reference is plain eager CPU: no device map or self-placement applies to it
            self.workload = build_workload(job.workload_spec, device=None if job.is_reference else target.torch_device)
            self.fingerprint, self.native = self.workload.fingerprint, self.workload.dtype  # before casting
            for check in self.checks:
                guarded(check, "setup", target)
            self.phase = "prepare"
            reset_device_peak_memory(target)
            self.build_peak = peak_rss_bytes()  # resets below also reset the kernel's lifetime peak
            reset_peak_rss()
            prepare_start = self.clock.now()
            self.prepared = prepare(self.workload, target)
            self.prepare_ms = (self.clock.now() - prepare_start) * 1e3
            self.sync = synchronizer(target)
            if target.amp is not None:
                self._enter_autocast()
            self.phase = "first call" if not target.is_compiled else "compile and first call"
            self.traffic = traffic_for(job, self.workload, self.prepared)
            seconds, self.warmups, self.settled = self.traffic.start(self.sync, self.clock)
            self.first_call_ms = seconds * 1e3
            self.phase = "timing"
        return self.timing_done

    def _enter_autocast(self) -> None:
        """Autocast on for the rest of the session. Its weight-cast cache stays off: the cache is
        cleared only when the outermost autocast exits, so training steps would reuse casts of
        weights they have since changed. ``torch.compile`` guards on the autocast state, so a
        compiled model traces under it."""
        import torch

        context = torch.autocast(self.job.target.device, dtype=getattr(torch, self.job.target.amp), cache_enabled=False)
        context.__enter__()
        self.autocast = context

    def round(self) -> bool:
        """Time one round (about a tenth of the minimums, or one pass over the profile), after
        the round's warm call(s): in turns, a round starts cold. Their time is kept apart, as the
        round's ``warm_ms``: the round-start penalty, never a sample.

        Returns whether the target now has enough samples.
        """

        job = self.job
        if self.failed is not None:
            return True
        with self._step():
            settings = job.timing
            warm_s = warm_calls(self.traffic.first, self.sync, settings.round_warmup, self.clock)  # a cold start
            block = self.traffic.round(self.sync, self.clock, settings, self.timed_s)
            self.samples.extend(block)
            self.timed_s += sum(block)
            warm = {"warm_ms": warm_s * 1e3} if settings.round_warmup else {}
            self.rounds.append({"samples": len(block), **warm, **_conditions()})
            self.timing_done = enough_samples(len(self.samples), self.timed_s, settings)
            if self.timing_done:
                self.stream_peak = (peak_rss_bytes(), device_peak_memory(job.target))
                # the compilation audit covers the single-stream traffic, not the scenarios' shapes
                summary = self.prepared.compile_summary
                self.compile_snapshot = summary() if summary is not None else None
        return self.timing_done

    def use_scenarios(self, scenarios: tuple[Any, ...]) -> None:
        """Run ``scenarios`` instead of the job's own (a trial sets the reference's server load)."""
        self.job = replace(self.job, scenarios=scenarios)

    def run_scenarios(self, index: int = 0) -> list[ScenarioResult] | None:
        """Round ``index`` of every requested scenario but those that change the model
        (training), which run once, last, in :meth:`finish`. Returns this round's results
        (None once the session has failed); :meth:`finish` merges the rounds."""
        ran = len(self.scenario_results)
        for spec in self.job.scenarios:
            if in_round(spec, index):
                self._scenario(spec)
        return None if self.failed is not None else self.scenario_results[ran:]

    def _scenario(self, spec: Any) -> None:
        if self.failed is not None:
            return
        with self._step():
            self.phase = f"{spec.name} scenario"
            context = ScenarioContext(
                self.workload,
                self.prepared,
                self.job.target,
                self.sync,
                self.clock,
                list(self.samples),
                self.traffic.requests,
                self.job.profile,
            )
            summary = self.prepared.compile_summary
            before = summary()["graphs"] if summary is not None else 0
            result = run_scenario(spec, context)
            if summary is not None and result.status == "ok":
                # new shapes compile here, not in the single-stream audit: the graphs they added
                result.facts["graphs"] = summary()["graphs"] - before
            self.scenario_results.append(result)

    def finish(self) -> TargetResult:
        """Run the applicable checks, the scenarios that change the model (training), then the
        checks that change how it runs (the placement audit), and close."""
        job = self.job
        result = None
        if self.failed is not None:
            return self.failed
        with self._step():
            self.phase = "checks"
            self.scenario_results = merge_rounds(self.scenario_results)
            context, profile_info = self._check_context()
            for check in [c for c in self.checks if not c.last]:
                self.phase = check.phase or check.name
                value = self._run_check(check, context)
                if value is not None:
                    context.results[check.name] = value
            for spec in job.scenarios:  # they change the model: after the checks that judge it
                if scenario_named(spec.name).runs_last:
                    self._scenario(spec)
            context.scenarios = tuple(self.scenario_results)
            for check in [c for c in self.checks if c.last]:  # they change how the model runs
                self.phase = check.phase or check.name
                value = self._run_check(check, context)
                if value is not None:
                    context.results[check.name] = value
            result = self._result(context.results, profile_info)
        self._close()
        assert result is not None or self.failed is not None
        if result is None:
            return self.failed  # type: ignore[return-value]
        return replace(result, log=self.log.entries())  # with the output of its last step

    def _run_check(self, check: Any, context: CheckContext) -> Any:
        """One check's value, read back through its codec as the knowledge base will read it.

        bakeoff's own checks raise into the session (the target failed there). A plugin check
        that raises, or returns something other than its value type, is that check's failure,
        kept as a note: the target keeps every other check's value and its timings.
        """
        asked = next((spec.options for spec in self.job.checks if spec.name == check.name), {})
        context.options = {**{key: option.default for key, option in check.options.items()}, **asked}
        value, failure = checked_value(check, lambda: check.run(context))
        if failure is not None:
            self.check_failures.append(failure)
        return value

    # -- assembling the result ---------------------------------------------------------------
    def _check_context(self) -> tuple[CheckContext, dict | None]:
        """What the checks see: the outputs per input tag (padding removed), a way to call the
        target again on each input, and the single-stream compile record; with the profile's
        run-level summary."""
        job, target = self.job, self.job.target
        profile_info, per_shape = self.traffic.summary(len(self.rounds))
        context = CheckContext(
            job=job,
            target=target,
            prepared=self.prepared,
            outputs=self.traffic.outputs(),
            call=self.traffic.call,
            dtype=target.dtype or self.native,
            native=self.native,
            fingerprint=self.fingerprint,
            settled=self.settled,
            compile_snapshot=self.compile_snapshot,
            profile_shapes=per_shape,
            unsteady=self.traffic.unsteady,
            scenarios=tuple(self.scenario_results),
            processes=FreshPython(),
        )
        return context, profile_info

    def _single_stream(self) -> ScenarioResult:
        # per-shape series for a profile; a single input's samples are the target's latency
        series = {shape: tuple(x * 1e3 for x in v) for shape, v in self.traffic.series().items()}
        return ScenarioResult(
            SingleStream.name,
            "ok",
            options={},
            series=series,
            facts={"samples": len(self.samples), "rounds": len(self.rounds), "timed_seconds": self.timed_s},
            run_seconds=self.timed_s + self.first_call_ms / 1e3,
            peak_host_rss_bytes=self.stream_peak[0],
            device_peak_bytes=self.stream_peak[1],
        )

    def _result(self, checks: dict[str, Any], profile_info: Any) -> TargetResult:
        import torch

        job = self.job
        latency = Latency(tuple(s * 1e3 for s in self.samples))
        notes = []
        if not self.settled:
            notes.append(self.traffic.still_compiling)
        notes += [
            note
            for check in self.checks
            if check.name in checks
            for note in guarded(check, "notes", checks[check.name], fallback=[])
        ]
        notes += self.check_failures
        noise = noise_flags(latency.samples_ms, self.rounds, os.cpu_count() or 1, series=self.traffic.series() or None)
        scenarios = [self._single_stream(), *self.scenario_results]
        order = [s.name for s in job.scenarios]
        scenarios.sort(key=lambda s: order.index(s.name) if s.name in order else -1)
        return TargetResult(
            target=job.target,
            status="ok",
            is_reference=job.is_reference,
            checks=checks,
            skipped_checks=self.skipped_checks,
            latency=latency,
            first_call_ms=self.first_call_ms,
            warmup_calls=self.warmups,
            settled=self.settled,
            # every reset (per scenario) also resets the kernel's lifetime peak: take the largest seen
            peak_host_rss_bytes=max(
                v
                for v in (lifetime_peak_rss_bytes(), self.build_peak, *(s.peak_host_rss_bytes for s in scenarios))
                if v is not None
            ),
            device_peak_bytes=device_peak_memory(job.target),
            threads=torch.get_num_threads(),
            load_average=(self.load_before, os.getloadavg()[0]),
            duration_s=time.monotonic() - self.started,
            notes=tuple(notes),
            adjustments=adjustments_for(job.target, job.buckets, job.env),
            variant=job.variant,
            profile=profile_info,
            prepare_ms=self.prepare_ms,
            scenarios=tuple(scenarios),
            conditions={"rounds": self.rounds},
            noise=tuple(noise),
        )


def run_steps(session: Any) -> TargetResult:
    """Every step of one session (local or in a worker), one after another: its scenarios'
    rounds too, a reference's later rounds at the load its first set."""
    done = session.start()
    while not done:
        done = session.round()
    for index in range(scenario_rounds(session.job.scenarios)):
        ran = session.run_scenarios(index)
        if index == 0 and session.job.is_reference:  # its later rounds at the load its first set
            align(session, FirstRound(ran))
    return session.finish()


def run_target(job: TargetJob, clock: Clock | None = None) -> TargetResult:
    """Run every step of one target in this process, without interleaving."""
    return run_steps(TargetSession(job, clock))
