#!/usr/bin/env bash
# Refreshes the vendored eBPF headers:
#   - libbpf's BPF-side headers (bpf_helpers.h, bpf_helper_defs.h,
#     bpf_tracing.h, bpf_core_read.h, bpf_endian.h) and its licence, copied
#     from an installed libbpf (Debian's libbpf-dev by default);
#   - vmlinux.h, dumped from a kernel's BTF with bpftool.
# The programs are CO-RE, so vmlinux.h only has to contain the types they use
# with the fields they read; any kernel with BTF will do.
#
# Usage: bpf/headers/update.sh
#   LIBBPF_INCLUDE=/usr/include/bpf  where bpf_helpers.h & co. live
#   VMLINUX_BTF=/sys/kernel/btf/vmlinux  BTF to dump
#   BPFTOOL=bpftool
# Needs: apt-get install libbpf-dev bpftool
set -euo pipefail
cd "$(dirname "$0")"

LIBBPF_INCLUDE=${LIBBPF_INCLUDE:-/usr/include/bpf}
VMLINUX_BTF=${VMLINUX_BTF:-/sys/kernel/btf/vmlinux}
BPFTOOL=${BPFTOOL:-bpftool}

for h in bpf_helpers.h bpf_helper_defs.h bpf_tracing.h bpf_core_read.h bpf_endian.h; do
	cp "$LIBBPF_INCLUDE/$h" "$h"
done

# libbpf is dual-licensed LGPL-2.1 OR BSD-2-Clause; we use it under BSD-2-Clause.
cat >LICENSE.BSD-2-Clause <<'LICENCE'
Valid-License-Identifier: BSD-2-Clause
SPDX-URL: https://spdx.org/licenses/BSD-2-Clause.html
Usage-Guide:
  To use the BSD 2-clause "Simplified" License put the following SPDX
  tag/value pair into a comment according to the placement guidelines in
  the licensing rules documentation:
    SPDX-License-Identifier: BSD-2-Clause
License-Text:

Copyright (c) 2015 The Libbpf Authors. All rights reserved.

Redistribution and use in source and binary forms, with or without
modification, are permitted provided that the following conditions are met:

1. Redistributions of source code must retain the above copyright notice,
   this list of conditions and the following disclaimer.

2. Redistributions in binary form must reproduce the above copyright
   notice, this list of conditions and the following disclaimer in the
   documentation and/or other materials provided with the distribution.

THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"
AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE
IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE
ARE DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE
LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR
CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF
SUBSTITUTE GOODS OR SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS
INTERRUPTION) HOWEVER CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN
CONTRACT, STRICT LIABILITY, OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE)
ARISING IN ANY WAY OUT OF THE USE OF THIS SOFTWARE, EVEN IF ADVISED OF THE
POSSIBILITY OF SUCH DAMAGE.
LICENCE

"$BPFTOOL" btf dump file "$VMLINUX_BTF" format c >vmlinux.h

{
	echo "# Where the vendored headers came from (written by update.sh)."
	if command -v dpkg-query >/dev/null 2>&1 && dpkg-query -W libbpf-dev >/dev/null 2>&1; then
		echo "libbpf: $(dpkg-query -W -f='${Package} ${Version}' libbpf-dev) ($LIBBPF_INCLUDE)"
	else
		echo "libbpf: $LIBBPF_INCLUDE"
	fi
	echo "vmlinux.h: $("$BPFTOOL" version | head -n1) btf dump of $VMLINUX_BTF, kernel $(uname -r)"
} >VERSION
