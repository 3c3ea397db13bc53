"""The scorer library, at the path every generated `scorer.py` imports (`from wt_otel.scorers import ...`).

The implementation lives in `wt_otel.scoring.scorers`; this module keeps the public path stable.
"""

from wt_otel.scoring.scorers import *  # noqa: F403
from wt_otel.scoring.scorers import __all__  # noqa: F401
