"""The topology API under load and abuse, against a real ``fabriclab serve-topology``:
a 100 MB body (declared, and streamed without a length), 3,000 distinct requests from 8
clients, JSON nested 5,000 deep and a 5,000-digit number.  Prints the answers, times,
and the server's threads and peak RSS (from /proc).

    python bench/topology_api.py [--requests 3000] [--delay 2.0]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

MB = 1 << 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def send(port: int, head: bytes, chunks) -> tuple[str, float]:
    """A request over a raw socket, the body sent until the server stops reading; the
    status line and the seconds until it came."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        s.sendall(head)
        try:
            for c in chunks:
                s.sendall(c)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            answer = s.recv(4096)
        except ConnectionResetError:
            answer = b""
    return answer.split(b"\r\n", 1)[0].decode(errors="replace"), time.monotonic() - started


def big_body(size: int) -> list[bytes]:
    start = b'{"provider": {"name": "test"}, "engine": {"name": "slurm"}, "pad": "'
    body = start + b" " * (size - len(start) - 2) + b'"}'
    return [body[i : i + MB] for i in range(0, len(body), MB)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--delay", type=float, default=2.0)
    args = ap.parse_args()

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fabriclab.cli",
            "serve-topology",
            "--port",
            str(port),
            "--aggregation-delay",
            str(args.delay),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=os.environ,
    )
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        pid = proc.pid
        print(
            f"server idle: threads {proc_status(pid, 'Threads')}, RSS {proc_status(pid, 'VmRSS') // 1024} MB"
        )

        chunks = big_body(100 * MB)
        head = b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (100 * MB)
        status, secs = send(port, head, chunks)
        print(
            f"100 MB body, Content-Length given: {status!r} in {secs:.2f} s, "
            f"server peak RSS {proc_status(pid, 'VmHWM') // 1024} MB"
        )
        head = b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        status, secs = send(port, head, (b"%x\r\n%s\r\n" % (len(c), c) for c in [*chunks, b""]))
        print(
            f"100 MB body, streamed (chunked): {status!r} in {secs:.2f} s, "
            f"server peak RSS {proc_status(pid, 'VmHWM') // 1024} MB"
        )
        del chunks

        for name, body in [
            ("JSON 5,000 deep", "[" * 5000 + "]" * 5000),
            ("a 5,000-digit number", "1" * 5000),
        ]:
            started = time.monotonic()
            r = httpx.post(f"{base}/v1/generate", content=body)
            print(
                f"{name}: {r.status_code} {r.text.strip()[:70]!r} in {time.monotonic() - started:.3f} s"
            )

        threads, statuses = [], {}

        def one(i: int) -> str:
            body = json.dumps(
                {"provider": {"name": "test"}, "engine": {"name": "slurm", "params": {"n": i}}}
            )
            r = client.post(f"{base}/v1/generate", content=body)
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            if i % 25 == 0:
                threads.append(proc_status(pid, "Threads"))
            return r.text

        started = time.monotonic()
        with httpx.Client(timeout=60) as client, ThreadPoolExecutor(8) as pool:
            uids = list(pool.map(one, range(args.requests)))
        secs = time.monotonic() - started
        time.sleep(args.delay + 1)
        first = httpx.get(f"{base}/v1/topology", params={"uid": uids[0]}).status_code
        print(
            f"{args.requests} distinct requests in {secs:.1f} s: answers {dict(sorted(statuses.items()))}, "
            f"server threads up to {max(threads)}, RSS {proc_status(pid, 'VmRSS') // 1024} MB "
            f"(peak {proc_status(pid, 'VmHWM') // 1024} MB), "
            f"after the delay: threads {proc_status(pid, 'Threads')}, first request's result {first}"
        )
    finally:
        proc.terminate()
        proc.wait(10)
        log = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        print(f"server log: {log.count('Traceback')} tracebacks, {len(log.splitlines())} lines")


if __name__ == "__main__":
    main()
