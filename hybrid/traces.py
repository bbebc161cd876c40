"""Client traces: each edge client's device speed, links and availability over time.

FedScale drives its simulated clients with measured device traces (compute speed, network
throughput) and availability traces (when a device is online, charging, on Wi-Fi). A hybrid
trace carries the same three things per client, in a JSON file::

    {
      "period_s": 86400,
      "clients": [
        {"client": 0, "compute_speed": 1.0, "uplink_mbps": 8.0, "downlink_mbps": 40.0,
         "available": [[0, 21600], [64800, 86400]]},
        ...
      ]
    }

or a CSV file with one row per availability interval (the speeds repeated on each row)::

    client,compute_speed,uplink_mbps,downlink_mbps,start_s,end_s
    0,1.0,8.0,40.0,0,21600

- ``client``: ids 0..K−1, every one of the run's K clients exactly once;
- ``compute_speed``: device speed relative to nominal (2 computes twice as fast; its inverse
  is the profile's slowness on the virtual clock);
- ``uplink_mbps`` / ``downlink_mbps``: the client's links in Mbit/s;
- ``available``: half-open intervals [start, end) of seconds since training started in which
  the client is reachable (the virtual clock's on serial, the run's wall clock on processes
  and ray), sorted, not overlapping, within [0, period_s) when a period is given;
- ``period_s``: the intervals repeat with this period (86400: one day); 0: they do not, and a
  client is unreachable after its last interval.

fedavg samples only clients available when a round starts and drops the Δ of a client whose
interval ended before its upload finished (it went offline mid-round; counted as
``trace_left``). On processes and ray a client's traced speed and links are emulated: the
runtime holds its finished result until ``emulated_duration`` has passed since dispatch.
``diurnal_trace`` writes a synthetic trace in which clients are online in
one window a day around their local night, shifted by a seeded time zone.
"""

from __future__ import annotations

import bisect
import csv
import functools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hybrid.errors import ConfigError

FIELDS = ("client", "compute_speed", "uplink_mbps", "downlink_mbps")


@dataclass(frozen=True)
class ClientTrace:
    """One client's row of a trace."""

    client: int
    compute_speed: float
    uplink_mbps: float
    downlink_mbps: float
    available: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Trace:
    clients: tuple[ClientTrace, ...]
    period_s: float = 0.0

    def available(self, client: int, at_s: float) -> bool:
        """Whether ``client`` is reachable at second ``at_s`` of the run's clock."""
        return self.online_until(client, at_s) > at_s

    def online_until(self, client: int, at_s: float) -> float:
        """End of the interval holding ``at_s`` (``at_s`` itself when offline then)."""
        intervals = self.clients[client].available
        t = at_s % self.period_s if self.period_s else at_s
        base = at_s - t
        i = bisect.bisect_right([start for start, _ in intervals], t) - 1
        if i >= 0 and t < intervals[i][1]:
            end = base + intervals[i][1]
            # an interval that runs to the period's end continues into the next period's first
            if self.period_s and intervals[i][1] >= self.period_s and intervals[0][0] <= 0:
                end = base + self.period_s + intervals[0][1]
            return end
        return at_s

    def next_online(self, client: int, at_s: float) -> float:
        """The first time at or after ``at_s`` at which ``client`` is reachable (inf: never)."""
        if self.available(client, at_s):
            return at_s
        intervals = self.clients[client].available
        if not intervals:
            return float("inf")
        if not self.period_s:
            return next((start for start, _ in intervals if start > at_s), float("inf"))
        base, t = at_s - at_s % self.period_s, at_s % self.period_s
        later = next((start for start, _ in intervals if start > t), None)
        return base + later if later is not None else base + self.period_s + intervals[0][0]


def emulated_duration(
    row: ClientTrace, compute_s: float, upload_nbytes: int, download_nbytes: int
) -> tuple[float, float]:
    """(total, upload) seconds of a client task on its traced device: θ's download on its
    downlink, ``compute_s`` measured on this machine divided by its compute speed, the
    payload's upload on its uplink. A real runtime holds the result until then."""
    download = download_nbytes * 8 / (row.downlink_mbps * 1e6)
    upload = upload_nbytes * 8 / (row.uplink_mbps * 1e6)
    return download + compute_s / row.compute_speed + upload, upload


def _check(trace: Trace, clients: int | None, where: str) -> Trace:
    ids = [c.client for c in trace.clients]
    if clients is not None:
        unknown = sorted(set(ids) - set(range(clients)))
        if unknown:
            raise ConfigError(
                f"client_trace: {where} names client {unknown[0]}, not one of the run's "
                f"{clients} clients (ids 0..{clients - 1})"
            )
        missing = sorted(set(range(clients)) - set(ids))
        if missing:
            raise ConfigError(f"client_trace: {where} has no row for client {missing[0]}")
    if len(ids) != len(set(ids)):
        raise ConfigError(f"client_trace: {where} lists a client twice (use one entry each)")
    if not trace.period_s >= 0:
        raise ConfigError(f"client_trace: {where}: period_s {trace.period_s} must be >= 0")
    for c in trace.clients:
        for name in ("compute_speed", "uplink_mbps", "downlink_mbps"):
            if not getattr(c, name) > 0:
                raise ConfigError(f"client_trace: {where}: client {c.client}'s {name} must be > 0")
        previous_end = -np.inf
        for start, end in c.available:
            if not start < end:
                raise ConfigError(
                    f"client_trace: {where}: client {c.client}'s interval [{start}, {end}) is empty"
                )
            if start < previous_end:
                raise ConfigError(
                    f"client_trace: {where}: client {c.client}'s intervals overlap or are not "
                    f"sorted at [{start}, {end})"
                )
            if trace.period_s and (start < 0 or end > trace.period_s):
                raise ConfigError(
                    f"client_trace: {where}: client {c.client}'s interval [{start}, {end}) is "
                    f"outside the period [0, {trace.period_s})"
                )
            previous_end = end
    return Trace(tuple(sorted(trace.clients, key=lambda c: c.client)), trace.period_s)


@functools.lru_cache(maxsize=4)
def load_trace(path: str, clients: int | None = None) -> Trace:
    """Read and check a trace file (JSON, or CSV by its suffix); one-line errors."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise ConfigError(f"client_trace: cannot read {path!r} ({exc.strerror})") from None
    try:
        if file.suffix.lower() == ".csv":
            trace = _from_csv(text)
        else:
            data = json.loads(text)
            trace = Trace(
                tuple(
                    ClientTrace(
                        int(row["client"]),
                        float(row["compute_speed"]),
                        float(row["uplink_mbps"]),
                        float(row["downlink_mbps"]),
                        tuple((float(a), float(b)) for a, b in row["available"]),
                    )
                    for row in data["clients"]
                ),
                float(data.get("period_s", 0.0)),
            )
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(
            f"client_trace: {path!r} is not a client trace ({type(exc).__name__}: {exc}); "
            "see hybrid/traces.py for the format"
        ) from None
    return _check(trace, clients, repr(path))


def _from_csv(text: str) -> Trace:
    rows: dict[int, ClientTrace] = {}
    for row in csv.DictReader(text.splitlines()):
        client = int(row["client"])
        interval = (float(row["start_s"]), float(row["end_s"]))
        known = rows.get(client)
        speeds = tuple(float(row[name]) for name in FIELDS[1:])
        if known is None:
            rows[client] = ClientTrace(client, *speeds, available=(interval,))
        else:
            rows[client] = ClientTrace(client, *speeds, available=(*known.available, interval))
    return Trace(tuple(rows.values()), 0.0)


def diurnal_trace(
    clients: int,
    seed: int = 0,
    online_hours: float = 8.0,
    day_s: float = 86_400.0,
    speed_sigma: float = 0.5,
    uplink_mbps: float = 10.0,
    downlink_mbps: float = 50.0,
    link_sigma: float = 0.5,
) -> dict:
    """A synthetic day: each client is online for ``online_hours`` around its local night
    (a seeded time-zone offset), with lognormal speed and links. Returns the JSON document."""
    rng = np.random.default_rng(seed)
    rows = []
    window = online_hours * 3600.0 * day_s / 86_400.0
    for c in range(clients):
        start = float(rng.uniform(0, day_s))
        end = start + window
        if end <= day_s:
            available = [[round(start, 6), round(end, 6)]]
        else:  # wraps past midnight: two intervals in the day
            available = [[0.0, round(end - day_s, 6)], [round(start, 6), day_s]]
        available = [[a, b] for a, b in available if a < b]
        rows.append(
            {
                "client": c,
                "compute_speed": round(float(rng.lognormal(0.0, speed_sigma)), 4),
                "uplink_mbps": round(uplink_mbps * float(rng.lognormal(0.0, link_sigma)), 3),
                "downlink_mbps": round(downlink_mbps * float(rng.lognormal(0.0, link_sigma)), 3),
                "available": available,
            }
        )
    return {"period_s": day_s, "clients": rows}


def write_trace(document: dict, path: str | Path) -> None:
    """Write a trace document as JSON, one client per line."""
    lines = [json.dumps(row) for row in document["clients"]]
    body = ",\n  ".join(lines)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(f'{{"period_s": {document["period_s"]},\n "clients": [\n  {body}\n]}}\n')


__all__ = [
    "ClientTrace",
    "Trace",
    "diurnal_trace",
    "emulated_duration",
    "load_trace",
    "write_trace",
]
