#!/usr/bin/env bash
# Build llama.cpp's llama-server (CPU, Release, the server target only) from the llama-cpp-python sdist
# that PyPI serves: it vendors llama.cpp, including tools/server, convert_hf_to_gguf.py and gguf-py.
#
#   scripts/build_engine.sh VERSION [DEST]      (make engine: VERSION is specnotes.serve.engine.LLAMA_CPP_PYTHON)
#
# The one download is the sdist (pip download); configuring and building reach no network (no web UI,
# no prebuilt UI, no OpenSSL, nothing fetched). Cached: a binary already built for VERSION is kept.
# JOBS (default 2) and NICE (default 19) keep it polite on a shared 2-core machine; NATIVE=OFF builds
# a portable binary (default ON: -march=native, the binary runs where it was built, as CI does).
set -euo pipefail
VERSION=${1:?usage: build_engine.sh VERSION [DEST]}
DEST=${2:-_build/engine}
JOBS=${JOBS:-2}
NICE=${NICE:-19}
NATIVE=${NATIVE:-ON}
PYTHON=${PYTHON:-python3}
ROOT="$DEST/llama-cpp-python-$VERSION"
BIN="$ROOT/bin/llama-server"

if [ -x "$BIN" ] && [ -f "$ROOT/build-info.txt" ]; then
  echo "engine: $BIN is built for llama-cpp-python $VERSION (delete $ROOT to rebuild)"
  exit 0
fi
for tool in cmake g++; do
  command -v "$tool" >/dev/null || { echo "engine: $tool is missing (Debian: apt-get install -y cmake g++)"; exit 1; }
done
mkdir -p "$ROOT/dl" "$ROOT/bin"
SDIST="$ROOT/dl/llama_cpp_python-$VERSION.tar.gz"
if [ ! -f "$SDIST" ]; then
  echo "engine: downloading the llama-cpp-python $VERSION sdist"
  "$PYTHON" -m pip download -q --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$ROOT/dl"
fi
SRC="$ROOT/src/llama_cpp_python-$VERSION/vendor/llama.cpp"
if [ ! -f "$SRC/tools/server/CMakeLists.txt" ]; then
  rm -rf "$ROOT/src" && mkdir -p "$ROOT/src"
  tar -xzf "$SDIST" -C "$ROOT/src"
fi
COMMIT=$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)
GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
start=$(date +%s)
nice -n "$NICE" cmake -S "$SRC" -B "$ROOT/build" "${GENERATOR[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE="$NATIVE" \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
  -DGGML_CCACHE=OFF -DLLAMA_ALL_WARNINGS=OFF >"$ROOT/configure.log"
nice -n "$NICE" cmake --build "$ROOT/build" --target llama-server -j "$JOBS"
cp "$ROOT/build/bin/llama-server" "$BIN"
seconds=$(( $(date +%s) - start ))
{
  echo "llama-cpp-python $VERSION"
  echo "llama.cpp commit $COMMIT"
  echo "GGML_NATIVE=$NATIVE BUILD_SHARED_LIBS=OFF CMAKE_BUILD_TYPE=Release target=llama-server jobs=$JOBS nice=$NICE"
  echo "build seconds $seconds"
  echo "compiler $(g++ --version | head -1)"
  echo "cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
} >"$ROOT/build-info.txt"
echo "engine: built $BIN in ${seconds} s"
