"""The paper's genetic algorithm, supplement Algorithms 2-11, written as printed in plain
Python so that its cost can be measured next to ``nsga2`` (supplement Table 5: 35.51 s
for 10 clients, population 50).

Kept as printed: the representation (a list of per-client layer lists), objectives
recomputed inside every DOMINATES call (Algorithms 4, 5, 7), the O(P^2) NON_DOMINATED_SORT
that only returns the first front (Algorithm 6), SELECT re-sorting the whole population
for every parent (Algorithm 8, hence O(P^3) dominance tests per generation), crowding-
distance weighted parent choice with non-finite distances set to 1e-6, union crossover
(Algorithm 10) and per-individual mutation with rate 0.5 (§C.3).

Fixed slips, because they would break the budget or make the step meaningless:

* Algorithm 3 draws k_i layers with RANDOM_CHOICES (with replacement), which can give a
  client fewer than k_i distinct layers; here they are drawn without replacement, with
  probability proportional to importance.
* Algorithm 11 resamples ``range(num_layers)`` with num_layers = k_i, i.e. always sets
  layers 0..k_i-1; here k_i layers are sampled from all L layers.
* Algorithm 9 writes infinite distances to positions 0 and -1 of the unsorted list; here
  they go to the boundary solutions of each sorted order, as NSGA-II defines it.

The returned solution follows the shared archive rule (archive.py), not line 23's
minimum-diversity member, so all algorithms are picked the same way.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

import numpy as np

from metaheuristics.problem import Instance
from metaheuristics.search import Batch, Context

DEFAULTS = {"pop_size": 50, "n_gen": 20, "mutation_rate": 0.5}


class _PaperGA:
    def __init__(self, instance: Instance, seed: int, pop_size: int, mutation_rate: float):
        self.scores = instance.scores.tolist()
        self.budgets = instance.budgets.tolist()
        self.weights = instance.sampling_weights.tolist()
        self.n_layers = instance.n_layers
        self.pop_size = pop_size
        self.mutation_rate = mutation_rate
        self.rng = random.Random(seed)

    # Algorithms 4 and 5
    def diversity(self, individual: list[list[int]]) -> float:
        counts = [0] * self.n_layers
        for layers in individual:
            for layer in layers:
                counts[layer] += 1
        mean = sum(counts) / len(counts)
        variance = sum((c - mean) ** 2 for c in counts) / len(counts)
        return math.sqrt(variance)

    def importance(self, individual: list[list[int]]) -> float:
        total = 0.0
        for client, layers in enumerate(individual):
            for layer in layers:
                total += self.scores[client][layer]
        return total

    # Algorithm 7
    def dominates(self, a: list[list[int]], b: list[list[int]]) -> bool:
        imp1, div1 = self.importance(a), self.diversity(a)
        imp2, div2 = self.importance(b), self.diversity(b)
        return (imp1 >= imp2 and div1 <= div2) and (imp1 > imp2 or div1 < div2)

    # Algorithm 6 (returns [first front] as printed)
    def non_dominated_sort(self, population: list) -> list[list[int]]:
        first = []
        for i, ind1 in enumerate(population):
            dominance_count = 0
            for ind2 in population:
                if self.dominates(ind1, ind2):
                    pass  # dominated_solutions[ind1] is built but never used
                elif self.dominates(ind2, ind1):
                    dominance_count += 1
            if dominance_count == 0:
                first.append(i)
        return [first]

    # Algorithm 9
    def crowding_distance(self, front: list) -> list[float]:
        distances = [0.0] * len(front)
        for objective in (self.importance, self.diversity):
            order = sorted(range(len(front)), key=lambda i: objective(front[i]))
            distances[order[0]] = distances[order[-1]] = math.inf
            for j in range(1, len(front) - 1):
                gap = objective(front[order[j + 1]]) - objective(front[order[j - 1]])
                distances[order[j]] += gap
        return distances

    # Algorithm 8
    def select(self, population: list) -> list[list[int]]:
        front = self.non_dominated_sort(population)[0]
        distances = self.crowding_distance([population[i] for i in front])
        distances = [d if math.isfinite(d) else 1e-6 for d in distances]
        total = sum(distances)
        probs = [(d + 1e-6) / total for d in distances]
        return population[self.rng.choices(front, weights=probs, k=1)[0]]

    # Algorithm 3
    def initialize_population(self) -> list:
        population = []
        for _ in range(self.pop_size):
            individual = []
            for client, k in enumerate(self.budgets):
                weights = list(self.weights[client])
                chosen: list[int] = []
                for _ in range(k):
                    layer = self.rng.choices(range(self.n_layers), weights=weights, k=1)[0]
                    chosen.append(layer)
                    weights[layer] = 0.0
                individual.append(sorted(chosen))
            population.append(individual)
        return population

    # Algorithm 10
    def crossover(self, parent1: list, parent2: list) -> tuple[list, list]:
        child1, child2 = [], []
        for client, k in enumerate(self.budgets):
            combined = sorted(set(parent1[client]) | set(parent2[client]))
            child1.append(sorted(self.rng.sample(combined, k)))
            child2.append(sorted(self.rng.sample(combined, k)))
        return child1, child2

    # Algorithm 11
    def mutate(self, individual: list) -> list:
        if self.rng.random() < self.mutation_rate:
            client = self.rng.randint(0, len(self.budgets) - 1)
            layers = self.rng.sample(range(self.n_layers), self.budgets[client])
            individual[client] = sorted(layers)
        return individual

    # Algorithm 2, lines 3-22
    def next_generation(self, population: list) -> list:
        new_population: list = []
        for front in self.non_dominated_sort(population):
            members = [population[i] for i in front]
            if len(new_population) + len(members) <= self.pop_size:
                new_population.extend(members)
            else:
                new_population.extend(members[: self.pop_size - len(new_population)])
                break
        while len(new_population) < self.pop_size:
            parent1, parent2 = self.select(population), self.select(population)
            child1, child2 = self.crossover(parent1, parent2)
            new_population.append(self.mutate(child1))
            if len(new_population) < self.pop_size:
                new_population.append(self.mutate(child2))
        return new_population


def _to_masks(population: list, n_layers: int) -> np.ndarray:
    masks = np.zeros((len(population), len(population[0]), n_layers), dtype=bool)
    for p, individual in enumerate(population):
        for client, layers in enumerate(individual):
            masks[p, client, layers] = True
    return masks


def steps(ctx: Context, mutation_rate: float) -> Iterator[Batch]:
    """Algorithm 2 for ``ctx.n_gen`` generations, one batch per generation."""
    ga = _PaperGA(ctx.instance, ctx.seed, ctx.pop_size, mutation_rate)
    population = ga.initialize_population()
    for generation in range(ctx.n_gen + 1):
        if generation:
            population = ga.next_generation(population)
        masks = _to_masks(population, ctx.instance.n_layers)
        yield (masks, *ctx.instance.evaluate(masks))
