"""After a collective timed out: which rank stopped, and which collective it never entered.

The rank that timed out asks every rank to dump its stacks, waits a few heartbeats for them, and
compares: a peer whose heartbeat stopped too is stopped, frozen or dead; a peer that still beats but
whose last collective is behind the one this rank waited in is stuck in Python code before it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from .hang_dump import torch_position
from .hang_watch import INTERVAL_S, HangWatch

ACK_WAIT_S = 2 * INTERVAL_S + 1.0  # every live peer's heartbeat sees the request within this


def explain_hang(watch: HangWatch, err: BaseException, collective: str) -> tuple[str, str]:
    """Dump this rank's stacks, have the live peers dump theirs, and say who stopped where:
    (the collective this rank waited in, numbered when torch numbers them; what the others did)."""
    mine = torch_position()
    seq = mine["enqueued"] if mine is not None else None
    what = f"{collective} (collective #{seq} of the process group)" if seq is not None else collective
    numbering = "torch"
    if seq is None and watch.in_flight:  # no flight recorder: surge's own collectives are numbered
        seq, numbering = watch.seq, "surge"
        what = f"{collective} (surge's collective #{seq}, {watch.collective})"
    watch.dump(f"rank {watch.rank} timed out in {what}", err.__traceback__)
    peers = [r for r in range(watch.world_size) if r != watch.rank]
    try:
        store = watch.connect()
        before = _beats(store, peers)
        store.set("request", f"rank {watch.rank}, which timed out in {what}")
        acked = _wait_for_dumps(store, peers)
        after = _beats(store, peers)
    except Exception:  # noqa: BLE001 - the store does not answer: its host process is stopped or gone
        return what, (
            f"{_peer_names(peers)} stopped answering, and so does the job's store at {watch.addr}:{watch.port} "
            f"(it lives in rank 0's process when surge or a plain tcp:// rendezvous started the job, else in "
            f"torchrun's agent): that process is stopped, frozen or dead. {_where_dumped(watch, [])}"
        )
    findings = [judge_peer(r, before.get(r), after.get(r), r in acked, seq, numbering) for r in peers]
    culprits = [f for f in findings if f is not None]
    if not culprits:
        culprits = [
            f"every other rank ({_peer_names(peers)}) still answers and entered it: the hang is inside the "
            "collective itself (the network, or a backend fault)"
        ]
    return what, "; ".join(culprits) + ". " + _where_dumped(watch, sorted(acked))


def _beats(store: Any, peers: list[int]) -> dict[int, dict[str, Any]]:
    out = {}
    for r in peers:
        if store.check([f"beat/{r}"]):
            out[r] = json.loads(store.get(f"beat/{r}"))
    return out


def _wait_for_dumps(store: Any, peers: list[int]) -> set[int]:
    deadline = time.monotonic() + ACK_WAIT_S
    acked: set[int] = set()
    while len(acked) < len(peers) and time.monotonic() < deadline:
        acked |= {r for r in peers if r not in acked and store.check([f"dumped/{r}"])}
        time.sleep(0.1)
    return acked


def judge_peer(
    rank: int, before: dict | None, after: dict | None, acked: bool, seq: int | None, numbering: str
) -> str | None:
    """What went wrong with `rank`, or None when it answers and entered collective #`seq` (numbered
    by torch's flight recorder, or by surge when there is none)."""
    if after is None:
        return f"rank {rank} stopped answering: it never wrote a heartbeat (it did not start one, or the store refused it)"
    alive = acked or before is None or after["n"] > before["n"]
    last = (after.get("torch") or {}).get("enqueued") if numbering == "torch" else after["surge"][0]
    entered = seq is not None and last is not None and last >= seq
    place = after.get("user") or after.get("where") or "?"
    if alive and (entered or seq is None or last is None):
        return None if entered else f"rank {rank} still answers (its position could not be compared: {place})"
    never = (
        f"never entered collective #{seq} (its last was #{last})"
        if not entered and last is not None
        else "entered it"
    )
    if not alive:
        age = time.time() - after["t"]
        state = f"had not entered collective #{seq}" if not entered and last is not None else "had entered it"
        return (
            f"rank {rank} stopped answering: its heartbeat stopped too (the process is stopped, e.g. SIGSTOP, "
            f"frozen, or dead) and it {state} when last heard from: its last heartbeat, {age:.1f} s ago by the "
            f"clocks, had it at collective #{last}, its main thread in {place}"
        )
    return (
        f"rank {rank} stopped answering: it is alive (its heartbeat goes on) but stuck in Python code, and it "
        f"{never}: its main thread is in {place}"
    )


def _peer_names(peers: list[int]) -> str:
    return f"rank {peers[0]}" if len(peers) == 1 else f"one of ranks {peers}"


def _where_dumped(watch: HangWatch, acked: list[int]) -> str:
    if watch.directory is None:
        return "No stacks were written (no run directory)."
    ranks = [watch.rank, *acked] if watch.dumped is not None else acked
    silent = sorted(set(range(watch.world_size)) - set(ranks) - {watch.rank})
    text = f"Stacks: {watch.directory}/rank{{{','.join(map(str, sorted(ranks)))}}}.txt"
    text += f" (none from rank(s) {silent}: not answering)." if silent else "."
    if watch.dump_error is not None:
        text += f" Rank {watch.rank} could not write its own ({watch.dump_error})."
    return text
