#!/bin/bash
# Every device check in one run (a GPU lease is short), each under its own time limit; each
# check's JSON and log go to $OUT (the device tool's folder; ./device-out elsewhere).
#
#   bash benchmarks/device/run_all.sh
#
# On a bare GPU image: Python packages fleetctl needs and the image lacks come as wheels in
# .whl/ (installed into /tmp/site), and iproute2 as Debian packages in .debs/ (unpacked into
# /tmp/debroot, run through wrappers with their own library path, so nothing else loads them).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}

if compgen -G ".whl/*.whl" >/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if ! command -v ip >/dev/null && compgen -G ".debs/*.deb" >/dev/null; then
    mkdir -p /tmp/debroot /tmp/debbin
    for f in .debs/*.deb; do dpkg -x "$f" /tmp/debroot; done
    libs=/tmp/debroot/usr/lib/x86_64-linux-gnu:/tmp/debroot/lib/x86_64-linux-gnu
    for tool in ip nft; do
        bin=$(ls /tmp/debroot/{bin,sbin,usr/bin,usr/sbin}/$tool 2>/dev/null | head -1)
        [ -n "$bin" ] || continue
        printf '#!/bin/sh\nexec /lib64/ld-linux-x86-64.so.2 --library-path %s %s "$@"\n' "$libs" "$bin" > /tmp/debbin/$tool
        chmod +x /tmp/debbin/$tool
    done
    export PATH=/tmp/debbin:$PATH
fi

{
    date -u; uname -r; nvidia-smi -L
    $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
    for tool in ip nft gcc make dpkg; do echo "$tool: $(command -v $tool)"; done
    ip -V
} > "$OUT/env.txt" 2>&1

make -s -C nccl_plugin > "$OUT/plugin_build.log" 2>&1 || echo "plugin build failed" >> "$OUT/env.txt"

export PYTHONUNBUFFERED=1
timeout 240 $PY benchmarks/device/inprocess_nccl.py --size-mb 1024 --cycles 3 --steps 200 \
    > "$OUT/inprocess_nccl.json" 2> "$OUT/inprocess_nccl.log"
echo "inprocess_nccl exit $?" >> "$OUT/env.txt"
timeout 120 $PY benchmarks/device/nccl_abort_probe.py --variants thread-pg-kept,thread-pg --timeout 40 \
    > "$OUT/nccl_abort_probe.json" 2> "$OUT/nccl_abort_probe.log"
echo "nccl_abort_probe exit $?" >> "$OUT/env.txt"
timeout 150 $PY benchmarks/device/nccl_failover_allreduce.py --seconds 20 --size-mb 64 \
    > "$OUT/nccl_failover_allreduce.json" 2> "$OUT/nccl_failover_allreduce.log"
echo "nccl_failover_allreduce exit $?" >> "$OUT/env.txt"
cat "$OUT/env.txt" "$OUT/inprocess_nccl.json" "$OUT/nccl_abort_probe.json" "$OUT/nccl_failover_allreduce.json"
