#!/usr/bin/env bash
# Real-GPU check of remotekit/remote/gpulayers.py (the per-level probe of `gpu --layers`), run
# by hand on a machine with an NVIDIA driver, at the level it is run on (a node, or inside a
# container: run it at each level to compare them by hand).
#
#   bash tests/device/gpu_layers_real_check.sh            # the machine's python3
#   PYTHON=/opt/venv/bin/python bash tests/device/gpu_layers_real_check.sh
#
# It prints the probe's records and checks what the fakes cannot prove:
#   - the probe runs (exit 0) and its records are JSON, the last one "done";
#   - its GPUs are nvidia-smi -L's, each with a bus id and the driver version;
#   - /dev/nvidiactl and one /dev/nvidia<N> per GPU are character devices (major 195);
#   - the kernel module's version (/proc/driver/nvidia/version) is among the NVML libraries
#     found, and /proc/driver/nvidia/gpus lists as many GPUs as nvidia-smi;
#   - where torch imports with CUDA and CUDA_VISIBLE_DEVICES is unset, its devices' UUIDs
#     are nvidia-smi's (in nvidia-smi's order when CUDA_DEVICE_ORDER=PCI_BUS_ID);
#   - remotekit's findings on this one level (layer_findings) are printed, for a person to judge.
# Exit status: 0 all checks passed, 1 a check failed.
set -u

unset REMOTEKIT_GPU_ROOT
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
"$py" "$root/remotekit/remote/gpulayers.py" --torch >"$out/records" 2>"$out/err"
echo "$?" >"$out/rc"
echo "== gpulayers.py --torch (exit $(cat "$out/rc"))"
cat "$out/records"
[ -s "$out/err" ] && sed 's/^/  stderr: /' "$out/err"

"$py" - "$out" "$root" <<'EOF'
import json
import os
import re
import sys

out, root = sys.argv[1], sys.argv[2]
problems = []
records = [json.loads(line) for line in open(os.path.join(out, "records"))]
if int(open(os.path.join(out, "rc")).read()) != 0 or records[-1]["type"] != "done":
    problems.append("the probe did not end with exit 0 and a done record")
layer = next(r for r in records if r["type"] == "layer")
torch = next((r for r in records if r["type"] == "torch"), None)
listed = re.findall(r"^GPU (\d+): .* \(UUID: (\S+)\)", open(os.path.join(out, "L")).read(), re.M)
gpus = layer["smi"]["gpus"]
if [(str(g["index"]), g["uuid"]) for g in gpus] != listed:
    problems.append("probe GPUs %s != nvidia-smi -L %s" % (gpus, listed))
for g in gpus:
    if not g.get("bus_id") or not g.get("driver"):
        problems.append("GPU %s: no bus id or driver version" % g["index"])
nodes = {d["path"]: d for d in layer["devices"]}
for path in ["/dev/nvidiactl"] + ["/dev/nvidia%d" % i for i in range(len(gpus))]:
    d = nodes.get(path)
    if d is None or d["kind"] != "char" or d["major"] != 195:
        problems.append("%s: %s" % (path, d))
driver = layer["driver"]
if driver["kernel"] not in driver["nvml"]:
    problems.append("module %s not among NVML libraries %s" % (driver["kernel"], driver["nvml"]))
if len(driver["kernel_gpus"] or []) != len(gpus):
    problems.append("/proc/driver/nvidia/gpus: %s" % driver["kernel_gpus"])
if torch and torch["cuda_available"] and layer["env"]["CUDA_VISIBLE_DEVICES"] is None:
    mine = [d.get("uuid") for d in torch["devices"]]
    smi = [g["uuid"] for g in gpus]
    if sorted(map(str, mine)) != sorted(smi):
        problems.append("torch UUIDs %s != nvidia-smi's %s" % (mine, smi))
    if layer["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and mine != smi:
        problems.append("PCI_BUS_ID order: torch %s, nvidia-smi %s" % (mine, smi))
sys.path.insert(0, root)
try:
    from remotekit.diagnostics.gpulayers import layer_findings, layer_of

    row = layer_of("here", "python", 0, layer, torch)
    found, notes = layer_findings([row])
    print("\nfindings here:", [f.line for f in found] or "none", "notes:", notes or "none")
except Exception as exc:  # remotekit's local side needs its dependencies: not a check
    print("\n(remotekit's findings not shown: %s)" % exc)
if problems:
    print("\nFAIL:")
    for p in problems:
        print("  " + p)
    sys.exit(1)
print("\nOK: %d GPU(s) at this level" % len(gpus))
EOF
