"""How HyperPod's ``BorrowLimit`` is read, for every way a HyperPod policy comes in (the
importer, the CLI, scenarios and the API).

SageMaker's API model: "The limit on how much idle compute can be borrowed. The values can be
1 - 500 percent of idle compute that the team is allowed to borrow. Default is 50." So by
default it is a percentage of idle compute (``idle``); ``quota`` reads it as a percentage of
the team's own quota instead, which is how HyperPod's public walkthrough behaves.
"""

from __future__ import annotations

from typing import Literal

BorrowLimitReading = Literal["quota", "idle"]
READINGS: tuple[BorrowLimitReading, ...] = ("idle", "quota")
DEFAULT_READING: BorrowLimitReading = "idle"
