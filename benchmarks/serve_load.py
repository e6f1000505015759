"""Can the load generator keep its schedule? Rates against a no-op HTTP server, with its own lag.

For each rate, ``--seconds`` of Poisson arrivals are sent to a no-op aiohttp server in another
process (``tests/fixtures/serve_app.py`` with no service time: it answers at once) by
:func:`bakeoff.serve.load.send_on_schedule`. Printed per rate: the rate achieved, the client's
dispatch lag (sent - planned) at p50 and p99, the latency from the send at p50 and p99 (the HTTP
round trip: the generator's per-request overhead with the server's), and whether the run kept its
schedule by the generator's own rule (against a no-op server it cannot: its answers take less
than the lag). The reference, measured in the same run: plain ``asyncio.sleep`` pacing of the
same schedule with no request (the least lag any sleep-paced client can have here); the
generator's p99 lag is given against it.

With ``--clients N`` the schedule is dealt between N client processes (``bakeoff serve
--clients``), timed on one shared start.

Usage: .venv/bin/python benchmarks/serve_load.py [--rates 200,500,1000,2000] [--seconds 5] [--clients N] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path

from bakeoff.serve.load import send_on_schedule
from bakeoff.serve.schedule import Schedule
from bakeoff.stats import percentile

#: The tests' single-server service, here with no service time: it answers at once.
SERVER = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "serve_app.py"


def sleep_lag(times: list[float]) -> list[float]:
    """The reference: each planned time slept to with asyncio.sleep, nothing sent; the lags."""

    async def pace() -> list[float]:
        start, lags = time.perf_counter(), []
        for planned in times:
            wait = planned - (time.perf_counter() - start)
            if wait > 0:
                await asyncio.sleep(wait)
            lags.append(time.perf_counter() - start - planned)
        return lags

    return asyncio.run(pace())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="200,500,1000,2000")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=1, help="client processes sharing each schedule")
    parser.add_argument("--quick", action="store_true", help="two short rates (a smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.rates, args.seconds = "100,500", 1.0
    server = subprocess.Popen([sys.executable, str(SERVER), "--service-ms", "0"], stdout=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{int(server.stdout.readline())}/"
        print(f"{'rate/s':>7} {'achieved':>9} {'lag p50':>8} {'lag p99':>8} {'sleep p99':>9} {'x sleep':>7} "
              f"{'send p50':>9} {'send p99':>9} {'errors':>6} kept")  # fmt: skip
        for rate in (float(r) for r in args.rates.split(",")):
            count = max(2, int(rate * args.seconds))
            times = Schedule("poisson").times(rate, count, seed=1)
            reference = sleep_lag(times)
            run = send_on_schedule(url, [{}] * count, times, timeout_s=30, clients=args.clients)
            lags = [r.lag_s for r in run.requests]
            sends = run.latencies("send")
            last = max(r.sent for r in run.requests)
            achieved = count / last if last > 0 else float("nan")
            ratio = percentile(lags, 99) / max(percentile(reference, 99), 1e-9)
            print(
                f"{rate:7.0f} {achieved:9.0f} {percentile(lags, 50) * 1e3:6.2f}ms {percentile(lags, 99) * 1e3:6.2f}ms "
                f"{percentile(reference, 99) * 1e3:7.2f}ms {ratio:6.2f}x "
                f"{percentile(sends, 50) * 1e3:7.2f}ms {percentile(sends, 99) * 1e3:7.2f}ms "
                f"{sum(run.errors().values()):6d} {'yes' if run.kept_schedule else 'NO'}"
            )
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
