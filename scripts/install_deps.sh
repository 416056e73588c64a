#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages attnjit builds with (only the missing ones) and
# checks that a CUDA toolkit with NVRTC is present. It never installs CUDA itself.
# --fuzz: also clang and its compiler-rt (libFuzzer, ASan, UBSan) for scripts/run_fuzzers.sh.
set -euo pipefail

PACKAGES=(cmake ninja-build g++ pkg-config libfmt-dev libspdlog-dev nlohmann-json3-dev
          libsqlite3-dev sqlite3 libgtest-dev libgmock-dev libcli11-dev libxxhash-dev
          python3-venv python3-dev)  # python3-*: the Python package (pip install .)
# Debian bookworm: clang-14's libFuzzer and sanitizer runtimes are in libclang-rt-14-dev.
if [[ ${1:-} == --fuzz ]]; then
  PACKAGES+=(clang-14 libclang-rt-14-dev)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  SUDO=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    SUDO=(sudo)
  fi
  "${SUDO[@]}" apt-get update
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
else
  echo "install_deps: all ${#PACKAGES[@]} Debian packages are installed"
fi

# CUDA: NVRTC and cuda.h come from the toolkit, which this script does not install.
has_nvrtc() {
  local root=$1
  [[ -f "$root/include/nvrtc.h" && -f "$root/include/cuda.h" ]] || return 1
  compgen -G "$root/lib64/libnvrtc.so*" >/dev/null || compgen -G "$root/lib/libnvrtc.so*" >/dev/null ||
    compgen -G "$root/targets/*/lib/libnvrtc.so*" >/dev/null
}
candidates=()
[[ -n "${CUDA_HOME:-}" ]] && candidates+=("$CUDA_HOME")
[[ -n "${CUDA_PATH:-}" ]] && candidates+=("$CUDA_PATH")
if command -v nvcc >/dev/null; then candidates+=("$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"); fi
candidates+=(/usr/local/cuda)
for root in "${candidates[@]}"; do
  if has_nvrtc "$root"; then
    echo "install_deps: CUDA toolkit with NVRTC found at $root"
    exit 0
  fi
done
cat >&2 <<'MSG'
install_deps: no CUDA toolkit with NVRTC found (looked at $CUDA_HOME, $CUDA_PATH, nvcc on PATH and
/usr/local/cuda for include/nvrtc.h, include/cuda.h and libnvrtc.so). attnjit needs the CUDA toolkit's
NVRTC (12.x or 13.x) at build time; this script does not install CUDA. Install it from NVIDIA
(https://developer.nvidia.com/cuda-downloads, or the distribution's cuda-nvrtc-dev/cuda-cudart-dev
packages) and set CUDA_HOME if it is not in /usr/local/cuda. No GPU or driver is needed to build.
MSG
exit 1
