"""Server-side layer assignment for F3OCUS (paper §5.2-5.3, supplement §A).

Turns every client's layer-importance scores into one layer mask per client with exactly
k_i layers, maximising summed importance and minimising the spread of the layer-selection
histogram (Eq. 21), with NSGA-II (pymoo), MOPSO, SA, ACO, ABC, the paper's own GA, and
non-optimising references.
"""

from metaheuristics.api import ALGORITHMS, optimize
from metaheuristics.indicators import hypervolume, normalize_front
from metaheuristics.result import Assignment, Front

__all__ = ["ALGORITHMS", "Assignment", "Front", "hypervolume", "normalize_front", "optimize"]
