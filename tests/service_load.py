"""Load for the kill -9 test: submit and cancel workloads in a loop, record what was
acknowledged.

``python tests/service_load.py URL TOKEN_A TOKEN_B OUT [PREFIX]``: each acknowledged submission
(201) appends ``submit NAME`` to OUT, each acknowledged cancellation (200) ``cancel NAME``,
flushed at once. Connection errors (the server was killed) are ignored; runs until killed.
"""

from __future__ import annotations

import random
import sys

import httpx


def main(url: str, token_a: str, token_b: str, out_path: str, prefix: str = "load") -> None:
    rng = random.Random(7)
    clients = {
        team: httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tok}"}, timeout=5)
        for team, tok in (("team-a", token_a), ("team-b", token_b))
    }
    live: list[tuple[str, str]] = []
    with open(out_path, "a", buffering=1) as out:
        i = 0
        while True:
            i += 1
            team = rng.choice(["team-a", "team-b"])
            client = clients[team]
            try:
                if live and rng.random() < 0.35:
                    name, owner = live.pop(rng.randrange(len(live)))
                    response = clients[owner].delete(f"/api/v1/workloads/{name}")
                    if response.status_code == 200:
                        out.write(f"cancel {name}\n")
                    continue
                name = f"{prefix}-{i}"
                spec = {
                    "name": name,
                    "team": team,
                    "pods": 1,
                    "requests": {"nvidia.com/gpu": 1, "cpu": 2, "memory": "8Gi"},
                }
                if rng.random() < 0.5:
                    spec["duration"] = rng.choice([0.2, 0.5, 1.0, 3.0])
                response = client.post("/api/v1/workloads", json=spec)
                if response.status_code == 201:
                    out.write(f"submit {name}\n")
                    live.append((name, team))
            except httpx.HTTPError:
                pass


if __name__ == "__main__":
    main(*sys.argv[1:6])
