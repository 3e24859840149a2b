"""How public parsers of nccl-tests' output read it, for the tests of what fabriclab
prints: NVIDIA cloudai's report strategies (the header patterns, 13 fields a data row,
the trailer's lines), CSCS ReFrame's and Azure's health check's reading of the
trailer (azurehpc-health-checks, customTests/azure_nccl_allreduce.nhc: field 6 of the
first line that says "bandwidth")."""

from __future__ import annotations

import re


def read_like_public_parsers(text: str) -> tuple[list[str], float]:
    """Check ``text`` reads as those parsers read it; its data rows and the average bus
    bandwidth they find."""
    # NVIDIA cloudai (nccl_test report strategies): both patterns, 13 fields a data row
    assert re.search(r"out-of-place|in-place", text)
    assert re.search(
        r"\b(size\s+count\s+type\s+redop\s+root\s+time\s+algbw\s+busbw\s+#wrong\s+time\s+"
        r"algbw\s+busbw\s+#wrong)\b",
        text,
        re.IGNORECASE,
    )
    data = [line for line in text.splitlines() if re.match(r"^\s*\d", line)]
    assert all(len(re.split(r"\s+", line.strip())) == 13 for line in data)
    assert "# Out of bounds values" in text and "# Avg bus bandwidth" in text
    # CSCS ReFrame's and the Azure health check's reading of the trailer
    assert re.search(r"Out of bounds values\s*:\s*0\s*OK", text)
    avg = float(re.search(r"Avg bus bandwidth\s*:\s*(?P<gbs>\S+)", text)["gbs"])
    first = next(line for line in text.splitlines() if "bandwidth" in line)
    assert float(first.split()[5]) == avg
    return data, avg
