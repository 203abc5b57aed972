"""Reading the plugin's metrics off a server's /metrics, for the tests that watch them move."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from .api import Api

Samples = dict[tuple[str, frozenset], float]


async def scrape(api: Api, prefix: str = "engine_plugins_") -> Samples:
    """Every sample on /metrics whose name starts with *prefix* (the plugin's by default), by name and labels."""
    response = await api.http.get("/metrics")
    assert response.status_code == 200, response.text
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name.startswith(prefix):
                samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0 when it is not there (a counter not yet incremented)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str) -> float:
    """The sum of one metric's samples over all their labels (an engine's counter per model and rank)."""
    return sum(v for (n, _), v in samples.items() if n == name)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    """How much one sample grew between two scrapes."""
    return value(after, name, **labels) - value(before, name, **labels)
