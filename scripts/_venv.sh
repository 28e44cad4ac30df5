# Shared by scripts/demo and scripts/test: create .venv if missing and install the package
# with the given extras. Idempotent and fast when nothing changed: the install is skipped when
# a stamp (hash of pyproject.toml + the extras) matches. Set OMNY_FORCE_INSTALL=1 to reinstall.
# Usage (sourced): omny_venv "test,docs"   -> sets $PY to the venv's python.

omny_venv() {
    local extras="$1"
    local root
    root="$(pwd)"
    local venv="${OMNY_VENV:-$root/.venv}"
    local python="${PYTHON:-python3}"
    if [ ! -x "$venv/bin/python" ]; then
        echo "==> creating virtual environment $venv" >&2
        "$python" -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --upgrade pip
    fi
    PY="$venv/bin/python"
    local stamp_file="$venv/.omny-install-stamp-${extras//,/-}"
    local stamp
    stamp="$("$PY" -c 'import hashlib,sys; print(hashlib.sha256(open("pyproject.toml","rb").read()+sys.argv[1].encode()).hexdigest())' "$extras")"
    if [ "${OMNY_FORCE_INSTALL:-0}" != "1" ] && [ -f "$stamp_file" ] \
        && [ "$(cat "$stamp_file")" = "$stamp" ] \
        && "$PY" -c 'import onnx_ir_multidevice' 2>/dev/null; then
        return 0
    fi
    echo "==> installing onnx-ir-multidevice[$extras] into $venv" >&2
    "$PY" -m pip install --quiet --disable-pip-version-check -e ".[$extras]"
    echo "$stamp" > "$stamp_file"
}
