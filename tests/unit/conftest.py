from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def readme() -> str:
    return (Path(__file__).resolve().parents[2] / "README.md").read_text()
