#!/usr/bin/env bash
# DeepSpeed, as pyproject.toml pins it, with the CPU ops the test suite's trainers load compiled into the package
# (async_io for offload to NVMe, with pin_memory, and shm_comm for the collectives): built once per machine into
# ~/.cache/rlplane/wheels and installed into the venv by `make test`'s install. DeepSpeed then imports them instead of
# compiling them on first use, which its cache keys by the venv's absolute path, so that every fresh clone (CI's
# included) compiled them again for minutes. Production installs DeepSpeed from PyPI and compiles on first use.
# Usage: scripts/deepspeed-wheel.sh PYTHON   (installs the pinned torch, which the build needs; prints the wheel's path)
set -euo pipefail
cd "$(dirname "$0")/.."
python=$1
pin() { grep -o "\"$1==[^\"]*\"" pyproject.toml | head -1 | tr -d '"'; }
deepspeed=$(pin deepspeed) torch=$(pin torch)
# The compiler wrapper drops DeepSpeed's -g (tests/harness/cxx-without-debug-info); a change to either rebuilds.
key=$(cat "$0" tests/harness/cxx-without-debug-info | sha256sum | cut -c1-12)
tag=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
dir=${RLPLANE_CACHE:-$HOME/.cache/rlplane}/wheels/${deepspeed/==/-}-${torch/==/-}-$tag-cpu-ops-$key
if ! compgen -G "$dir/deepspeed-*.whl" >/dev/null; then
  "$python" -m pip install -q "$torch" >&2
  build=$(mktemp -d)
  trap 'rm -rf "$build"' EXIT
  echo "building $deepspeed with its CPU ops (minutes, once per machine) into $dir" >&2
  "$python" -m pip download -q --no-deps --no-binary :all: -d "$build/source" "$deepspeed" >&2
  # DS_ENABLE_NINJA: both cores (without it setuptools compiles one file at a time). LDFLAGS: DeepSpeed's CPU builder
  # does not pass async_io's -laio to a prebuilt op's link (its on-first-use build does), and Debian links as needed.
  DS_ACCELERATOR=cpu DS_BUILD_OPS=0 DS_BUILD_AIO=1 DS_BUILD_SHM_COMM=1 DS_ENABLE_NINJA=1 \
    LDFLAGS="-Wl,--no-as-needed -laio" CXX="$PWD/tests/harness/cxx-without-debug-info" \
    "$python" -m pip wheel -q --no-deps --no-build-isolation -w "$build/wheel" "$build"/source/deepspeed-*.tar.gz >&2
  mkdir -p "$(dirname "$dir")"
  rm -rf "$dir.partial" && mv "$build/wheel" "$dir.partial" && { mv -T "$dir.partial" "$dir" 2>/dev/null || true; }
fi
compgen -G "$dir/deepspeed-*.whl"
