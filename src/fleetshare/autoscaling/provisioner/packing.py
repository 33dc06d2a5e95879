"""A packing: open nodes (a candidate each) with the pods of every class on them, the limit
headroom they leave, and right-sizing every node to the cheapest candidate that holds its pods.

Every phase plans within the limits through :meth:`Packing.rooms` (the rule:
:func:`~fleetshare.autoscaling.account_limits.nodes_within`), and :meth:`Packing.open` never
opens more nodes than the headroom allows, so no plan passes a limit, whichever phase (or
fallback) made it.
"""

from __future__ import annotations

import numpy as np

from fleetshare.autoscaling.account_limits import UNLIMITED, nodes_within
from fleetshare.autoscaling.provisioner.problem import Problem


class Packing:
    """Nodes (candidate index + class counts) built by the greedy or decoded from columns."""

    def __init__(self, p: Problem) -> None:
        self.p = p
        self.n = 0
        self.cand = np.zeros(16, np.int64)
        self.counts = np.zeros((16, p.n_classes), np.int64)
        self.used = np.zeros((16, p.cap.shape[1]), np.int64)
        self.head = p.limits.headroom.astype(float).copy()

    def copy(self) -> Packing:
        """An independent copy (nodes, pods and headroom)."""
        other = Packing(self.p)
        other.n = self.n
        other.cand = self.cand.copy()
        other.counts = self.counts.copy()
        other.used = self.used.copy()
        other.head = self.head.copy()
        return other

    def _grow(self, extra: int) -> None:
        need = self.n + extra
        if need <= len(self.cand):
            return
        size = max(need, 2 * len(self.cand))
        self.cand = np.resize(self.cand, size)
        counts = np.zeros((size, self.counts.shape[1]), np.int64)
        counts[: self.n] = self.counts[: self.n]
        used = np.zeros((size, self.used.shape[1]), np.int64)
        used[: self.n] = self.used[: self.n]
        self.counts, self.used = counts, used

    def rooms(self, instead_of: int | None = None) -> np.ndarray:
        """Per candidate, how many more nodes of it the limit rows allow (:func:`nodes_within`;
        :data:`UNLIMITED` when no row counts it); ``instead_of``: as replacements of a node of
        that candidate, whose use of the limits comes back first."""
        L = self.p.limits.matrix
        if not len(L):
            return np.full(len(self.p.obj), UNLIMITED, np.int64)
        head = self.head if instead_of is None else self.head + L[:, instead_of]
        rooms: np.ndarray = nodes_within(L, head).min(axis=0)
        return rooms

    def open(self, j: int, k: int) -> slice:
        """Open ``k`` empty nodes of candidate ``j``, or as many as the limit rows allow
        (:meth:`rooms`): the rows opened."""
        if len(self.p.limits):
            k = max(0, min(k, int(self.rooms()[j])))
        self._grow(k)
        rows = slice(self.n, self.n + k)
        self.cand[rows] = j
        self.counts[rows] = 0
        self.used[rows] = 0
        self.n += k
        if len(self.p.limits):
            self.head -= self.p.limits.matrix[:, j] * k
        return rows

    def add(self, rows: slice | np.ndarray, c: int, amounts: np.ndarray) -> None:
        self.counts[rows, c] += amounts
        self.used[rows] += amounts[:, None] * self.p.size[c][None, :]

    def move(self, n: int, j: int) -> None:
        """Node ``n`` becomes a node of candidate ``j`` (its use of the limits with it)."""
        if len(self.p.limits):
            self.head += self.p.limits.matrix[:, self.cand[n]] - self.p.limits.matrix[:, j]
        self.cand[n] = j

    def covered(self) -> np.ndarray:
        return np.asarray(self.counts[: self.n].sum(axis=0))

    def compact(self) -> None:
        """Drop nodes without pods (their limit usage returns to the headroom)."""
        keep = self.counts[: self.n].sum(axis=1) > 0
        if keep.all():
            return
        if len(self.p.limits):
            gone = self.cand[: self.n][~keep]
            self.head += self.p.limits.matrix[:, gone].sum(axis=1)
        idx = np.flatnonzero(keep)
        self.cand[: len(idx)] = self.cand[idx]
        self.counts[: len(idx)] = self.counts[idx]
        self.used[: len(idx)] = self.used[idx]
        self.n = len(idx)

    def remove(self, c: int, amount: int) -> None:
        """Take ``amount`` pods of class ``c`` off the nodes, last nodes first."""
        for n in range(self.n - 1, -1, -1):
            if amount <= 0:
                break
            k = min(int(self.counts[n, c]), amount)
            if k:
                self.counts[n, c] -= k
                self.used[n] -= k * self.p.size[c]
                amount -= k

    def right_size(self) -> None:
        """Move every node to the cheapest candidate that holds its pods within the limits."""
        p = self.p
        self.compact()
        if not self.n:
            return
        limited = len(p.limits) > 0
        onehot = np.zeros((p.n_classes, len(p.allowed_rows)), bool)
        onehot[np.arange(p.n_classes), p.allowed_id] = True
        present = (self.counts[: self.n] > 0).astype(np.int64) @ onehot.astype(np.int64) > 0
        sets, group = np.unique(present, axis=0, return_inverse=True)
        group = group.ravel()
        for g, row in enumerate(sets):
            ok = p.allowed_rows[row].all(axis=0)
            nodes = np.flatnonzero(group == g)
            for start in range(0, len(nodes), 256):
                chunk = nodes[start : start + 256]
                feas = ok[None, :] & (p.cap[None, :, :] >= self.used[chunk][:, None, :]).all(axis=2)
                if not limited:
                    feas[np.arange(len(chunk)), self.cand[chunk]] = True
                    self.cand[chunk] = np.argmin(np.where(feas, p.obj[None, :], np.inf), axis=1)
                    continue
                for a, n in enumerate(chunk):
                    cur = int(self.cand[n])
                    f = feas[a] & (self.rooms(instead_of=cur) > 0)
                    f[cur] = True
                    j = int(np.argmin(np.where(f, p.obj, np.inf)))
                    if p.obj[j] < p.obj[cur] - 1e-12:
                        self.move(n, j)
