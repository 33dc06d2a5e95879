"""``fleetshare simulate``: sharing policies compared on one trace or scenario.

- :mod:`~fleetshare.simulate.variants` -- the policies (static quotas, idle sharing with borrow
  limits, fair share on/off; fixed or autoscaled cluster) as changes to one base policy;
- :mod:`~fleetshare.simulate.run` -- inputs (traces, scenario files), the runs, in parallel;
- :mod:`~fleetshare.simulate.metrics` -- metrics reconstructed from each run's event log;
- :mod:`~fleetshare.simulate.report` -- the comparison table, JSON and the HTML report;
- :mod:`~fleetshare.simulate.showcase` -- what runs with no arguments.

See ``docs/simulate.md``.
"""
