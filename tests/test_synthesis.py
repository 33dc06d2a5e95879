"""Jobs from running and pending counts (fleetshare.traces.synthesis), on hand-built series
whose right answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from fleetshare.traces.synthesis import SynthJob, queue_jobs, split

PRIOR = {1: 0.55, 2: 0.2, 4: 0.2, 3: 0.0125, 5: 0.0125, 6: 0.0125, 7: 0.0125}
M = 60.0


def test_a_job_waits_once_and_runs_its_run() -> None:
    # a 4-GPU job pending for 3 minutes, then running for 3 minutes
    jobs, stats = queue_jobs(
        [0, M, 2 * M, 3 * M, 4 * M, 5 * M, 6 * M],
        [0, 0, 0, 4, 4, 4, 0],
        [4, 4, 4, 0, 0, 0, 0],
        7 * M,
        PRIOR,
        running_jobs=[0, 0, 0, 1, 1, 1, 0],
        pending_jobs=[1, 1, 1, 0, 0, 0, 0],
    )
    assert jobs == [SynthJob(4, 0.0, 3 * M, 6 * M)]
    assert jobs[0].wait == 3 * M and jobs[0].run == 3 * M
    assert stats.running_error_unit_seconds == stats.pending_error_unit_seconds == 0


def test_a_full_team_starts_the_oldest_waiting_job_as_the_newest_running_one_ends() -> None:
    # two 1-GPU jobs run throughout; one waits from minute 0 and starts at minute 2, when the
    # running count stays 2: one running job ended then (the most recently started: b)
    jobs, _ = queue_jobs(
        [0, M, 2 * M, 3 * M],
        [2, 2, 2, 2],
        [1, 1, 0, 0],
        4 * M,
        PRIOR,
        running_jobs=[2, 2, 2, 2],
        pending_jobs=[1, 1, 0, 0],
    )
    assert sorted((j.submit, j.start, j.stop) for j in jobs) == [
        (0.0, 0.0, 2 * M),  # ended for the waiting one
        (0.0, 0.0, 4 * M),
        (0.0, 2 * M, 4 * M),  # waited 2 minutes
    ]


def test_job_counts_decide_the_sizes() -> None:
    # 6 GPUs start in 2 jobs (4 + 2), then 6 more in 6 jobs (6 x 1)
    jobs, _ = queue_jobs(
        [0, M],
        [6, 12],
        [0, 0],
        2 * M,
        PRIOR,
        running_jobs=[2, 8],
        pending_jobs=[0, 0],
    )
    assert sorted(j.size for j in jobs if j.start == 0) == [2, 4]
    assert sorted(j.size for j in jobs if j.start == M) == [1] * 6


def test_a_fall_that_sizes_cannot_match_keeps_the_running_count_exact() -> None:
    # one 4-GPU job; running falls to 3: the 4-GPU job ends and 3 GPUs start afresh
    jobs, stats = queue_jobs([0, M], [4, 3], [0, 0], 2 * M, PRIOR, running_jobs=[1, 1])
    assert stats.running_error_unit_seconds == 0
    assert sum(j.size for j in jobs if j.start == M) == 3
    assert [j.stop for j in jobs if j.start == 0] == [M]


def test_jobs_still_waiting_at_the_end_never_started() -> None:
    jobs, stats = queue_jobs([0, M], [0, 0], [0, 8], 2 * M, {8: 1.0}, pending_jobs=[0, 1])
    assert jobs == [SynthJob(8, M, None, 2 * M)]
    assert stats.never_started == 1 and jobs[0].run == 0 and jobs[0].wait == M


def test_split_takes_the_counted_jobs_or_the_mean() -> None:
    assert split(4, 2, PRIOR, 1.5) == [2, 2]
    assert split(4, 4, PRIOR, 1.5) == [1, 1, 1, 1]
    assert split(3, 1, PRIOR, 1.0) == [3]  # a count the data gives wins over the prior
    assert sum(split(10, None, PRIOR, 2.0)) == 10 and len(split(10, None, PRIOR, 2.0)) == 5
    assert split(5, 9, PRIOR, 1.0) == [1] * 5  # 9 jobs of 5 GPUs: impossible, mean used
    assert split(0, 3, PRIOR, 1.0) == []
    with pytest.raises(ValueError, match="positive sizes"):
        split(3, 1, {0: 1.0}, 1.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("end_order", ["lifo", "random"])
def test_random_counts_are_reproduced_and_work_is_what_ran(seed: int, end_order: str) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    running = np.cumsum(rng.integers(-3, 4, n)).clip(0)
    pending = np.cumsum(rng.integers(-2, 3, n)).clip(0)
    times = np.arange(n) * M
    jobs, stats = queue_jobs(
        times,
        running,
        pending,
        n * M,
        PRIOR,
        end_order=end_order,
        seed=seed,  # type: ignore[arg-type]
    )
    assert stats.running_error_unit_seconds == 0
    at = times + 1.0
    run_now = np.zeros(n)
    wait_now = np.zeros(n)
    for j in jobs:
        start = j.start if j.start is not None else n * M
        run_now += j.size * ((at >= start) & (at < j.stop))
        wait_now += j.size * ((at >= j.submit) & (at < start))
        assert j.submit <= start <= j.stop
    assert np.array_equal(run_now, running)
    # waiting is reproduced, counting the waits of jobs withdrawn from the queue (a fall that
    # no start explains: they never ran, so they are not jobs)
    assert stats.pending_error_unit_seconds == 0
    assert wait_now.sum() * M + stats.withdrawn_unit_seconds == pytest.approx(pending.sum() * M)
    work = sum(j.size * j.run for j in jobs)
    assert work == pytest.approx(float(running.sum() * M))


def test_bad_series_are_refused() -> None:
    with pytest.raises(ValueError, match="same length"):
        queue_jobs([0, M], [1], [0, 0], 2 * M, PRIOR)
    with pytest.raises(ValueError, match="negative"):
        queue_jobs([0, M], [1, -1], [0, 0], 2 * M, PRIOR)
    with pytest.raises(ValueError, match="increase"):
        queue_jobs([M, 0], [1, 1], [0, 0], 2 * M, PRIOR)
    with pytest.raises(ValueError, match="end"):
        queue_jobs([0, M], [1, 1], [0, 0], M, PRIOR)
