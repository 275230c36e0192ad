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
  libgloo-dev gnuplot-nox jq curl >/dev/null
# The job view's test checks the metrics with promtool and scrapes a job with a real server.
$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# The PyTorch backend (bindings/torch) builds against Debian's torch for /usr/bin/python3.
$SUDO apt-get install -y -qq --no-install-recommends python3-torch libtorch-dev pybind11-dev >/dev/null
