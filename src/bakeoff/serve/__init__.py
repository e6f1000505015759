"""A running service under its expected traffic: the parts of ``bakeoff serve``.

* :mod:`bakeoff.serve.schedule`: when each request is due (an open-loop arrival schedule:
  Poisson, gamma burstiness, constant, or a recorded trace at its own timestamps, scalable);
* :mod:`bakeoff.serve.traffic`: the request bodies, from a JSONL file (or a recorded trace with
  its own send times);
* :mod:`bakeoff.serve.load`: sending requests on that schedule to an HTTP service and timing
  each from its *scheduled* send (no coordinated omission) and from its actual send, with the
  client's own dispatch lag, which says whether the schedule was kept.
"""
