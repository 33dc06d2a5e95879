"""``fleetshare simulate``: sharing policies compared on one trace or scenario.

- :mod:`~fleetshare.simulate.variants` -- the policies (static quotas, idle sharing with borrow
  limits, fair share on/off; fixed or autoscaled cluster) as changes to one base policy;
- :mod:`~fleetshare.simulate.run` -- inputs (traces, scenario files), the runs, in parallel;
- :mod:`~fleetshare.simulate.metrics` -- metrics reconstructed from each run's event log;
- :mod:`~fleetshare.simulate.report` -- the comparison table, JSON and the HTML report;
- :mod:`~fleetshare.simulate.showcase` -- what runs with no arguments.

See ``docs/simulate.md``. The package is callable: ``fleetshare.simulate(...)`` is
:func:`fleetshare.simulate.api.simulate` (pandas DataFrames for notebooks).
"""

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    """``fleetshare.simulate(...)`` runs :func:`fleetshare.simulate.api.simulate`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from fleetshare.simulate.api import simulate

        return simulate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
