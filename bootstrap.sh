#!/usr/bin/env bash
# Set up ./.venv with bakeoff and its test tools. Safe to run again (it only adds what is missing).
#
# By default it installs the CPU build of PyTorch (torch==2.13.0). On a machine with an
# accelerator, install that accelerator's torch build into .venv yourself first and run
#   BAKEOFF_TORCH=skip ./bootstrap.sh
# or name another requirement, e.g. BAKEOFF_TORCH="torch==2.13.0+cu128".
set -euo pipefail
cd "$(dirname "$0")"
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
torch_req=${BAKEOFF_TORCH:-torch==2.13.0}
if [ "$torch_req" != "skip" ]; then
    "${pip[@]}" "$torch_req"
fi
"${pip[@]}" -e ".[test]"
# bakeoff's bytecode, written now: an editable install writes none, and where the environment
# keeps Python from writing it at import (PYTHONDONTWRITEBYTECODE, set in many images) every
# process would compile bakeoff's modules from their source again (a speed-up only: a file it
# cannot compile is compiled, or refused, at import as before)
.venv/bin/python -m compileall -q -j0 src tests >/dev/null 2>&1 || true
