#!/bin/bash
# What run_all.sh needs on a bare GPU image that has torch but not fleetctl's other packages nor
# iproute2 (so it was on 2026-12-04): ClusterShell as a wheel in .whl/, iproute2 and nftables with
# their libraries as Debian packages in .debs/. Run here (a Debian 12 machine with PyPI and the
# Debian mirror), then carry .whl and .debs to the GPU machine. Debian 12's builds need glibc
# 2.36 at least (Ubuntu 24.04's 2.39 runs them).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl .debs
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform any -d .whl ClusterShell==1.10.1
(cd .debs && apt-get download iproute2 libbpf1 libbsd0 libcap2 libdb5.3 libelf1 libmnl0 libselinux1 \
    libtirpc3 libxtables12 libmd0 libpcre2-8-0 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 \
    libcom-err2 libkeyutils1 zlib1g libzstd1 nftables libnftables1 libnftnl11 libjansson4 libgmp10 libedit2)
ls .whl .debs
