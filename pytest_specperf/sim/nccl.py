"""NCCL's transports inside a node, as the simulator models them: which variables leave it only sockets.

Why: `specperf bisect` must find two differences that only act together. NCCL gives a real pair:
`NCCL_P2P_DISABLE=1` alone leaves shared memory, `NCCL_SHM_DISABLE=1` alone leaves peer access;
with both, the GPUs of a node talk over sockets and every collective is several times slower.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

#: With both of these set, NCCL can use neither NVLink/PCIe peer access nor shared memory between the
#: GPUs of a node and falls back to sockets: either alone leaves the other transport, and costs little.
SOCKET_FALLBACK_ENV: Final = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE")
#: How much slower communication is over sockets than over the intra-node transports (a round figure:
#: the simulator's point is that the two variables act only together, not the exact factor).
SOCKET_COMM_FACTOR: Final = 4.0


def over_sockets(environ: Mapping[str, str]) -> bool:
    """NCCL's communication falls back to sockets: every intra-node transport is disabled."""
    return all(environ.get(name, "").strip() == "1" for name in SOCKET_FALLBACK_ENV)
