"""Compiled rules: (request, upstream outcome) → `Failure` or None."""

from gateway.classify.engine import Classifier, Verdict
from gateway.classify.observation import Observation, ObservationKind

__all__ = ["Classifier", "Observation", "ObservationKind", "Verdict"]
