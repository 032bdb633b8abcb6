"""Building blocks of metaheuristics/: objectives, bounds, archive, pick, hypervolume,
moves and pymoo operators, the paper GA's own objectives, and the benchmark script."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pymoo.core.population import Population
from pymoo.operators.selection.tournament import TournamentSelection

from experiments.bench_optimizers import main as bench_main
from metaheuristics import hypervolume, normalize_front
from metaheuristics.aco import build as build_colony
from metaheuristics.archive import ParetoArchive, nondominated, pick_index
from metaheuristics.indicators import Bounds, instance_bounds
from metaheuristics.moves import sample_subsets, swap_one, take_smallest, union_resample
from metaheuristics.nsga2 import LayerProblem
from metaheuristics.operators import (
    ArrayMating,
    ImportanceSampling,
    RowCrossover,
    SwapMutation,
    UnionCrossover,
    dominance_tournament,
)
from metaheuristics.paper_ga import _PaperGA
from metaheuristics.problem import layer_counts, make_instance
from metaheuristics.sa import acceptance
from tests.metaheuristics.test_metaheuristics import correlated, dirichlet, enumerate_all


def random_population(instance, n, seed):
    rng = np.random.default_rng(seed)
    uniform = np.ones((instance.n_clients, instance.n_layers))
    return sample_subsets(uniform, instance.budgets, n, rng)


def test_objectives_match_a_per_solution_computation():
    instance = make_instance(dirichlet(5, 9, 0), [2, 4, 1, 9, 3])
    masks = random_population(instance, 30, 1)
    imp, div = instance.evaluate(masks)
    for m, i, d in zip(masks, imp, div, strict=True):
        assert i == pytest.approx(sum(instance.scores[c, lay] for c, lay in zip(*np.nonzero(m), strict=True)))
        assert d == pytest.approx(m.sum(axis=0).std(), abs=1e-12)  # population std, Algorithm 4


def test_instance_bounds_equal_enumerated_extremes():
    scores, budgets = dirichlet(3, 6, 3), [2, 3, 2]
    instance = make_instance(scores, budgets)
    imp, div = instance.evaluate(enumerate_all(scores, budgets))
    b = instance_bounds(instance)
    assert (b.importance_min, b.importance_max) == pytest.approx((imp.min(), imp.max()))
    assert (b.diversity_min, b.diversity_max) == pytest.approx((div.min(), div.max()))


def test_nondominated_matches_brute_force_and_keeps_one_per_objective_vector():
    rng = np.random.default_rng(4)
    imp = rng.integers(0, 6, 200).astype(float)  # many ties
    div = rng.integers(0, 6, 200).astype(float)
    keep = nondominated(imp, div)
    dominated = np.array(
        [np.any((imp >= a) & (div <= b) & ((imp > a) | (div < b))) for a, b in zip(imp, div, strict=True)]
    )
    expected = {(a, b) for a, b, d in zip(imp, div, dominated, strict=True) if not d}
    assert {(imp[i], div[i]) for i in keep} == expected
    assert len(keep) == len(expected)
    first_of_each = {}
    for i, key in enumerate(zip(imp, div, strict=True)):
        first_of_each.setdefault(key, i)
    assert sorted(keep) == sorted(first_of_each[k] for k in expected)


def test_archive_merges_populations_into_a_nondominated_set():
    instance = make_instance(dirichlet(4, 8, 5), [3, 2, 4, 1])
    archive = ParetoArchive(instance)
    for seed in range(5):
        masks = random_population(instance, 20, seed)
        archive.add(masks, *instance.evaluate(masks))
        archive.record(seed)
    imp, div = instance.evaluate(archive.masks)
    np.testing.assert_allclose(archive.importance, imp)
    everything = np.concatenate([random_population(instance, 20, s) for s in range(5)])
    all_imp, all_div = instance.evaluate(everything)
    expected = nondominated(all_imp, all_div)
    np.testing.assert_allclose(
        np.array(sorted(zip(archive.importance, archive.diversity, strict=True))),
        np.array(sorted(zip(all_imp[expected], all_div[expected], strict=True))),
    )
    assert [h["iteration"] for h in archive.history] == list(range(5))


def test_weighted_pick_is_equal_weight_score_on_normalised_objectives_and_knee_is_the_bend():
    bounds = Bounds(0.0, 10.0, 0.0, 1.0)
    imp = np.array([10.0, 9.0, 5.0, 0.0])
    div = np.array([0.6, 0.3, 0.05, 0.0])
    # weighted 0.5 * imp' - 0.5 * div': 0.2, 0.3, 0.225, 0 -> point 1
    assert pick_index(imp, div, bounds, "weighted") == 1
    # distance to the chord (1, 0.6)-(0, 0), times its length: 0, 0.24, 0.25, 0 -> point 2
    assert pick_index(imp, div, bounds, "knee") == 2
    # Algorithm 2 line 23: the least count std, whatever the importance -> point 3
    assert pick_index(imp, div, bounds, "least-diversity") == 3
    # Algorithm 34's weights: w * imp' - (1 - w) * div'; w = 0.9: 0.84, 0.78, 0.445, 0 -> point 0;
    # w = 0.05: -0.52, -0.24, -0.0225, 0 -> point 3; each by a margin of >= 0.02
    assert pick_index(imp, div, bounds, "weighted", weight=0.9) == 0
    assert pick_index(imp, div, bounds, "weighted", weight=0.05) == 3


def test_hypervolume_known_values_and_normalisation():
    scores, budgets = dirichlet(3, 6, 0), [2, 3, 2]
    b = instance_bounds(make_instance(scores, budgets))
    ideal = hypervolume([b.importance_max], [b.diversity_min], instance=(scores, budgets))
    assert ideal == pytest.approx(1.1 * 1.1)
    worst = hypervolume([b.importance_min], [b.diversity_max], instance=(scores, budgets))
    assert worst == pytest.approx(0.1 * 0.1)
    imp_n, div_n = normalize_front(
        [b.importance_min, b.importance_max], [b.diversity_max, b.diversity_min], (scores, budgets)
    )
    np.testing.assert_allclose(imp_n, [0.0, 1.0])
    np.testing.assert_allclose(div_n, [1.0, 0.0])
    # raw objectives: two points, reference (0, 3): 2*1 + 1*(3-1) - overlap 1*1 = 3
    assert hypervolume([2.0, 1.0], [2.0, 1.0], ref_point=(0.0, 3.0)) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="ref_point"):
        hypervolume([1.0], [1.0])


def test_moves_keep_exact_cardinality_and_do_what_they_claim():
    instance = make_instance(dirichlet(6, 10, 7), [1, 3, 10, 5, 9, 2])
    rng = np.random.default_rng(0)
    a, b = random_population(instance, 40, 1), random_population(instance, 40, 2)
    ks = instance.budgets
    child = union_resample(a, b, ks, rng)
    np.testing.assert_array_equal(child.sum(axis=2), np.broadcast_to(ks, (40, 6)))
    assert not np.any(child & ~(a | b))
    for weights in (None, instance.sampling_weights):
        swapped = swap_one(a, ks, rng, weights)
        np.testing.assert_array_equal(swapped.sum(axis=2), np.broadcast_to(ks, (40, 6)))
        changed = (swapped != a).reshape(40, -1).sum(axis=1)
        assert np.all(changed == 2)  # one layer out, one in
        assert np.all((swapped != a).any(axis=2).sum(axis=1) == 1)  # in exactly one client
        assert not np.any((swapped != a)[:, 2])  # k = L has nothing to swap


def test_take_smallest_keeps_exact_counts_when_keys_tie_and_prefers_lower_index():
    rng = np.random.default_rng(3)
    budgets = np.array([1, 2, 3, 5])
    keys = rng.integers(0, 3, size=(200, 4, 5)).astype(np.float32)  # many ties at the threshold
    masks = take_smallest(keys, budgets)
    expected = np.argsort(np.argsort(keys, axis=-1, kind="stable"), axis=-1) < budgets[:, None]
    np.testing.assert_array_equal(masks, expected)
    flat = np.zeros((1, 1, 6))
    np.testing.assert_array_equal(take_smallest(flat, np.array([2]))[0, 0], [1, 1, 0, 0, 0, 0])


def test_layer_counts_match_a_plain_sum_across_the_255_client_blocks():
    masks = np.random.default_rng(0).random((3, 600, 7)) < 0.9  # counts up to 600 > 255
    np.testing.assert_array_equal(layer_counts(masks), masks.sum(axis=1))


def test_amosa_acceptance_follows_the_three_cases():
    rng = np.random.default_rng(0)
    n = 4000
    cur = (np.full(n, 0.5), np.full(n, 0.5))
    no_archive = (np.zeros(0), np.zeros(0))
    # proposal neither dominated by current nor by the (empty) archive: always taken
    move, jump, _ = acceptance(cur, (np.full(n, 0.6), np.full(n, 0.6)), no_archive, 100.0, rng)
    assert move.all() and not jump.any()
    # proposal dominated by current: logistic in the amount of domination (0.1 * 0.2 = 0.02)
    worse = (np.full(n, 0.4), np.full(n, 0.7))
    move, _, _ = acceptance(cur, worse, no_archive, 0.01, rng)
    assert move.mean() == pytest.approx(1 / (1 + np.exp(0.02 / 0.01)), abs=0.03)
    assert not acceptance(cur, worse, no_archive, 0.0, rng)[0].any()  # below t_end
    # proposal dominates current but two archive points dominate it: jump to the nearer one
    better = (np.full(n, 0.6), np.full(n, 0.4))
    archive = (np.array([0.9, 0.7, 0.1]), np.array([0.1, 0.3, 0.9]))
    move, jump, target = acceptance(cur, better, archive, 100.0, rng)
    assert not (move & jump).any() and (move | jump).all()
    assert (target[jump] == 1).all()  # Δdom 0.1 * 0.1 < 0.3 * 0.3
    assert jump.mean() == pytest.approx(1 / (1 + np.exp(-0.01)), abs=0.03)


def test_aco_ants_trade_importance_for_balance_as_lambda_falls():
    instance = make_instance(correlated(24, 8, 0), [2] * 24)
    rng = np.random.default_rng(0)
    attraction = np.ones((24, 8))
    greedy = build_colony(instance, attraction, np.ones(200), 2.0, rng)
    balanced = build_colony(instance, attraction, np.zeros(200), 2.0, rng)
    for ants in (greedy, balanced):
        np.testing.assert_array_equal(ants.sum(axis=2), np.full((200, 24), 2))
    g_imp, g_div = instance.evaluate(greedy)
    b_imp, b_div = instance.evaluate(balanced)
    assert g_imp.mean() > b_imp.mean()
    assert b_div.mean() < 0.5 * g_div.mean()


def test_importance_sampling_prefers_important_layers():
    scores = np.array([[0.7, 0.1, 0.1, 0.05, 0.05, 0.0]])
    instance = make_instance(scores, [1])
    picks = sample_subsets(instance.sampling_weights, instance.budgets, 20000, np.random.default_rng(0))
    freq = picks[:, 0].mean(axis=0)
    np.testing.assert_allclose(freq[:5], scores[0, :5], atol=0.02)
    assert freq[5] == 0.0


def test_pymoo_operators_preserve_budgets():
    instance = make_instance(dirichlet(5, 8, 3), [1, 8, 4, 2, 7])
    problem = LayerProblem(instance)
    rng = np.random.default_rng(0)
    x = ImportanceSampling().do(problem, 30, random_state=rng).get("X")
    ks = np.broadcast_to(instance.budgets, (30, 5))
    np.testing.assert_array_equal(x.reshape(30, 5, 8).sum(axis=2), ks)
    np.testing.assert_array_equal(
        x[0].reshape(5, 8),
        np.argsort(np.argsort(-instance.scores, axis=1), axis=1) < instance.budgets[:, None],
    )
    pop = Population.new("X", x)
    parents = rng.integers(30, size=(15, 2))
    for crossover in (RowCrossover(prob=1.0), UnionCrossover(prob=1.0)):
        off = crossover.do(problem, pop, parents, random_state=rng).get("X")
        np.testing.assert_array_equal(off.reshape(30, 5, 8).sum(axis=2), ks)
    mutated = SwapMutation(prob=1.0).do(problem, Population.new("X", x.copy()), random_state=rng).get("X")
    np.testing.assert_array_equal(mutated.reshape(30, 5, 8).sum(axis=2), ks)
    assert np.all((mutated != x).sum(axis=1) == 2)


def test_array_mating_returns_unique_new_offspring_within_budget():
    instance = make_instance(dirichlet(4, 6, 1), [2, 3, 1, 4])
    problem = LayerProblem(instance)
    rng = np.random.default_rng(0)
    x = ImportanceSampling().do(problem, 12, random_state=rng).get("X")
    pop = Population.new("X", x)
    imp, div = instance.evaluate(x.reshape(12, 4, 6))
    pop.set("F", np.column_stack((-imp, div)), "crowding", np.ones(12))
    mating = ArrayMating(
        TournamentSelection(func_comp=dominance_tournament), RowCrossover(0.5), SwapMutation(prob=1.0)
    )
    off = mating.do(problem, pop, 12, random_state=rng).get("X")
    assert off.shape == (12, 24)
    ks = np.broadcast_to(instance.budgets, (12, 4))
    np.testing.assert_array_equal(off.reshape(12, 4, 6).sum(axis=2), ks)
    keys = [row.tobytes() for row in off]
    assert len(set(keys)) == 12
    assert not set(keys) & {row.tobytes() for row in x}


def test_paper_ga_python_objectives_match_the_vectorised_ones():
    instance = make_instance(dirichlet(4, 7, 2), [2, 3, 1, 7])
    ga = _PaperGA(instance, seed=0, pop_size=6, mutation_rate=0.5)
    population = ga.initialize_population()
    masks = np.zeros((6, 4, 7), dtype=bool)
    for p, individual in enumerate(population):
        for c, layers in enumerate(individual):
            assert len(set(layers)) == instance.budgets[c]
            masks[p, c, layers] = True
    imp, div = instance.evaluate(masks)
    py_imp = np.array([ga.importance(i) for i in population])
    py_div = np.array([ga.diversity(i) for i in population])
    np.testing.assert_allclose(py_imp, imp, atol=1e-12)
    np.testing.assert_allclose(py_div, div, atol=1e-12)
    # Algorithm 6 on its own (float-noisy, as printed) values
    assert ga.non_dominated_sort(population) == [nondominated_all(py_imp, py_div)]


def nondominated_all(imp, div):
    return [
        i
        for i in range(len(imp))
        if not np.any((imp >= imp[i]) & (div <= div[i]) & ((imp > imp[i]) | (div < div[i])))
    ]


def test_bench_prints_one_json_object_per_algorithm(capsys):
    bench_main(
        [
            "--clients",
            "4",
            "--layers",
            "6",
            "--pop",
            "6",
            "--gens",
            "2",
            "--repeats",
            "2",
            "--algorithms",
            "nsga2,aco,topk",
            "--json",
        ]
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["name"] for r in rows] == ["nsga2", "aco", "topk"]
    for r in rows:
        assert {"name", "median_s", "hv", "hv_ratio", "front_size", "budgets_ok", "reference"} <= set(r)
        assert r["budgets_ok"] is True
        assert r["reference"]["pop_size"] == 24 and r["reference"]["n_gen"] == 20
        assert r["hv_ratio"] == pytest.approx(r["hv"] / r["reference"]["hv"], rel=1e-3)


def test_bench_clients_list_prints_the_growth_table_and_no_reference_leaves_the_ratio_empty(capsys):
    argv = ["--clients", "3,30", "--layers", "6", "--pop", "6", "--gens", "2", "--repeats", "1"]
    bench_main([*argv, "--algorithms", "nsga2,sa", "--no-reference", "--json"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["name"], r["clients"]) for r in rows] == [("nsga2", 3), ("sa", 3), ("nsga2", 30), ("sa", 30)]
    assert all(r["hv_ratio"] is None and r["reference"] is None and r["budgets_ok"] for r in rows)
    bench_main([*argv, "--algorithms", "topk", "--no-reference"])
    out = capsys.readouterr().out
    assert "| algorithm | 3 clients | 30 clients |" in out
    assert out.count("reference: none") == 2


def test_bench_rejects_bad_arguments():
    with pytest.raises(SystemExit):
        bench_main(["--algorithms", "nsga2,foo"])
    with pytest.raises(SystemExit):
        bench_main(["--clients", "2", "--layers", "3", "--budgets", "1,5"])
    with pytest.raises(SystemExit):
        bench_main(["--clients", "2,3", "--budgets", "1,2"])
    with pytest.raises(SystemExit):
        bench_main(["--clients", "0"])
