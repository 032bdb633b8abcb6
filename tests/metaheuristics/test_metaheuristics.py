"""optimize(): budgets, reproducibility, fronts, exact fronts on enumerable instances (NSGA-II
on equal-ish budgets, every optimiser on unequal ones), hypervolume against random, and bad
input."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from metaheuristics import ALGORITHMS, Assignment, hypervolume, optimize
from metaheuristics.indicators import instance_bounds
from metaheuristics.names import SEARCHES
from metaheuristics.problem import make_instance

STOCHASTIC = (*SEARCHES, "random")
# paper-ga is O(P^3) per generation in pure Python; small settings keep the suite fast.
SMALL = {"pop_size": 10, "n_gen": 4}


def dirichlet(n_clients: int, n_layers: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.ones(n_layers), size=n_clients)


def assert_budgets(result: Assignment, budgets) -> None:
    ks = np.asarray(budgets)
    assert result.masks.dtype == bool
    assert result.masks.shape == (len(ks), result.front.masks.shape[2])
    np.testing.assert_array_equal(result.masks.sum(axis=1), ks)
    np.testing.assert_array_equal(
        result.front.masks.sum(axis=2), np.broadcast_to(ks, (len(result.front), len(ks)))
    )


def enumerate_all(scores: np.ndarray, budgets) -> np.ndarray:
    n_layers = scores.shape[1]
    rows = [
        [np.isin(np.arange(n_layers), c) for c in itertools.combinations(range(n_layers), k)] for k in budgets
    ]
    return np.array([np.stack(choice) for choice in itertools.product(*rows)])


def exact_front(scores: np.ndarray, budgets) -> tuple[np.ndarray, np.ndarray]:
    """Exact Pareto front by enumeration: brute-force dominance over the distinct
    objective vectors of every feasible assignment, best importance last."""
    imp, div = make_instance(scores, budgets).evaluate(enumerate_all(scores, budgets))
    points = np.unique(np.round(np.column_stack((imp, div)), 12), axis=0)
    imp, div = points[:, 0], points[:, 1]
    dominated = np.zeros(len(imp), dtype=bool)
    for i in range(len(imp)):
        dominated[i] = np.any((imp >= imp[i]) & (div <= div[i]) & ((imp > imp[i]) | (div < div[i])))
    return imp[~dominated], div[~dominated]


def correlated(n_clients: int, n_layers: int, seed: int) -> np.ndarray:
    """Scores whose clients agree on which layers matter (70% a shared Dirichlet draw), so
    that the clients' top-k pile onto the same layers and the front is long."""
    rng = np.random.default_rng(seed)
    shared = rng.dirichlet(np.ones(n_layers))
    return 0.7 * shared + 0.3 * rng.dirichlet(np.ones(n_layers), size=n_clients)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_gives_exactly_k_layers_for_budgets_1_to_L(algorithm):
    n_layers = 7
    budgets = list(range(1, n_layers + 1))  # includes k = 1 and k = L
    for seed in range(2):
        scores = dirichlet(len(budgets), n_layers, seed)
        result = optimize(scores, budgets, algorithm=algorithm, seed=seed, **SMALL)
        assert_budgets(result, budgets)
    big = dirichlet(12, 20, 5)
    big_budgets = np.random.default_rng(5).integers(1, 21, size=12).tolist()
    assert_budgets(optimize(big, big_budgets, algorithm=algorithm, **SMALL), big_budgets)


@pytest.mark.parametrize("algorithm", STOCHASTIC)
def test_same_seed_is_identical_and_different_seeds_differ(algorithm):
    scores, budgets = dirichlet(6, 12, 1), [3, 2, 4, 1, 5, 3]
    first = optimize(scores, budgets, algorithm=algorithm, seed=7, **SMALL)
    again = optimize(scores, budgets, algorithm=algorithm, seed=7, **SMALL)
    np.testing.assert_array_equal(first.masks, again.masks)
    np.testing.assert_array_equal(first.front.masks, again.front.masks)
    assert first.history == again.history
    others = [optimize(scores, budgets, algorithm=algorithm, seed=s, **SMALL) for s in (8, 9, 10)]
    assert any(
        o.front.masks.shape != first.front.masks.shape or not np.array_equal(o.front.masks, first.front.masks)
        for o in others
    )


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_front_is_mutually_nondominated_consistent_and_contains_the_pick(algorithm):
    scores, budgets = dirichlet(8, 16, 3), [4, 2, 6, 1, 3, 5, 2, 4]
    result = optimize(scores, budgets, algorithm=algorithm, seed=1, **SMALL)
    front = result.front
    imp, div = make_instance(scores, budgets).evaluate(front.masks)
    np.testing.assert_allclose(front.importance, imp, rtol=0, atol=1e-12)
    np.testing.assert_allclose(front.diversity, div, rtol=0, atol=1e-12)
    ge = (imp[:, None] >= imp[None]) & (div[:, None] <= div[None])
    gt = (imp[:, None] > imp[None]) | (div[:, None] < div[None])
    assert not np.any(ge & gt), "some front member dominates another"
    keys = {m.tobytes() for m in front.masks}
    assert len(keys) == len(front), "duplicate masks in the front"
    assert result.masks.tobytes() in keys
    assert_budgets(result, budgets)
    assert result.importance == pytest.approx(
        float(imp[[m.tobytes() for m in front.masks].index(result.masks.tobytes())])
    )


@pytest.mark.parametrize("instance_seed", [0, 1, 2])
def test_nsga2_default_settings_find_the_exact_pareto_front_3x6(instance_seed):
    scores, budgets = dirichlet(3, 6, instance_seed), [2, 3, 2]
    assert len(enumerate_all(scores, budgets)) == 15 * 20 * 15
    exact_imp, exact_div = exact_front(scores, budgets)
    result = optimize(scores, budgets)  # nsga2, pop 50, 20 generations
    order = np.argsort(result.front.importance)
    np.testing.assert_allclose(result.front.importance[order], exact_imp, atol=1e-9)
    np.testing.assert_allclose(result.front.diversity[order], exact_div, atol=1e-9)


# Unequal budgets 1..3 on 4 layers: 9,216 assignments, a 10-point exact front.
ORACLE = (correlated(6, 4, 1), [1, 3, 2, 1, 2, 3])


@pytest.fixture(scope="module")
def oracle_front():
    imp, div = exact_front(*ORACLE)
    assert len(imp) == 10
    return imp, div


@pytest.mark.parametrize("algorithm", ("nsga2", "mopso", "sa", "aco", "abc"))
def test_optimiser_front_lies_on_the_enumerated_front_with_unequal_budgets(algorithm, oracle_front):
    exact_imp, exact_div = oracle_front
    exact_hv = hypervolume(exact_imp, exact_div, instance=ORACLE)
    for seed in range(3):
        front = optimize(*ORACLE, algorithm=algorithm, seed=seed).front  # pop 50, 20 iterations
        imp, div = front.importance, front.diversity
        # nothing beats the exact front, and every point found is on it or dominated by it
        assert not np.any(
            (imp[:, None] >= exact_imp)
            & (div[:, None] <= exact_div)
            & ((imp[:, None] > exact_imp + 1e-9) | (div[:, None] < exact_div - 1e-9))
        )
        on_front = (np.abs(imp[:, None] - exact_imp) < 1e-9) & (np.abs(div[:, None] - exact_div) < 1e-9)
        assert on_front.any(axis=0).sum() >= 8, f"{algorithm} seed {seed}: too few exact front points"
        assert hypervolume(imp, div, instance=ORACLE) >= 0.99 * exact_hv, f"{algorithm} seed {seed}"


def test_random_and_topk_are_far_from_the_enumerated_front(oracle_front):
    exact_hv = hypervolume(*oracle_front, instance=ORACLE)
    for algorithm in ("random", "topk"):
        front = optimize(*ORACLE, algorithm=algorithm).front
        assert hypervolume(front.importance, front.diversity, instance=ORACLE) < 0.6 * exact_hv


def test_every_search_beats_random_on_hypervolume_and_topk_has_max_importance():
    scores, budgets = dirichlet(10, 32, 0), [6, 6, 4, 4, 2, 6, 6, 4, 4, 2]
    instance = (scores, budgets)

    def hv(result: Assignment) -> float:
        return hypervolume(result.front.importance, result.front.diversity, instance=instance)

    random_hv = max(hv(optimize(scores, budgets, algorithm="random", seed=s)) for s in range(5))
    for algorithm in SEARCHES:
        settings = {"pop_size": 20, "n_gen": 5} if algorithm == "paper-ga" else {}
        result = optimize(scores, budgets, algorithm=algorithm, seed=0, **settings)
        assert hv(result) > random_hv, algorithm
    topk = optimize(scores, budgets, algorithm="topk")
    assert topk.importance == pytest.approx(instance_bounds(make_instance(*instance)).importance_max)
    nsga2 = optimize(scores, budgets)
    assert topk.importance >= nsga2.front.importance.max() - 1e-12


def test_reference_solutions_are_what_their_names_say():
    scores, budgets = dirichlet(3, 6, 4), [2, 3, 1]
    last = optimize(scores, budgets, algorithm="last").masks
    assert [np.flatnonzero(r).tolist() for r in last] == [[4, 5], [3, 4, 5], [5]]
    top = optimize(scores, budgets, algorithm="topk").masks
    for row, s, k in zip(top, scores, budgets, strict=True):
        assert set(np.flatnonzero(row)) == set(np.argsort(-s)[:k])


def test_zero_rows_are_legal_and_mean_uniform_importance():
    scores = dirichlet(4, 8, 2)
    scores[1] = 0.0
    budgets = [2, 3, 1, 4]
    for algorithm in ALGORITHMS:
        assert_budgets(optimize(scores, budgets, algorithm=algorithm, **SMALL), budgets)


def test_sa_single_chain_and_histories_have_the_documented_fields():
    scores, budgets = dirichlet(5, 10, 6), [2, 3, 1, 4, 2]
    single = optimize(scores, budgets, algorithm="sa", pop_size=1, n_gen=30)
    assert_budgets(single, budgets)
    for algorithm in SEARCHES:
        result = optimize(scores, budgets, algorithm=algorithm, n_gen=5, pop_size=8)
        assert [h["iteration"] for h in result.history] == list(range(6))
        for h in result.history:
            assert set(h) == {"iteration", "best_importance", "best_diversity", "front_size"}
        assert result.history[-1]["best_importance"] == pytest.approx(result.importance)
        assert result.history[-1]["front_size"] == len(result.front)


def test_to_dict_is_json_and_lists_selected_layers():
    scores, budgets = dirichlet(4, 9, 8), [2, 3, 1, 4]
    result = optimize(scores, budgets, seed=3, n_gen=3)
    data = json.loads(json.dumps(result.to_dict()))
    assert [len(layers) for layers in data["masks"]] == budgets
    assert data["masks"] == [np.flatnonzero(r).tolist() for r in result.masks]
    assert len(data["front"]["masks"]) == len(result.front)
    assert data["algorithm"] == "nsga2" and data["seconds"] >= 0


def test_knee_pick_returns_a_front_member():
    scores, budgets = dirichlet(6, 12, 9), [3, 2, 4, 1, 5, 3]
    weighted = optimize(scores, budgets, seed=0)
    knee = optimize(scores, budgets, seed=0, pick="knee")
    np.testing.assert_array_equal(weighted.front.masks, knee.front.masks)
    assert knee.masks.tobytes() in {m.tobytes() for m in knee.front.masks}


GOOD = (dirichlet(3, 5, 0), [2, 1, 3])


@pytest.mark.parametrize(
    ("scores", "budgets", "kwargs", "match"),
    [
        (np.array([[0.5, np.nan], [0.2, 0.8]]), [1, 1], {}, r"scores.*nan"),
        (np.array([[0.5, np.inf], [0.2, 0.8]]), [1, 1], {}, r"scores.*inf"),
        (np.array([[0.5, -0.1], [0.2, 0.8]]), [1, 1], {}, r"scores.*-0\.1"),
        (np.ones(5), [1], {}, r"scores.*shape \(5,\)"),
        (np.ones((2, 3, 4)), [1, 1], {}, r"scores.*shape \(2, 3, 4\)"),
        (np.ones((0, 4)), [], {}, r"scores.*shape \(0, 4\)"),
        (np.ones((3, 0)), [1, 1, 1], {}, r"scores.*shape \(3, 0\)"),
        ([["a", "b"]], [1], {}, r"scores"),
        (GOOD[0], [2, 1], {}, r"budgets.*3.*got 2"),
        (GOOD[0], [2, 0, 3], {}, r"budgets.*entry 1.*got 0"),
        (GOOD[0], [2, 6, 3], {}, r"budgets.*entry 1.*got 6"),
        (GOOD[0], [2, 1.0, 3], {}, r"budgets.*entry 1.*1\.0"),
        (GOOD[0], [2, True, 3], {}, r"budgets.*entry 1.*True"),
        (GOOD[0], "213", {}, r"budgets.*'213'"),
        (*GOOD, {"algorithm": "nsga3"}, r"algorithm.*'nsga3'"),
        (*GOOD, {"pop": 10}, r"pop.*unknown parameter"),
        (*GOOD, {"algorithm": "sa", "alpha": 1.0}, r"alpha.*unknown parameter.*'sa'"),
        (*GOOD, {"pop_size": 0}, r"pop_size.*got 0"),
        (*GOOD, {"n_gen": 2.5}, r"n_gen.*2\.5"),
        (*GOOD, {"mutation_rate": 1.5}, r"mutation_rate.*1\.5"),
        (*GOOD, {"algorithm": "sa", "cooling": 0.0}, r"cooling.*0\.0"),
        (*GOOD, {"algorithm": "aco", "beta": float("nan")}, r"beta.*nan"),
        (*GOOD, {"crossover": "onepoint"}, r"crossover.*'onepoint'"),
        (*GOOD, {"seed": -1}, r"seed.*-1"),
        (*GOOD, {"seed": 1.5}, r"seed.*1\.5"),
        (*GOOD, {"pick": "best"}, r"pick.*'best'"),
    ],
)
def test_bad_input_raises_value_error_naming_argument_and_value(scores, budgets, kwargs, match):
    with pytest.raises(ValueError, match=match):
        optimize(scores, budgets, **kwargs)


def test_reference_algorithms_accept_and_ignore_population_settings():
    scores, budgets = GOOD
    a = optimize(scores, budgets, algorithm="topk", pop_size=80, n_gen=3)
    b = optimize(scores, budgets, algorithm="topk")
    np.testing.assert_array_equal(a.masks, b.masks)
