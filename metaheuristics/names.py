"""Names of the layer-assignment algorithms of `metaheuristics.optimize` (paper §5.3, supplement §A),
importable without the algorithms themselves (pymoo, scipy): the run settings check
``optimizer = <name>`` in every process, also in a deployed ClientApp that never optimises.
`metaheuristics.api` and `metaheuristics.reference` build their tables from these tuples.
"""

SEARCHES: tuple[str, ...] = ("nsga2", "mopso", "sa", "aco", "abc", "paper-ga")
"""The optimising searches (Eq. 21's two objectives)."""
REFERENCES: tuple[str, ...] = ("topk", "random", "last")
"""The non-optimising references of the baselines (`metaheuristics.reference`)."""
ALGORITHMS: tuple[str, ...] = (*SEARCHES, *REFERENCES)
