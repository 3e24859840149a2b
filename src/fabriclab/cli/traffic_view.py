"""How ``fabriclab traffic list`` shows a listing (the summary of the flows picked, a
table of those shown, how many more there are), and the traffic commands' options."""

from __future__ import annotations

import typer

from .common import plain_table, show, show_lines, table

LIST_SHOWN = 20  # flows 'traffic list' shows without --all
COLUMNS = ("id", "from", "to", "state", "rate", "sent", "delivered", "size", "reason")
BOXED_MAX = 1000  # more rows than this print as plain text (a box of 20,000 is slow)

TIMEOUT_HELP = "Local ACK timeout, 4.096 µs x 2^N (0-31, 0: never; default 20, NCCL's)."
RETRY_HELP = "Resends before a flow with no route fails (0-7; default 7, NCCL's)."
StateOpt = typer.Option(
    None, "--state", help="Only flows in this state (running, retrying, done, stopped, failed)."
)
FromOpt = typer.Option(None, "--from", help="Only flows from this tray or HOST/HCA.")
ToOpt = typer.Option(None, "--to", help="Only flows to this tray or HOST/HCA.")
IdOpt = typer.Option(None, "--id", help="Only this flow.")
AllOpt = typer.Option(False, "--all", help=f"Every flow picked, not the first {LIST_SHOWN}.")


def show_listing(r: dict) -> None:
    """The admin ``list`` answer ``r`` (``summary``, ``flows``, ``more``) on stdout."""
    s = r["summary"]
    states = ", ".join(f"{n} {k}" for k, n in s["states"].items() if n)
    show(f"{s['flows']} flow(s){': ' + states if states else ''}")
    show(f"sent {s['sent']} B, delivered {s['delivered']} B, rate {s['rate']:.6g} B/s")
    rows = [[str(f[c]) if f[c] is not None else "-" for c in COLUMNS] for f in r["flows"]]
    if len(rows) > BOXED_MAX:
        show_lines(plain_table(None, COLUMNS, rows))
    elif rows:
        table(None, COLUMNS, rows)
    if r["more"]:
        show(
            f"… {r['more']} more: 'traffic list --all' shows every one "
            "(or pick with --state, --from, --to, --id)"
        )
