#!/usr/bin/env bash
# Real-GPU check of remotekit/remote/sysinfo.py, run by hand on a machine with an NVIDIA driver.
#
#   bash tests/device/gpu_real_check.sh            # the machine's python3
#   PYTHON=/opt/venv/bin/python bash tests/device/gpu_real_check.sh
#
# No sshd, no remotekit install: it runs the shipped script directly, as the target would,
# prints every record, and checks what the fake nvidia-smi cannot prove:
#   - every stdout line is a JSON record with a "type", the last one "done";
#   - `gpu` runs (exit 0 or 1), and reports one "gpu" record per line of `nvidia-smi -L`,
#     each with an index, a uuid matching -L, a name and a memory total;
#   - torch, where it imports with CUDA and CUDA_VISIBLE_DEVICES is unset, sees the same count;
#   - `env` and `procs` run (exit 0 or 1).
# Exit status: 0 all checks passed, 1 a check failed.
set -u

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
script="$root/remotekit/remote/sysinfo.py"

failed=0
for cmd in gpu env procs; do
    echo
    echo "== sysinfo.py $cmd"
    "$py" "$script" "$cmd" >"$out/$cmd.jsonl" 2>"$out/$cmd.err"
    echo "$?" >"$out/$cmd.rc"
    cat "$out/$cmd.jsonl"
    if [ -s "$out/$cmd.err" ]; then
        echo "-- stderr:"
        sed 's/^/  /' "$out/$cmd.err"
    fi
    echo "== exit $(cat "$out/$cmd.rc")"
done

echo
"$py" - "$out" <<'EOF' || failed=1
import json
import os
import re
import sys

out = sys.argv[1]
problems = []


def records(cmd):
    recs = []
    with open(os.path.join(out, cmd + ".jsonl")) as f:
        for n, line in enumerate(f, 1):
            try:
                rec = json.loads(line)
            except ValueError:
                problems.append("%s: line %d is not JSON: %r" % (cmd, n, line[:120]))
                continue
            if not isinstance(rec, dict) or "type" not in rec:
                problems.append("%s: line %d has no type: %r" % (cmd, n, line[:120]))
            else:
                recs.append(rec)
    rc = int(open(os.path.join(out, cmd + ".rc")).read())
    if not recs or recs[-1]["type"] != "done":
        problems.append("%s: the last record is not 'done'" % cmd)
    elif recs[-1]["exit_code"] != rc:
        problems.append("%s: done says %s, the process exited %d" % (cmd, recs[-1]["exit_code"], rc))
    if rc not in (0, 1):
        problems.append("%s: exit %d (could not run): %s" % (
            cmd, rc, [r["message"] for r in recs if r["type"] == "error"]))
    return recs


gpu = records("gpu")
listing = open(os.path.join(out, "L")).read()
uuids = re.findall(r"^GPU (\d+): .* \(UUID: (GPU-[0-9a-f-]+)\)", listing, re.M)
gpus = [r for r in gpu if r["type"] == "gpu"]
if len(gpus) != len(uuids):
    problems.append("gpu: %d gpu records, nvidia-smi -L lists %d" % (len(gpus), len(uuids)))
for g in gpus:
    for key in ("index", "uuid", "name", "memory_total_mib"):
        if g.get(key) is None:
            problems.append("gpu %s: %s is missing" % (g.get("index"), key))
    if (str(g["index"]), g["uuid"]) not in uuids:
        problems.append("gpu %s: uuid %s is not in nvidia-smi -L" % (g["index"], g["uuid"]))
    print("GPU %s %s: %s C, %s/%s MiB, %s/%s W, SM %s MHz, throttle %s, ECC %s/%s" % (
        g["index"], g["name"], g["temperature_c"], g["memory_used_mib"], g["memory_total_mib"],
        g["power_draw_w"], g["power_limit_w"], g["clocks_sm_mhz"], g["throttle_reasons"],
        g["ecc_uncorrected_volatile"], g["ecc_uncorrected_aggregate"]))
torch = [r for r in gpu if r["type"] == "torch"]
if torch and torch[0]["cuda_available"] and "CUDA_VISIBLE_DEVICES" not in os.environ:
    if torch[0]["device_count"] != len(gpus):
        problems.append("torch sees %s devices, nvidia-smi %d" % (torch[0]["device_count"], len(gpus)))
runs = {"gpu": gpu, "env": records("env"), "procs": records("procs")}
for cmd, recs in runs.items():
    for r in recs:
        if r["type"] in ("warning", "note", "error"):
            print("%s %s: %s" % (cmd, r["type"], r["message"]))
if problems:
    print("\nFAIL:")
    for p in problems:
        print("  " + p)
    sys.exit(1)
print("\nOK: %d GPU(s); records well formed" % len(gpus))
EOF
exit $failed
