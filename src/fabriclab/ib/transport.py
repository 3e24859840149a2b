"""What a reliable-connection queue pair does when its packets are not acknowledged:
the local ACK timeout and the retry count (IBA Vol. 1, 9.7.6.1.3 and 11.2.4.2; the
``timeout`` and ``retry_cnt`` attributes of rdma-core's ``ibv_modify_qp``), with the
values NCCL sets by default.

A requester that gets no acknowledgement within the local ACK timeout,
4.096 µs x 2^timeout, resends the unacknowledged packets; after ``retry_cnt`` resends
without one it gives up, completing the work request with IBV_WC_RETRY_EXC_ERR
("transport retry counter exceeded") and moving the queue pair to the error state.
``timeout`` 0 is an infinite timeout (the requester waits for ever; ibv_modify_qp(3)).
"""

from __future__ import annotations

TIMEOUT_MAX = 31  # the 5-bit Local ACK Timeout field (IBA 9.7.6.1.3)
RETRY_CNT_MAX = 7  # the 3-bit Retry Count (IBA 11.2.4.2)
# NCCL's defaults (NCCL User Guide, "Environment Variables": NCCL_IB_TIMEOUT 20,
# NCCL_IB_RETRY_CNT 7); perftest's ib_write_bw uses timeout 14.
NCCL_TIMEOUT = 20
NCCL_RETRY_CNT = 7
TIMEOUT_UNIT_S = 4.096e-6  # 4.096 µs x 2^timeout


def ack_timeout_s(timeout: int) -> float:
    """The local ACK timeout in seconds for the attribute value ``timeout`` (0: never)."""
    return float("inf") if timeout == 0 else TIMEOUT_UNIT_S * 2**timeout


def give_up_after_s(timeout: int, retry_cnt: int) -> float:
    """Seconds from the first unacknowledged send to the retry-exceeded error: the first
    send and ``retry_cnt`` resends, each waiting out its timeout."""
    return (retry_cnt + 1) * ack_timeout_s(timeout)
