#!/usr/bin/env bash
# The Devito side of benchmarks/bench_stencils.py: OpenMPI from Debian's packages and a venv with Devito 4.8.23
# and mpi4py (Devito and MPI are for this benchmark only, not for the tests).
#   bash benchmarks/devito_setup.sh /tmp/devito-venv
set -euo pipefail
venv=${1:-/tmp/devito-venv}
if ! command -v mpirun >/dev/null; then
  apt-get install -y -q openmpi-bin libopenmpi-dev
fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q devito==4.8.23 mpi4py
"$venv/bin/python" -c "import devito, mpi4py; print('devito', devito.__version__, 'mpi4py', mpi4py.__version__)"
