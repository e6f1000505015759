"""A running service under its expected traffic: the parts of ``bakeoff serve``.

* :mod:`bakeoff.serve.schedule`: when each request is due (an open-loop arrival schedule:
  Poisson, gamma burstiness, constant, or a recorded trace at its own timestamps, scalable);
* :mod:`bakeoff.serve.traffic`: the request bodies, from a JSONL file (or a recorded trace with
  its own send times);
* :mod:`bakeoff.serve.load`: sending requests on that schedule to an HTTP service and timing
  each from its *scheduled* send (no coordinated omission) and from its actual send, with the
  client's own dispatch lag, which says whether the schedule was kept;
* :mod:`bakeoff.serve.responses`: each request's response on the target against the reference
  service's (numbers within the dtype's allclose tolerance, integers, text and keys exactly,
  near ties in generated tokens, or a user's function), the first differing requests named;
* :mod:`bakeoff.serve.objectives`: a service's objectives (``p99<=300ms``, ``error_rate<=1%``,
  ``goodput>=20/s``) judged on one load run: percentiles with correlation-aware intervals, errors,
  goodput, and validity (duration, request count, dispatch lag, enough requests to claim a tail);
* :mod:`bakeoff.serve.address`: the command line with ``{port}`` and ``{device}`` filled in, the
  port, the base and health URLs, one probe of the health URL;
* :mod:`bakeoff.serve.service`: the service's process from its start to its stop: its device
  remapped as ``bakeoff exec`` remaps a script's Python children, its wait for the health URL
  (``ready_s``: a cold replica's start), and its lifecycle faults as values (crash, timeout,
  port in use, leftover processes);
* :mod:`bakeoff.serve.keeper`: the process between bakeoff and the service, which stops the
  service's process group and every process that left it when bakeoff asks, exits or is killed.
"""
