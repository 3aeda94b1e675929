# Sourced by the real-GPU checks in this folder: the checkout's root, the python to use
# (PYTHON=..., else the machine's python3), a private scratch folder removed on exit, and
# nvidia-smi -L as the driver reports it (in "$out/L").
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
py=${PYTHON:-$(command -v python3 || command -v python || true)}
if [ -z "$py" ]; then
    echo "FAIL: no python3 on PATH (set PYTHON=...)" >&2
    exit 1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "python:     $py ($("$py" -V 2>&1))"
echo "nvidia-smi: $(command -v nvidia-smi || echo 'NOT ON PATH')"
nvidia-smi -L >"$out/L" 2>&1
echo "nvidia-smi -L (exit $?):"
sed 's/^/  /' "$out/L"
