"""Benchmark: Kueue's own scheduler-performance runner (with minimalkueue) and fleetshare's
operator on the same generator config, back to back on this machine, in one table.

1. **Kueue**: ``runner`` and ``minimalkueue`` of ``sigs.k8s.io/kueue`` v0.17.0
   (``test/performance/scheduler``; ``make kueue-bins``: tools/kueue/build.sh), run as
   Kueue's ``make run-performance-scheduler`` runs them: an envtest control plane (the
   project's kube-apiserver and etcd, ``KUBEBUILDER_ASSETS``), Kueue's CRDs from the module
   (``PROJECT_DIR``), ``--generatorConfig`` the baseline config (scaled). Its own measures are
   its ``summary.yaml`` (average CQ usage of the nominal quota, mean time to admission per
   class by the runner's clock) and ``minimalkueue.stats.yaml`` (the controller's rusage).
   Besides, this script watches the Workloads through the runner's kubeconfig for their
   timestamps, and samples minimalkueue's CPU from ``/proc``.
2. **fleetshare**: ``kueue_perf_api.py`` on the same shape (its own control plane with
   kube-scheduler, the Job controller and a timed kubelet; the operator in a process of its
   own, its client limited like minimalkueue's, 50 QPS / burst 100): its own measures are
   its recorder's (:mod:`kueue_measures`).

The common measures are computed the same way for both (:func:`kueue_measures.server_measures`),
from the timestamps on the API objects: time to admission from the server's
``creationTimestamp`` to the last admission as the controller wrote it (whole seconds), and
useful usage = Σ CPU x running time / window / nominal quota, the window from the first
creation to the last finish. Controller CPU is the controller process's user + system time
from ``/proc`` (start-up included).

``--scale 0.1`` keeps a tenth of the queues (1 cohort x 3 queues, 1,500 workloads), each
queue's load, quota and arrivals Kueue's.

    PYTHONPATH=src .venv/bin/python bench/kueue_side_by_side.py --scale 0.1 \\
        --out bench/results/kueue_side_by_side_scale0.1.json
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (str(ROOT / "src"), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

from kueue_measures import Stamped, epoch, server_measures  # noqa: E402
from run_info import machine, proc_cpu_s  # noqa: E402

KUEUE_BUILD = ROOT / "tools" / "kueue" / "build.sh"
KUBE_BUILD = ROOT / "tools" / "kube" / "build.sh"
BASELINE = "test/performance/scheduler/configs/baseline/generator.yaml"
CLASS_LABEL = "kueue.x-k8s.io/performance-scheduler-class"
RUNNING_LABEL = "kueue.x-k8s.io/performance-scheduler-running-ms"


# -- the generator config (pure) --------------------------------------------------------------


def scaled_config(config: dict[str, Any], scale: float) -> tuple[dict[str, Any], int, int]:
    """Kueue's generator config with ``scale`` of its queues: whole cohorts when that is a whole
    number of them, else one cohort of the scaled number of queues; with the shape (cohorts,
    queues per cohort)."""
    out = json.loads(json.dumps(config))
    (cohort,) = out["cohorts"]
    (qset,) = cohort["queuesSets"]
    cohorts, queues = int(cohort["count"]), int(qset["count"])
    scaled_cohorts = cohorts * scale
    if scaled_cohorts >= 1 and scaled_cohorts == int(scaled_cohorts):
        cohorts = int(scaled_cohorts)
    else:
        queues, cohorts = max(1, round(cohorts * queues * scale)), 1
    cohort["count"], qset["count"] = cohorts, queues
    return out, cohorts, queues


def check_same(config: dict[str, Any]) -> None:
    """Fail unless the config's queues and workload sets are the ones fleetshare's side
    generates (:mod:`fleetshare.traces.kueue_generator`)."""
    from fleetshare.traces import kueue_generator as kg

    (qset,) = config["cohorts"][0]["queuesSets"]
    ours = [(wc.name, wc.count, wc.interval_ms, wc.runtime_ms, wc.priority, wc.cpu)
            for wc in kg.CLASSES]  # fmt: skip
    theirs = [(w["className"], s["count"], s["creationIntervalMs"], w["runtimeMs"],
               w["priority"], int(w["request"]))
              for s in qset["workloadsSets"] for w in s["workloads"]]  # fmt: skip
    quota = (int(qset["nominalQuota"]), int(qset["borrowingLimit"]))
    if ours != theirs or quota != (kg.NOMINAL_CPU, kg.BORROWING_LIMIT_CPU):
        raise SystemExit(f"the generator config differs from fleetshare's: {theirs} {quota}")


def cpu_of(quantity: str) -> float:
    """A CPU quantity ("1", "500m") in CPUs."""
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def stamped_workload(wl: dict[str, Any]) -> Stamped:
    """One Kueue Workload as a :class:`Stamped` record."""
    meta = wl["metadata"]
    labels = meta.get("labels") or {}
    cpu = 0.0
    for ps in wl["spec"]["podSets"]:
        for c in ps["template"]["spec"]["containers"]:
            req = ((c.get("resources") or {}).get("requests") or {}).get("cpu", "0")
            cpu += cpu_of(str(req)) * int(ps.get("count", 1))
    conds = {c["type"]: c for c in (wl.get("status") or {}).get("conditions") or ()}

    def when(kind: str) -> float | None:
        c = conds.get(kind)
        return epoch(c.get("lastTransitionTime")) if c and c.get("status") == "True" else None

    created = epoch(meta["creationTimestamp"])
    assert created is not None
    return Stamped(labels.get(CLASS_LABEL, "?"), cpu, int(labels.get(RUNNING_LABEL, 0)) / 1000,
                   created, when("Admitted"), when("Finished"))  # fmt: skip


# -- Kueue's side ------------------------------------------------------------------------------


def built(script: Path, *args: str) -> Path:
    """The directory a build script prints (building when needed)."""
    out = subprocess.run(["bash", str(script), *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{script}: {out.stderr.strip()[-1000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


class WorkloadWatch:
    """Kueue's Workloads through the runner's kubeconfig: the last version of each."""

    def __init__(self, kubeconfig: Path) -> None:
        from fleetshare.operator.kube import Kube, Resource, load_client
        from fleetshare.operator.watch import Watcher

        self.kube = Kube(load_client(str(kubeconfig)))
        res = Resource("Workload", "kueue.x-k8s.io/v1beta2", "workloads", True)
        self.inbox: queue.Queue[tuple[str, str, Any]] = queue.Queue()
        self.stop_event = threading.Event()
        self.watcher = Watcher(self.kube, res, self.inbox, self.stop_event)
        self.last: dict[str, dict[str, Any]] = {}
        self.thread = threading.Thread(target=self._run, name="workloads", daemon=True)

    def start(self) -> None:
        self.watcher.start()
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=5)

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                what, _, payload = self.inbox.get(timeout=0.2)
            except queue.Empty:
                continue
            for obj in payload[1] if what == "sync" else [payload[1]]:
                self.last[obj["metadata"]["uid"]] = obj


def child_pid(parent: int, name: str) -> int | None:
    """A child process of ``parent`` called ``name`` (from /proc), if any."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == parent and comm == name[:15]:
            return int(d.name)
    return None


def wait_for(path: Path, proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Until ``path`` exists (or the process ends, or ``timeout`` passes: an error)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not appear (runner rc {proc.poll()})")
        time.sleep(0.1)


FLEETSHARE_CONTROLLER = "fleetshare-workloads"
"""The name of the program Kueue's runner starts in minimalkueue's place in the workloads
mode (its stats file is named after it)."""


def controller_script(python: str, governor: Path, stats: Path) -> str:
    """The program Kueue's runner starts as its controller (``--minimalKueue``) in the
    workloads mode: fleetshare's governor of Kueue's Workloads (``kueue_workloads.py``) in
    the same process (``exec``: the runner's rusage and /proc are the governor's), the
    runner's arguments passed on."""
    return f'#!/bin/sh\nexec "{python}" "{governor}" --stats "{stats}" "$@"\n'


def run_kueue(
    config: dict[str, Any],
    nominal: float,
    timeout: float,
    keep: Path | None,
    controller: str = "kueue",
) -> dict[str, Any]:
    """Kueue's runner on ``config`` with minimalkueue as its controller (``controller``
    "kueue"), or fleetshare's governor of the runner's Workloads ("fleetshare": the
    workloads mode); the runner's own measures and the common ones."""
    bins, src = built(KUEUE_BUILD), built(KUEUE_BUILD, "--src")
    kube_bins = built(KUBE_BUILD, "--where")
    work = keep or Path(tempfile.mkdtemp(prefix=f"fleetshare-{controller}-runner-"))
    work.mkdir(parents=True, exist_ok=True)
    gen = work / "generator.yaml"
    gen.write_text(yaml.safe_dump(config, sort_keys=False))
    program, comm = bins / "minimalkueue", "minimalkueue"
    if controller == "fleetshare":
        program = work / FLEETSHARE_CONTROLLER
        program.write_text(controller_script(sys.executable, HERE / "kueue_workloads.py",
                                             work / "fleetshare-stats.json"))  # fmt: skip
        program.chmod(0o755)
        comm = Path(sys.executable).name
    env = {**os.environ, "KUBEBUILDER_ASSETS": str(kube_bins), "PROJECT_DIR": str(src)}
    cmd = [str(bins / "runner"), "--o", str(work), "--crds", f"{src}/config/components/crd/bases",
           f"--generatorConfig={gen}", f"--minimalKueue={program}",
           f"--timeout={int(timeout)}s", "--withLogs=true", "--logToFile=true"]  # fmt: skip
    log = (work / "runner.log").open("wb")
    load_before = [round(x, 2) for x in os.getloadavg()]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    watch: WorkloadWatch | None = None
    cpu: float | None = None
    try:
        wait_for(work / "kubeconfig", proc, 120)
        watch = WorkloadWatch(work / "kubeconfig")
        watch.start()
        pid = None
        while proc.poll() is None:  # minimalkueue's CPU until it ends
            pid = pid or child_pid(proc.pid, comm)
            sample = proc_cpu_s(pid) if pid else None
            cpu = sample if sample is not None else cpu
            time.sleep(0.5)
        wall = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        log.close()
        if watch is not None:
            watch.stop()
    if proc.returncode != 0:
        tail = (work / "runner.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"Kueue's runner failed (rc {proc.returncode}): {tail}")
    summary = yaml.safe_load((work / "summary.yaml").read_text())
    stats = yaml.safe_load((work / f"{program.name}.stats.yaml").read_text())
    counts = work / "fleetshare-stats.json"
    governor = json.loads(counts.read_text()) if counts.exists() else None
    assert watch is not None
    stamped = [stamped_workload(w) for w in watch.last.values()]
    if keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "controller": controller,
        "runner_wall_s": round(wall, 1),
        "load_average_before": load_before,
        "own": {"summary": summary, "minimalkueue_stats": stats},
        **({"governor": governor} if governor is not None else {}),
        "controller_cpu_s_proc": cpu,
        "controller_cpu_s_rusage": round((stats["userMs"] + stats["sysMs"]) / 1000, 1),
        "server_timestamps": server_measures(stamped, nominal),
    }


# -- fleetshare's side -------------------------------------------------------------------------


def run_fleetshare(shape: str, qps: float, timeout: float) -> dict[str, Any]:
    """``kueue_perf_api.py`` once on ``shape`` (``CxQ``), in a process of its own."""
    cmd = [sys.executable, str(HERE / "kueue_perf_api.py"), "--one", "--scale", shape,
           "--qps", str(qps), "--timeout", str(timeout)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout + 600)
    wall = time.monotonic() - t0
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"kueue_perf_api.py failed: {out.stderr.strip()[-2000:]}")
    return {**json.loads(lines[-1]), "harness_wall_s": round(wall, 1)}


# -- the table ---------------------------------------------------------------------------------


def runner_rows(kueue: dict[str, Any], fs: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The workloads mode's rows: both columns by the runner's own measures (its summary, its
    stats of the controller process) and the common ones."""

    def own(run: dict[str, Any]) -> dict[str, Any]:
        summary = run["own"]["summary"]
        classes = summary["clusterQueueClasses"]
        usage = sum(c["cpuAverageUsage"] for c in classes.values()) / max(1, len(classes))
        quota = sum(c["nominalQuota"] for c in classes.values()) / max(1, len(classes))
        wl = summary["workloadClasses"]
        stats = run["own"]["minimalkueue_stats"]
        return {
            "wall": f"{stats['wallMs'] / 1000:.1f}",
            "usage": f"{100 * usage / max(quota, 1):.1f}",
            "evictions": str(sum(c.get("totalEvictions", 0) for c in wl.values())),
            **{cls: f"{wl[cls]['averageTimeToAdmissionMs'] / 1000:.2f}" if cls in wl else "-"
               for cls in ("small", "medium", "large")},
            "cpu": f"{(stats['userMs'] + stats['sysMs']) / 1000:.1f}",
        }  # fmt: skip

    k, f = own(kueue), own(fs)
    ks, fss = kueue["server_timestamps"], fs["server_timestamps"]
    out = [
        ("controller wall (s): runner's stats", k["wall"], f["wall"]),
        ("runner wall (s): control plane start to end", str(kueue["runner_wall_s"]),
         str(fs["runner_wall_s"])),
        ("usage (%): runner's recorder (CQ usage / nominal)", k["usage"], f["usage"]),
        ("useful usage (%): work / window / nominal", str(ks["useful_usage_percent"]),
         str(fss["useful_usage_percent"])),
        ("window (s): first creation to last finish", str(ks["window_s"]), str(fss["window_s"])),
        ("finished / workloads", f"{ks['finished']} / {ks['workloads']}",
         f"{fss['finished']} / {fss['workloads']}"),
        ("evictions: runner's recorder", k["evictions"], f["evictions"]),
    ]  # fmt: skip
    for cls in ("small", "medium", "large"):
        out.append((f"time to admission {cls} (s): runner's recorder", k[cls], f[cls]))
        out.append((f"time to admission {cls} (s): server timestamps",
                    str(ks["mean_time_to_admission_s"].get(cls)),
                    str(fss["mean_time_to_admission_s"].get(cls))))  # fmt: skip
    out.append(("controller CPU (s): runner's rusage", k["cpu"], f["cpu"]))
    out.append(("controller CPU (s): /proc", str(kueue["controller_cpu_s_proc"]),
                str(fs["controller_cpu_s_proc"])))  # fmt: skip
    return out


def rows(kueue: dict[str, Any], fs: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The table's rows: (measure, Kueue, fleetshare)."""
    ks, fss = kueue["server_timestamps"], fs["server_timestamps"]
    classes = kueue["own"]["summary"]["clusterQueueClasses"]
    k_usage = sum(c["cpuAverageUsage"] for c in classes.values()) / max(1, len(classes))
    k_nominal = sum(c["nominalQuota"] for c in classes.values()) / max(1, len(classes))
    wl = kueue["own"]["summary"]["workloadClasses"]
    k_wall = kueue["own"]["minimalkueue_stats"]["wallMs"] / 1000
    out = [
        ("wall (s): tool's own", f"{k_wall:.1f} (minimalkueue's life: Kueue's maxWallMs)",
         f"{fs['wall_s']} (first creation to last release)"),
        ("harness wall (s): control plane start to end", f"{kueue['runner_wall_s']} (runner)",
         f"{fs.get('harness_wall_s')} (kueue_perf_api.py --one)"),
        ("usage (%): tool's own", f"{100 * k_usage / k_nominal:.1f} (CQ average usage)",
         f"{fs['kueue']['average_usage_percent']} (admitted CPU x time)"),
        ("useful usage (%): work / window / nominal", str(ks["useful_usage_percent"]),
         str(fss["useful_usage_percent"])),
        ("window (s): first creation to last finish", str(ks["window_s"]), str(fss["window_s"])),
        ("finished / workloads", f"{ks['finished']} / {ks['workloads']}",
         f"{fss['finished']} / {fss['workloads']}"),
    ]  # fmt: skip
    for cls in ("small", "medium", "large"):
        own_k = wl.get(cls, {}).get("averageTimeToAdmissionMs")
        own_f = fs["kueue"]["mean_time_to_admission_s"].get(cls)
        out.append((f"time to admission {cls} (s): server timestamps",
                    str(ks["mean_time_to_admission_s"].get(cls)),
                    str(fss["mean_time_to_admission_s"].get(cls))))  # fmt: skip
        out.append((f"time to admission {cls} (s): tool's own",
                    "-" if own_k is None else f"{own_k / 1000:.2f}", str(own_f)))  # fmt: skip
    out.append(("controller CPU (s): /proc", str(kueue["controller_cpu_s_proc"]),
                str(fs.get("operator_proc_cpu_s"))))  # fmt: skip
    out.append(("controller CPU (s): tool's own", f"{kueue['controller_cpu_s_rusage']} (rusage)",
                f"{fs.get('operator_process_cpu_s')} (process_time, measured part)"))  # fmt: skip
    return out


def table(lines: list[tuple[str, str, str]], fleetshare: str = "fleetshare operator") -> str:
    """The rows as an aligned text table."""
    head = ("measure", "Kueue v0.17.0 + minimalkueue", fleetshare)
    widths = [max(len(r[i]) for r in [head, *lines]) for i in range(3)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*r) for r in [head, *lines])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="share of Kueue's queues")
    parser.add_argument("--qps", type=float, default=50.0, help="the operator client's QPS")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per tool")
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    parser.add_argument("--keep", type=Path, help="keep Kueue's runner output in this dir")
    parser.add_argument("--only", choices=["kueue", "fleetshare"], help="run one side")
    parser.add_argument(
        "--mode",
        choices=["jobs", "workloads"],
        default="jobs",
        help="jobs: fleetshare's operator on Jobs (kueue_perf_api.py); workloads: Kueue's "
        "runner both times, fleetshare governing its Workloads (kueue_workloads.py) in "
        "minimalkueue's place (like for like)",
    )
    args = parser.parse_args(argv)
    built(KUEUE_BUILD)  # the module's sources come with the build (a no-op when built)
    src = built(KUEUE_BUILD, "--src")
    baseline = yaml.safe_load((src / BASELINE).read_text())
    config, cohorts, queues = scaled_config(baseline, args.scale)
    check_same(config)
    shape = f"{cohorts}x{queues}"
    nominal = 20.0 * cohorts * queues
    report: dict[str, Any] = {"benchmark": "kueue_side_by_side", "mode": args.mode,
                              "scale": args.scale, "shape": shape,
                              "generator_config": config}  # fmt: skip
    if args.only != "fleetshare":
        report["kueue"] = run_kueue(config, nominal, args.timeout, args.keep)
        print(json.dumps(report["kueue"]["server_timestamps"]), file=sys.stderr)
    if args.only != "kueue":
        if args.mode == "workloads":
            keep = args.keep.with_name(args.keep.name + "-fleetshare") if args.keep else None
            report["fleetshare"] = run_kueue(config, nominal, args.timeout, keep, "fleetshare")
        else:
            report["fleetshare"] = run_fleetshare(shape, args.qps, args.timeout)
    report["machine"] = machine()
    if "kueue" in report and "fleetshare" in report:
        if args.mode == "workloads":
            report["table"] = runner_rows(report["kueue"], report["fleetshare"])
            print(table(report["table"], "fleetshare (kueue_workloads.py)"))
        else:
            report["table"] = rows(report["kueue"], report["fleetshare"])
            print(table(report["table"]))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
