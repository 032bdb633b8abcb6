"""Server-side layer assignment for F3OCUS (paper §5.2-5.3, supplement §A).

Turns every client's layer-importance scores into one layer mask per client with exactly
k_i layers, maximising summed importance and minimising the spread of the layer-selection
histogram (Eq. 21), with NSGA-II (pymoo), MOPSO, SA, ACO, ABC, the paper's own GA, and
non-optimising references.

The public names load on first use (`lazy_loader`, SPEC 1), so importing a submodule such as
`metaheuristics.names` does not import pymoo and scipy.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "api": ["ALGORITHMS", "optimize"],
    "indicators": ["hypervolume", "normalize_front"],
    "result": ["Assignment", "Front"],
})
