"""Engines in Ray actors: the partial-rollout scenario, the fake actor handle of the fast tests,
and the Ray driver run in an engine's interpreter."""
