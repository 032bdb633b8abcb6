"""Run-wide sections beside `RunConfig`'s own keys: local training and layer scoring. Each is a
frozen dataclass that declares its keys once (name, default, bounds, `methods.base.setting`) and
parses and checks them, as a method's settings do; `RunConfig.training` and `RunConfig.scoring`
hand them out."""

from __future__ import annotations

from dataclasses import dataclass

from methods.base import MethodSettings, setting
from tasks.names import SCORE_MODES


@dataclass(frozen=True)
class TrainingSettings(MethodSettings):
    """A client's local round (AdamW, supplement §C.3): steps and batch size, the adapters' and the
    client's own head's learning rates, weight decay and the share of rounds of linear warm-up."""

    local_steps: int = setting(20, "local-steps", low=1,
                               help="local optimisation steps per round")
    batch_size: int = setting(16, "batch-size", low=1,
                              help="local batch size (dp = 'sample': the expected Poisson batch)")
    physical_batch: int = setting(0, "physical-batch", low=0,
                                  help="most examples one forward and backward pass holds; a larger batch "
                                       "accumulates its gradients over chunks for one step (0 = whole batch)")
    lr: float = setting(1e-4, "lr", low=0.0, strict_low=True,
                        help="AdamW learning rate of the adapters (§C.3)")
    head_lr: float = setting(3e-3, "head-lr", low=0.0, strict_low=True,
                             help="AdamW learning rate of the client's own head and projection")
    weight_decay: float = setting(0.01, "weight-decay", low=0.0,
                                  help="AdamW weight decay")
    warmup_fraction: float = setting(0.1, "warmup-fraction", low=0.0, high=1.0,
                                     help="share of rounds with linear warm-up, then linear decay (§C.3)")

    @property
    def pass_size(self) -> int:
        """The most examples one forward and backward pass holds: what sizes a client's memory (its
        automatic budget, LNTK's pieces, evaluation batches)."""
        return self.physical_batch or self.batch_size


@dataclass(frozen=True)
class ScoringSettings(MethodSettings):
    """How a client scores its layers' importance: the LNTK Jacobian's mode and the batch it uses."""

    mode: str = setting("loss", "score-mode", choices=SCORE_MODES,
                        help="LNTK Jacobian: loss, logit, or paper (supplement Algorithm 1 as printed)")
    batch_size: int = setting(8, "score-batch-size", low=1,
                              help="samples a client scores its layers on")


@dataclass(frozen=True)
class EvaluationSettings(MethodSettings):
    """How much a client evaluates each round: a fixed subset before the last round, where the
    curve only needs to be followed, and everything at the end."""

    subset: int = setting(0, "eval-subset", low=0,
                          help="rounds before the last (round 0 too) score only the first N of each client's "
                               "evaluation questions, a seeded sample fixed for the run; 0 = all")
    exact_match: bool = setting(True, "eval-exact-match",
                                help="eval-answers = 'closed-set': the last round also generates the answers "
                                     "and scores their exact match")

    def questions(self, samples: list, last: bool) -> list:
        """A round's evaluation questions: all of them in the last round, else the first
        ``eval-subset``."""
        return samples if last or not self.subset else samples[:self.subset]


@dataclass(frozen=True)
class FederationSettings(MethodSettings):
    """Who may speak for a site, and how long the server waits for sites."""

    site_registry: str = setting("", "site-registry",
                                 help="JSON file {site: node id} written where each site's key is registered "
                                      "(deploy.launch, deploy.register): a node speaks only for the site its "
                                      "key is registered as; '' = the node's own word (simulation)")
    node_wait: float = setting(600.0, "node-wait", low=0.0, strict_low=True,
                               help="seconds the server waits for min-nodes identified sites before it stops "
                                    "the run, naming the sites missing")
