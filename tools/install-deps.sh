#!/usr/bin/env bash
# Installs sncl's build and test dependencies from Debian's packages (Debian 12, as root).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config git ca-certificates \
  libfmt-dev libhwloc-dev libfabric-dev libfabric-bin libopenmpi-dev openmpi-bin \
  catch2 nlohmann-json3-dev graphviz iproute2 procps clang libclang-rt-14-dev \
  libgloo-dev gnuplot-nox jq >/dev/null
