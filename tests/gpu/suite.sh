#!/usr/bin/env bash
# The GPU suite on a bare GPU machine (see README, "GPU suite").
#   bash tests/gpu/suite.sh [pytest args...]      default: every test under tests/gpu; one
#                                                 device call holds one part: tests/gpu --gpu-part N
#   bash tests/gpu/suite.sh --bench SCRIPT [args]  only the set-up (and the service's wheels from
#                                                 .whl-svc/ where carried), then that bench script
# Installs the carried wheels (.whl/, ignored by git) into /opt/kg-site, prints the GPU's
# identity, runs the GPU tests, then the speedup benchmark when it exists and the fidelity bench
# when .corpus/ was carried (KG_SKIP_BENCH=1: neither; KG_FIDELITY_ONLY=1: the fidelity bench only).
# Logs go to $OUT (the device tool's output folder) or .gpu-out/.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/.gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /opt/kg-site .whl/*.whl || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/opt/kg-site:$PWD
else
  export PYTHONPATH=$PWD
fi
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,temperature.gpu \
  --format=csv | tee "$OUT/gpu.txt"
nvcc --version | tail -n 2 | tee -a "$OUT/gpu.txt"
# The grader drops submitted code to the user "nobody": it must reach the project code,
# the carried packages and the GPU. Where it cannot, say so and sandbox without the uid drop.
chmod -R o+rX "$PWD" /opt/kg-site 2>/dev/null
d=$PWD; while [ "$d" != / ]; do chmod o+x "$d"; d=$(dirname "$d"); done
if ! python3 -c "import os; os.setgid(65534); os.setuid(65534); import sys; sys.path[:0]=['$PWD']; import torch, worker.gpu.child; assert torch.cuda.is_available()" 2>"$OUT/nobody-probe.txt"; then
  echo "WARNING: 'nobody' cannot use the GPU or the code here; sandboxing without the uid drop" | tee -a "$OUT/gpu.txt"
  tail -3 "$OUT/nobody-probe.txt"
  export KG_SANDBOX_USER=
fi
if [ "${1:-}" = --bench ]; then
  shift
  # The service's own packages (.whl-svc/, ignored by git: cp312 wheels of pyproject's
  # dependencies) for the benches that start it, e.g. bench/capacity_check.py with real grades.
  if compgen -G ".whl-svc/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /opt/kg-svc .whl-svc/*.whl || { echo "service wheel install failed"; exit 1; }
    export PYTHONPATH=$PYTHONPATH:/opt/kg-svc
  fi
  python3 "$@" 2>&1 | tee "$OUT/$(basename "$1" .py).txt"
  exit "${PIPESTATUS[0]}"
fi
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(tests/gpu)
python3 -m pytest -p no:cacheprovider -q -rA --durations=20 "${args[@]}" 2>&1 | tee "$OUT/pytest.log"
status=${PIPESTATUS[0]}
if [ "${KG_SKIP_BENCH:-0}" != 1 ]; then
  if [ "${KG_FIDELITY_ONLY:-0}" != 1 ] && [ -f bench/hw4_speedups.py ]; then
    python3 bench/hw4_speedups.py 2>&1 | tee "$OUT/speedups.txt"
  fi
  # The course harness vs kernelgrade on the development corpus, when it was carried along
  # (.corpus/ is ignored by git). KG_FIDELITY_ARGS: its options, e.g. "--problems 1.1,1.2,2.1,2.2".
  if [ -d .corpus/zips ] && [ -d .corpus/official ] && [ -f bench/fidelity.py ]; then
    # shellcheck disable=SC2086
    python3 bench/fidelity.py ${KG_FIDELITY_ARGS:-} 2>&1 | tee "$OUT/fidelity.txt"
  fi
fi
exit "$status"
