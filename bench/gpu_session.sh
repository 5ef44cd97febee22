#!/usr/bin/env bash
# What a session with a lent GPU runs (an H100 or H200 image with CuPy, PyTorch, pytest-xdist and
# compute-sanitizer), each step under its own time limit so that one slow step still leaves the
# others' results. Usage: bench/gpu_session.sh OUTDIR [STEP ...]; logs and JSON land in OUTDIR.
#   facts     the GPU, the CPU, the compilers and the packages
#   gpu       every test whose id names cuda or gpu (the ones that skip without a GPU), verbose, so
#             that the failing tests' names are in the log even when the step runs out of time
#   memcheck  every example on the device under compute-sanitizer (bench/cuda_sanitize.py)
#   racecheck the same under racecheck (slower)
#   decode    the CUDA bench at T = 1, 16, 64 (cuda_decode.json)
#   prefill   the CUDA bench at T = 4096, 16384 (cuda_prefill.json)
#   tests     the whole suite (the CPU backends on this host's CPU too)
# The default is "facts gpu memcheck decode prefill": about 4 minutes on an H200 with 16 cores.
set -u
out=${1:?usage: bench/gpu_session.sh OUTDIR [STEP ...]}
shift
steps=${*:-facts gpu memcheck decode prefill}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-python3}
log="$out/session.log"

run() {   # run NAME SECONDS COMMAND...: the command's output into the log, its status and time after it
    local name=$1 limit=$2 t0=$SECONDS rc
    shift 2
    echo "=== $name (limit ${limit}s): $*" | tee -a "$log"
    timeout -k 10 "$limit" "$@" >>"$log" 2>&1
    rc=$?
    echo "=== $name: rc=$rc in $((SECONDS - t0))s" | tee -a "$log"
}

for step in $steps; do
  case $step in
    facts) run facts 60 bash -c "nvidia-smi; $py -V; gcc --version | head -1; nvcc --version | tail -2; \
      $py -c 'import cupy, numpy, torch; print(\"cupy\", cupy.__version__, \"numpy\", numpy.__version__, \
\"torch\", torch.__version__); print(cupy.cuda.runtime.getDeviceProperties(0)[\"name\"])'; \
      grep -m1 'model name' /proc/cpuinfo; nproc; grep -o -w 'avx512_bf16\|avx512fp16\|avx512bw\|f16c' \
      /proc/cpuinfo | sort | uniq -c" ;;
    gpu|tests) opts=()   # pytest-xdist and pytest-timeout where installed (the GPU image has both)
      $py -c 'import xdist' 2>/dev/null && opts+=(-n "${WORKERS:-16}")
      $py -c 'import pytest_timeout' 2>/dev/null && opts+=(--timeout 90)
      # gpu: verbose, so that each failure is named as it happens (the summary comes only at the end).
      # Not --dist loadfile: test_cuda_backend.py alone takes most of two minutes on one worker
      if [ "$step" = gpu ]; then opts+=(-v -k "cuda or gpu"); else opts+=(-q); fi
      run "$step" "${TESTS_LIMIT:-240}" "$py" -m pytest -p no:cacheprovider -p no:benchmark "${opts[@]}" \
        --tb=short --durations 15 --junitxml "$out/$step.xml" -rfEs tests ;;
    memcheck) run memcheck "${SAN_LIMIT:-150}" compute-sanitizer --tool memcheck --error-exitcode 99 \
      --log-file "$out/memcheck.log" "$py" bench/cuda_sanitize.py ;;
    racecheck) run racecheck "${SAN_LIMIT:-150}" compute-sanitizer --tool racecheck --error-exitcode 99 \
      --log-file "$out/racecheck.log" "$py" bench/cuda_sanitize.py ;;
    decode) run decode "${BENCH_LIMIT:-150}" "$py" -m ropegen.backends.cuda.bench --repeats 20 \
      -o "$out/cuda_decode.json" --shape T=1 --shape T=16 --shape T=64 ;;
    prefill) run prefill "${BENCH_LIMIT:-150}" "$py" -m ropegen.backends.cuda.bench --repeats 20 \
      -o "$out/cuda_prefill.json" --shape T=4096 --shape T=16384 ;;
    *) echo "unknown step '$step' (facts gpu memcheck racecheck decode prefill tests)"; exit 2 ;;
  esac
done
